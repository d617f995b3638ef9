// What JSON mode and structured outputs (infer/json_constraint.h) cost per generated token: JsonConstraint::mask
// over a vocabulary, without and with a schema of the document (and with one that adds patterns, a format and
// bounds, one whose alternatives begin alike, and a tool call's), at each step of writing a fixed JSON document token
// by token (the longest allowed token that spells the document's next bytes, as a tokenizer would). Prints the median
// and mean milliseconds per token and the share spent where the text is inside a free string (where most tokens are
// allowed and taken unread), and for the lazy tool-call mode ("auto", words then calls) the words before its
// trigger: how many steps need a mask at all (JsonConstraint::masks), what those cost, and what finding the tokens
// that hold the trigger whole costs a request.
//
//   zaya_bench_json_mask [--tokenizer PATH] [--vocab N] [--repeat R]
//
// The vocabulary: the 256 byte pieces, the tokenizer's tokens when given, then (up to N, default 262144: ZAYA1's)
// distinct synthetic pieces — words and fragments of English and code with and without a leading space, numbers,
// punctuation, accented and CJK characters — so that the ZAYA1 vocabulary's size is measured without its tokenizer.
#include "data/tokenizer.h"
#include "infer/json_constraint.h"
#include "infer/json_schema.h"
#include "infer/tool_calls.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

using zaya::JsonConstraint;
using zaya::TokenTable;

std::vector<std::string> synthetic_pieces(size_t n, std::vector<std::string> pieces) {
    static const char *words[] = {"the", "of", "and", "to", "in", "is", "for", "on", "with", "that", "as", "by", "this",
                                  "be", "are", "from", "or", "an", "at", "which", "def", "return", "self", "import",
                                  "class", "value", "name", "type", "data", "list", "string", "number", "object",
                                  "true", "false", "null", "json", "key", "index", "result", "error", "http", "www"};
    static const char *marks[] = {"\"", "\":", "\",", "\": \"", "{", "}", "[", "]", "},", "],", ",", ":", ".", "(",
                                  ")", "\n", "\n  ", "  ", "    ", "\\n", "\\\"", "é", "ü", "日本", "中文", "—", "…"};
    uint64_t s = 42;
    auto next = [&s] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return uint32_t(s >> 33);
    };
    std::unordered_set<std::string> seen(pieces.begin(), pieces.end()); // a vocabulary holds each piece once
    while (pieces.size() < n) {
        std::string p;
        switch (next() % 6) {
        case 0: p = std::to_string(next() % 100000); break;
        case 1: p = marks[next() % std::size(marks)]; break;
        default:
            if (next() % 2) p = " ";
            for (uint32_t k = 1 + next() % 3; k > 0; --k) {
                std::string w = words[next() % std::size(words)];
                w = w.substr(0, 1 + next() % w.size()); // fragments too
                if (next() % 4 == 0) w[0] = char(std::toupper(uint8_t(w[0])));
                p += w;
            }
        }
        if (seen.insert(p).second) pieces.push_back(p);
    }
    pieces.resize(n);
    return pieces;
}

} // namespace

int main(int argc, char **argv) {
    std::string tokenizer;
    size_t vocab = 262144;
    int repeat = 3;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--tokenizer" && i + 1 < argc) tokenizer = argv[++i];
        else if (a == "--vocab" && i + 1 < argc) vocab = std::strtoull(argv[++i], nullptr, 10);
        else if (a == "--repeat" && i + 1 < argc) repeat = std::atoi(argv[++i]);
        else {
            fmt::print(stderr, "usage: zaya_bench_json_mask [--tokenizer PATH] [--vocab N] [--repeat R]\n");
            return 2;
        }
    }
    std::vector<std::string> pieces;
    for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, char(b))); // byte pieces: anything is spellable
    if (!tokenizer.empty()) {
        try {
            const zaya::Tokenizer tok = zaya::Tokenizer::load(tokenizer);
            for (int32_t id = 0; id < tok.vocab_size(); ++id) pieces.push_back(tok.token_bytes(id));
        } catch (const std::exception &e) {
            fmt::print(stderr, "zaya_bench_json_mask: {}\n", e.what());
            return 1;
        }
    }
    const auto table = std::make_shared<const TokenTable>(synthetic_pieces(std::max(vocab, pieces.size()), pieces));
    const std::string doc =
        "{\n  \"name\": \"Ada Lovelace\",\n  \"born\": 1815,\n  \"fields\": [\"mathematics\", \"computing\"],\n"
        "  \"notes\": \"She wrote the first algorithm meant for a machine — the Analytical Engine's Bernoulli "
        "numbers.\",\n  \"ratio\": -0.5e3,\n  \"alive\": false,\n  \"links\": {\"wiki\": \"https://en.wikipedia.org/wiki/Ada\", "
        "\"id\": null}\n}";
    const auto schema = zaya::JsonSchema::compile(nlohmann::ordered_json::parse(R"({"type": "object", "properties": {
        "name": {"type": "string"}, "born": {"type": "integer"},
        "fields": {"type": "array", "items": {"type": "string"}},
        "notes": {"type": "string"}, "ratio": {"type": "number"}, "alive": {"type": "boolean"},
        "links": {"type": "object", "properties": {"wiki": {"type": "string"}, "id": {"type": ["string", "null"]}},
                  "required": ["wiki", "id"], "additionalProperties": false}},
        "required": ["name", "born", "fields", "notes", "ratio", "alive", "links"], "additionalProperties": false})"));
    // The same with its strings patterned and its numbers bounded: each patterned string's tokens are read.
    const auto constrained = zaya::JsonSchema::compile(nlohmann::ordered_json::parse(R"({"type": "object",
        "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]+( [A-Z][a-z]+)*$"},
        "born": {"type": "integer", "minimum": 0, "maximum": 2100},
        "fields": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}, "maxItems": 4},
        "notes": {"type": "string", "maxLength": 200}, "ratio": {"type": "number"}, "alive": {"type": "boolean"},
        "links": {"type": "object", "properties": {"wiki": {"type": "string", "pattern": "^https://[^ ]+$"},
                  "id": {"type": ["string", "null"], "format": "uuid"}},
                  "required": ["wiki", "id"], "additionalProperties": false}},
        "required": ["name", "born", "fields", "notes", "ratio", "alive", "links"], "additionalProperties": false})"));
    // The same with alternatives that begin alike, read side by side (pydantic's Union[A, B], int | float).
    const auto alternatives = zaya::JsonSchema::compile(nlohmann::ordered_json::parse(R"({"type": "object",
        "properties": {
        "name": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "string", "format": "email"}]},
        "born": {"type": ["integer", "number"]},
        "fields": {"type": "array", "items": {"type": "string"}},
        "notes": {"type": "string"}, "ratio": {"type": "number"}, "alive": {"type": "boolean"},
        "links": {"anyOf": [{"$ref": "#/$defs/web"}, {"$ref": "#/$defs/book"}]}},
        "required": ["name", "born", "fields", "notes", "ratio", "alive", "links"], "additionalProperties": false,
        "$defs": {"web": {"type": "object", "properties": {"wiki": {"type": "string"}, "id": {"type": "null"}},
                          "required": ["wiki", "id"], "additionalProperties": false},
                  "book": {"type": "object", "properties": {"wiki": {"type": "string"}, "isbn": {"type": "string"}},
                           "required": ["wiki"], "additionalProperties": false}}})"));
    std::vector<float> logits(size_t(table->size()));
    auto summary = [](std::vector<double> v, const char *what = "masks") {
        if (v.empty()) return std::string("none");
        std::sort(v.begin(), v.end());
        double sum = 0;
        for (double x : v) sum += x;
        return fmt::format("median {:.3f} ms, mean {:.3f} ms over {} {}", v[v.size() / 2], sum / double(v.size()),
                           v.size(), what);
    };
    // Tool calls (infer/tool_calls.h): four tools offered, "auto", two calls written compactly.
    const zaya::ApiTools offered = zaya::parse_tools(nlohmann::ordered_json::parse(R"({"tools": [
        {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1,
            "maximum": 14}}, "required": ["city", "unit", "days"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
            "zone": {"type": "string"}}, "required": ["zone"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer"}}, "required": ["query"],
            "additionalProperties": false}}},
        {"type": "function", "function": {"name": "send_mail", "parameters": {"type": "object", "properties": {
            "to": {"type": "string", "format": "email"}, "body": {"type": "string"}}, "required": ["to", "body"],
            "additionalProperties": false}}}]})"));
    const auto tools = zaya::tools_schema(offered);
    const std::string calls = R"(Let me look both up: the weather first, then the "algorithm". {"tool_calls":[)"
                              R"({"name":"get_weather","arguments":{"city":"Ada Lovelace","unit":"c",)"
                              R"("days":3}},{"name":"search","arguments":{"query":"She wrote the first algorithm )"
                              R"(meant for a machine — the Analytical Engine's Bernoulli numbers."}}]})";
    struct Mode {
        const char *label;
        std::shared_ptr<const zaya::JsonSchema> schema;
        const std::string &doc;
        std::string trigger; // lazy: tool_choice "auto"
    };
    const Mode modes[] = {{"json_object", zaya::JsonSchema::any_object(), doc, ""},
                          {"json_schema", schema, doc, ""},
                          {"json_schema with patterns and bounds", constrained, doc, ""},
                          {"json_schema with alternatives that begin alike", alternatives, doc, ""},
                          {"tool calls (4 tools, auto)", tools, calls, zaya::tools_trigger(offered)}};
    for (const auto &[label, s, text, trigger] : modes) {
        std::vector<double> ms, string_ms, free_ms, setup_ms; // free: lazy, before the trigger, masked steps
        int tokens = 0, unmasked = 0;
        for (int r = 0; r < repeat; ++r) {
            const auto t_setup = std::chrono::steady_clock::now();
            JsonConstraint c(table, s, trigger);
            setup_ms.push_back(
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_setup).count());
            size_t at = 0;
            tokens = 0;
            while (!c.complete()) {
                std::fill(logits.begin(), logits.end(), 0.0f);
                const bool in_string = c.held() && c.grammar().in_plain_string(), free = !c.held();
                if (free && !c.masks()) { // the engine builds no mask: every token allowed
                    unmasked += r == 0;
                } else {
                    const auto t0 = std::chrono::steady_clock::now();
                    c.mask(logits.data());
                    const double t =
                        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                    (free ? free_ms : in_string ? string_ms : ms).push_back(t);
                }
                int32_t best = -1;
                for (int32_t id = 0; id < table->size(); ++id) {
                    const std::string_view b = table->bytes(id);
                    if (logits[size_t(id)] == 0.0f && !b.empty() && text.compare(at, b.size(), b) == 0 &&
                        (best < 0 || b.size() > table->bytes(best).size()))
                        best = id;
                }
                if (best < 0) {
                    fmt::print(stderr, "{}: no allowed token spells the document at byte {}\n", label, at);
                    return 1;
                }
                c.advance(best);
                at += table->bytes(best).size();
                ++tokens;
            }
        }
        std::vector<double> all = ms;
        all.insert(all.end(), string_ms.begin(), string_ms.end());
        all.insert(all.end(), free_ms.begin(), free_ms.end());
        fmt::print("{}: vocabulary {} tokens, document {} bytes in {} tokens\n", label, table->size(), text.size(),
                   tokens);
        fmt::print("  inside strings:  {}\n", summary(string_ms));
        fmt::print("  elsewhere:       {}\n", summary(ms));
        if (!trigger.empty()) {
            fmt::print("  words, no mask:  {} tokens\n", unmasked);
            fmt::print("  words, masked:   {}\n", summary(free_ms));
            fmt::print("  per request:     {} (finding the tokens that hold the trigger whole)\n",
                       summary(setup_ms, "requests"));
        }
        fmt::print("  every masked token: {}\n", summary(all));
    }
    return 0;
}
