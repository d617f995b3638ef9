// JSON mode: the byte acceptor (infer/json_grammar.h) against nlohmann::json as the reference parser, the token
// masks (infer/json_constraint.h), and the engine's JSON-mode requests.
#include "core/utf8.h"
#include "infer/engine.h"
#include "infer/json_constraint.h"
#include "infer/openai_api.h"
#include "model/init.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fmt/format.h>
#include <random>
#include <regex>
#include <set>

namespace zaya {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// nlohmann's SAX parser as the reference: the byte offset of the first error, or 0 when the text parses.
struct ErrorAt : nlohmann::json_sax<json> {
    size_t at = 0;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t &) override { return true; }
    bool string(string_t &) override { return true; }
    bool binary(binary_t &) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t &) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string &, const nlohmann::detail::exception &) override {
        at = position;
        return false;
    }
};

// Whether the reference parser fails only for want of more input: its first error is at the end, or none.
// Necessary for s to continue into JSON, not sufficient: it lexes a whole token before parsing it, so "{-" passes.
bool unfinished(const std::string &s) {
    ErrorAt e;
    json::sax_parse(s, &e);
    return e.at == 0 || e.at == s.size() + 1;
}

// Whether some continuation of s parses, by the reference: s and an end of its last token (a literal's, a number's,
// an escape's, a UTF-8 character's, a surrogate pair's), then a space, which makes the parser take that token, or a
// quote, which makes it take the string s ends in (when it does).
bool viable_prefix(const std::string &s) {
    static const std::vector<std::string> ends = {
        "",     "0",      "00",       "000",       "0000",     "0\\udc00", "00\\udc00", "800\\udc00", "\\udc00",
        "udc00", "dc00",  "c00",      "\"",        "n",        "e",         "l",          "ll",          "se",
        "ue",   "lse",    "rue",      "ull",       "alse",     "\x80",      "\x80\x80",   "\x80\x80\x80",
        "\xa0\x80", "\x90\x80\x80"};
    if (!unfinished(s)) return false;
    for (const std::string &e : ends)
        if (unfinished(s + e + " ") && unfinished(s + e + "\" ")) return true;
    return false;
}

// Whether s ends in an exponent of at least `digits` digits: the reference refuses numbers beyond a double's range
// (1e309, JSON itself has no limit), so the walks below keep exponents to 2 digits.
bool exponent_digits_at_least(const std::string &s, size_t digits) {
    size_t i = s.size(), n = 0;
    while (i > 0 && std::isdigit(uint8_t(s[i - 1]))) --i, ++n;
    if (i > 0 && (s[i - 1] == '+' || s[i - 1] == '-')) --i;
    return n >= digits && i > 0 && (s[i - 1] == 'e' || s[i - 1] == 'E');
}

std::string hex(const std::string &s) {
    std::string out;
    for (unsigned char c : s) out += fmt::format("{:02x} ", c);
    return out;
}

// The index of the first byte the grammar refuses, or the size if it takes all.
size_t refused_at(const std::string &s) {
    JsonGrammar g;
    for (size_t i = 0; i < s.size(); ++i)
        if (!g.feed(uint8_t(s[i]))) return i;
    return s.size();
}

// The reference's: the first i such that no continuation of s[0..i] parses.
size_t reference_refused_at(const std::string &s) {
    for (size_t i = 0; i < s.size(); ++i)
        if (!viable_prefix(s.substr(0, i + 1))) return i;
    return s.size();
}

// A walk's next byte among those taken: mostly one of the alphabet's (so that structure happens), one time in
// `odds` any byte taken.
uint8_t pick(const std::vector<uint8_t> &taken, const std::string &alphabet, unsigned odds, std::mt19937 &rng) {
    if (rng() % odds != 0)
        for (int tries = 0; tries < 30; ++tries) {
            const uint8_t a = uint8_t(alphabet[rng() % alphabet.size()]);
            if (std::find(taken.begin(), taken.end(), a) != taken.end()) return a;
        }
    return taken[rng() % taken.size()];
}

TEST(JsonGrammar, TakesValidObjectsByteByByteAndCompletesAtTheirEnd) {
    const std::vector<std::string> docs = {
        "{}",
        "{\"a\":1}",
        " \n{ \"k\" : [ 1 , -2.5e+3, 0, 0.0, -0, 1E-7, 12e3 ] ,\"t\":true,\"f\":false,\"n\":null }",
        "{\"nested\":{\"deeper\":[[],{},[{\"x\":[null]}]]}}",
        "{\"esc\":\"q\\\"b\\\\s\\/b\\bf\\fn\\nr\\rt\\t u\\u00e9 pair\\ud83d\\ude00\"}",
        "{\"utf8\":\"é ☃ 😀 \xc2\x80 \xed\x9f\xbf \xee\x80\x80 \xf4\x8f\xbf\xbf\"}",
        "{\"\":\"\",\"a b\":[\"\",\"x\"]}",
    };
    for (const std::string &d : docs) {
        ASSERT_TRUE(json::parse(d).is_object()) << d; // the reference agrees they are JSON objects
        JsonGrammar g;
        for (size_t i = 0; i < d.size(); ++i) {
            ASSERT_FALSE(g.complete()) << d << " at " << i;
            ASSERT_TRUE(g.feed(uint8_t(d[i]))) << d << " refused at " << i;
        }
        EXPECT_TRUE(g.complete()) << d;
        EXPECT_EQ(g.depth(), 0);
        EXPECT_FALSE(g.feed(' ')) << "nothing follows the object";
    }
}

TEST(JsonGrammar, RefusesTheFirstByteTheReferenceRefuses) {
    const std::vector<std::string> bad = {
        "{\"a\":01}",        "{\"a\" 1}",         "{\"a\":tru}",         "{\"a\":-}",          "{\"a\":1.}",
        "{\"a\":1.e5}",      "{\"a\":1e}",        "{\"a\":+1}",          "{\"a\":\"\x01\"}",   "{\"a\":\"\\q\"}",
        "{\"a\":\"\xc0\x80\"}", "{\"a\":\"\xe0\x80\x80\"}", "{\"a\":\"\xed\xa0\x80\"}", "{\"a\":\"\xf4\x90\x80\x80\"}",
        "{\"a\":\"\xf5\"}",  "{\"a\":\"\x80\"}",  "{\"a\":\"\\ud800x\"}", "{\"a\":1,}",         "{,}",
        "{\"a\":1]",         "{\"a\":[1}",        "{\"a\":[1,]}",        "{1:2}",              "{\"a\":nul}",
        "{\"a\":\"\\u12g4\"}", "{\"a\":[]]}",     "{'a':1}",             "{\"a\":1 2}",        "{\"a\"::1}",
    };
    for (const std::string &s : bad) {
        const size_t want = reference_refused_at(s);
        ASSERT_LT(want, s.size()) << s << ": the reference takes it";
        EXPECT_EQ(refused_at(s), want) << s;
    }
    // Refused earlier than the reference: a lone low surrogate at its second digit (no \udc.. can be valid
    // there), any top-level value but an object, anything after the object, and whitespace beyond the cap.
    EXPECT_EQ(refused_at("{\"a\":\"\\udc00\"}"), 9u);
    EXPECT_EQ(refused_at("{\"a\":\"\\ud800\\ud800\"}"), 15u);
    EXPECT_EQ(refused_at("[1]"), 0u);
    EXPECT_EQ(refused_at("\"s\""), 0u);
    EXPECT_EQ(refused_at("{} "), 2u);
    const std::string run = "\r\n" + std::string(JsonGrammar::kMaxWhitespace - 2, ' ');
    EXPECT_EQ(refused_at("{" + run + " }"), 1u + run.size());
    EXPECT_EQ(refused_at("{\n\n}"), 2u);   // one line break per run: no blank lines
    EXPECT_EQ(refused_at("{\n\r}"), 2u);   // "\r\n", not "\n\r"
    const std::string pretty = "{\n  \"a\":\n    1\n}";
    EXPECT_EQ(refused_at(pretty), pretty.size()); // pretty-printed: every run its own break
    const std::string runs = "{" + run + "\"a\":" + run + "1" + run + "}";
    const std::string in_string = "{\"" + std::string(3 * run.size(), ' ') + "\":1}";
    EXPECT_EQ(refused_at(runs), runs.size());           // each run is within the cap
    EXPECT_EQ(refused_at(in_string), in_string.size()); // a string's whitespace is no run
    // Each part of a number has a cap on its digits (a model that writes digits on must end the number); digits in
    // a string have none.
    const std::string digits(40, '7'), zeros(40, '0');
    const auto int_digits = size_t(NumberLexer::kMaxIntegerDigits);
    const auto frac_digits = size_t(NumberLexer::kMaxFractionDigits);
    const std::string head = "{\"a\":-";
    EXPECT_EQ(refused_at(head + digits.substr(0, int_digits) + "}"), head.size() + int_digits + 1);
    EXPECT_EQ(refused_at(head + digits.substr(0, int_digits + 1) + "}"), head.size() + int_digits);
    const std::string frac = head + "0." + zeros.substr(0, frac_digits);
    EXPECT_EQ(refused_at(frac + "e-308}"), frac.size() + 6);
    EXPECT_EQ(refused_at(frac + "1"), frac.size());
    EXPECT_EQ(refused_at("{\"a\":1E+0001}"), 11u);
    EXPECT_EQ(refused_at("{\"a\":\"" + digits + "\"}"), digits.size() + 8);
}

// Random walks through JSON texts: every byte the grammar takes keeps the text a prefix the reference can finish
// (sound), and every byte the reference allows the grammar takes (complete), but where it refuses on purpose.
TEST(JsonGrammar, RandomWalksAgreeWithTheReference) {
    std::mt19937 rng(7);
    const std::string alphabet = "{}[],:\"\\ \n\t0123456789-+.eEtrufalsnbd8cDC\xc3\xa9\xe2\x98\x83\xf0\x9f";
    int completed = 0;
    for (int walk = 0; walk < 16; ++walk) {
        JsonGrammar g;
        SchemaGrammar any_object(JsonSchema::any_object()); // JSON mode's grammar: must take the same bytes
        std::string text;
        for (int step = 0; step < 120 && !g.complete(); ++step) {
            std::vector<uint8_t> taken;
            for (int b = 0; b < 256; ++b) {
                JsonGrammar h = g;
                const std::string next = text + char(b);
                if (exponent_digits_at_least(next, 3)) continue;
                SchemaGrammar sh = any_object;
                ASSERT_EQ(sh.feed(uint8_t(b)), JsonGrammar(g).feed(uint8_t(b))) << "byte " << b << " after " << text;
                if (h.feed(uint8_t(b))) {
                    ASSERT_TRUE(unfinished(next)) << "took byte " << b << " after '" << text << "'";
                    taken.push_back(uint8_t(b));
                } else if (unfinished(next) && viable_prefix(next)) {
                    // Refused on purpose: whitespace over the cap or a second line break in a run, a top-level value
                    // that is not an object.
                    size_t run = 0;
                    while (run < text.size() && std::isspace(uint8_t(text[text.size() - 1 - run]))) ++run;
                    const std::string tail = text.substr(text.size() - run);
                    const bool second_break = (b == '\n' && tail.find('\n') != std::string::npos) ||
                                              (b == '\r' && tail.find_first_of("\r\n") != std::string::npos);
                    const bool ws_cap = std::isspace(b) && (run >= size_t(JsonGrammar::kMaxWhitespace) || second_break);
                    const bool top = text.find_first_not_of(" \n\t\r") == std::string::npos;
                    ASSERT_TRUE(ws_cap || top) << "refused byte " << b << " after '" << hex(text) << "'";
                }
            }
            ASSERT_FALSE(taken.empty()) << "stuck after '" << text << "'";
            const uint8_t b = pick(taken, alphabet, 4, rng);
            ASSERT_TRUE(g.feed(b));
            ASSERT_TRUE(any_object.feed(b));
            ASSERT_EQ(any_object.complete(), g.complete());
            text += char(b);
            ASSERT_TRUE(viable_prefix(text)) << text;
        }
        if (g.complete()) {
            ++completed;
            EXPECT_TRUE(json::parse(text).is_object()) << text;
        }
    }
    EXPECT_GT(completed, 0) << "no walk closed its object: the test saw no complete() texts";
}

// The mask is what reading each token's bytes says, whatever shortcut it takes (first byte, plain string text).
TEST(JsonConstraint, MaskAllowsExactlyTheTokensWhoseBytesContinue) {
    std::vector<std::string> bytes = {"", "{", "}", "{\"", "\":", "\",\"", "abc", " ", "\n  ", "é", "\xc3", "\xa9",
                                      "\\u00e9", "\\ud83d", "\\ude00", "tr", "ue", "true", "-1", "0.5e", "7", "[",
                                      "]", "],", "\"}", "null", "a\"b", "x\ny", "☃☃", ",", ":", "\"", "\\", "n",
                                      "ab", "ba", "aab", "bbab", "abé",
                                      // Prefixes shared, then refused or taken at each depth (the sorted walk):
                                      " t", " tr", " tru", " true", " truex", " trx", " tx", " txy", " nul", " null",
                                      " nx", " 12", " 123", " 12a", " 1.5", " 1.", " \"a", " \"a\"", " \"a\\",
                                      "  ", " \n", "12", "123", "12.5", "1.2.3", "-", "--1", "-0", "-01", "\"a\":",
                                      "\"a\":1", "\"a\":1}", "\"a\":x", "\"a\"}", ",\"", ",\"b\":", ",\"b\":[1,"};
    const size_t named = bytes.size();
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b))); // byte pieces, as sentencepiece's
    auto table = std::make_shared<const TokenTable>(bytes);
    std::mt19937 rng(11);
    for (int walk = 0; walk < 12; ++walk) {
        JsonConstraint c(table, JsonSchema::any_object());
        std::string text;
        for (int step = 0; step < 40 && !c.complete(); ++step) {
            std::vector<float> logits(bytes.size(), 0.0f);
            const int64_t n = c.mask(logits.data());
            std::vector<int32_t> allowed;
            for (size_t id = 0; id < bytes.size(); ++id) {
                SchemaGrammar g = c.grammar();
                const bool takes = !bytes[id].empty() && g.feed(bytes[id]);
                ASSERT_EQ(std::isinf(logits[id]), !takes) << "token '" << bytes[id] << "' after '" << text << "'";
                if (takes) {
                    allowed.push_back(int32_t(id));
                    ASSERT_TRUE(viable_prefix(text + bytes[id])) << text + bytes[id];
                }
            }
            ASSERT_EQ(n, int64_t(allowed.size()));
            ASSERT_GT(n, 0);
            // Favour the multi-byte tokens, so that walks get somewhere.
            int32_t t = allowed[rng() % allowed.size()];
            if (rng() % 3 != 0)
                for (int32_t id : allowed)
                    if (size_t(id) < named && rng() % 3 == 0) t = id;
            c.advance(t);
            text += bytes[size_t(t)];
        }
    }
    // Strings with lengths: plain tokens are taken by their known length, without reading them; with a pattern,
    // read.
    const auto lengths = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "s": {"type": "string", "minLength": 2, "maxLength": 4}, "t": {"type": "string", "maxLength": 1},
        "u": {"type": "array", "items": {"type": "string", "minLength": 3}, "maxItems": 2},
        "v": {"type": "string", "pattern": "^[ab]+c?(é|\\\\)?$"},
        "w": {"type": "string", "pattern": "^[ab]*é?$", "maxLength": 4}},
        "required": ["s", "t", "u", "v", "w"], "additionalProperties": false})"));
    // Alternatives read side by side: each reading's string lexer reads a token, or the whole state does.
    const auto alternatives = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "a": {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "string", "pattern": "^b+a?$"},
                        {"type": "string", "minLength": 4}, {"type": "integer"}, {"type": "number"}]},
        "b": {"anyOf": [{"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": false},
                        {"type": "object", "properties": {"x": {"type": "string", "maxLength": 1}, "y": {}},
                         "additionalProperties": false}]}},
        "required": ["a", "b"], "additionalProperties": false})"));
    const auto others = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "k": {"type": "object", "propertyNames": {"type": "string", "pattern": "^[ab]+$", "maxLength": 3},
              "additionalProperties": {"type": "integer"}, "maxProperties": 2},
        "a": {"type": "object", "properties": {"ab": {"type": "integer"}}, "additionalProperties": {"type": "string",
              "maxLength": 2}},
        "u": {"type": "array", "items": {"type": "string"}, "uniqueItems": true, "maxItems": 3}},
        "required": ["k", "a", "u"], "additionalProperties": false})"));
    int closed = 0;
    for (int walk = 0; walk < 36; ++walk) {
        JsonConstraint c(table, walk % 3 == 0 ? lengths : walk % 3 == 1 ? alternatives : others);
        for (int step = 0; step < 60 && !c.complete(); ++step) {
            std::vector<float> logits(bytes.size(), 0.0f);
            c.mask(logits.data());
            std::vector<int32_t> allowed;
            for (size_t id = 0; id < bytes.size(); ++id) {
                SchemaGrammar g = c.grammar();
                const bool takes = !bytes[id].empty() && g.feed(bytes[id]);
                ASSERT_EQ(std::isinf(logits[id]), !takes) << "token '" << bytes[id] << "'";
                if (takes) allowed.push_back(int32_t(id));
            }
            ASSERT_FALSE(allowed.empty());
            int32_t t = allowed[rng() % allowed.size()];
            for (int32_t id : allowed)
                if (size_t(id) < named && rng() % 2 == 0) t = id;
            c.advance(t);
        }
        closed += c.complete();
    }
    EXPECT_GT(closed, 0);
    JsonConstraint c(table, JsonSchema::any_object());
    EXPECT_NE(test::error_of([&] { c.advance(2); }).find("does not continue"), std::string::npos); // '}' first
    EXPECT_NE(test::error_of([&] { c.advance(0); }).find("does not continue"), std::string::npos); // no bytes
}


// Lazy (a trigger): while the text lacks it, every token is allowed but those that complete the trigger (wherever it
// begins) with bytes the schema does not take; from the trigger on, the text is held as any JSON-mode text. Most
// free steps need no mask at all (masks() false: no token holds the trigger whole, and the text ends with no part
// of it).
// Held after a text (a thinking model's "</think>": what the gate makes of a block the prompt opened): free until
// it appears, then the bytes after it, whitespace first or not, held to the schema; the text is no part of the JSON.
TEST(JsonConstraint, HeldAfterATextFromTheByteAfterIt) {
    const std::vector<std::string> bytes = {"Let",           " me",        "think",     ".",         "</",
                                            "think",         ">",          "</think>",  "\n\n",      "{\"a\":",
                                            "1",             "}",          "</think>\n{", "</think>{\"b", "</think>x",
                                            "{\"a\":1}",      "\n"};
    auto table = std::make_shared<const TokenTable>(bytes);
    const auto schema = JsonSchema::compile(
        ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                         "additionalProperties": false})"),
        /*compact=*/false); // (structured outputs' schemas take whitespace before the value; compact ones do not)
    const auto id = [&](const std::string &b) {
        return int32_t(std::find(bytes.begin(), bytes.end(), b) - bytes.begin());
    };
    const auto refused = [&](JsonConstraint &c) {
        std::vector<float> logits(bytes.size(), 0.0f);
        c.mask(logits.data());
        std::vector<std::string> out;
        for (size_t k = 0; k < bytes.size(); ++k)
            if (std::isinf(logits[k])) out.push_back(bytes[k]);
        return out;
    };
    JsonConstraint c(table, schema, "</think>", /*trigger_in_text=*/false);
    // Free: words and JSON alike (the JSON is not yet due), but a close followed by what the schema refuses.
    EXPECT_EQ(refused(c), (std::vector<std::string>{"</think>{\"b", "</think>x"}));
    for (const char *t : {"Let", " me", "think", ".", "{\"a\":1}", "</", "think"}) c.advance(id(t));
    EXPECT_FALSE(c.held());
    EXPECT_TRUE(c.masks()); // the text ends with a part of the close
    c.advance(id(">"));
    EXPECT_TRUE(c.held()); // from the byte after the close on
    std::vector<std::string> after = refused(c);
    EXPECT_TRUE(std::find(after.begin(), after.end(), "Let") != after.end());
    EXPECT_TRUE(std::find(after.begin(), after.end(), "\n") == after.end()); // whitespace first, as JSON allows
    for (const char *t : {"\n", "{\"a\":", "1", "}"}) c.advance(id(t));
    EXPECT_TRUE(c.complete());
    // A token that holds the close and the JSON's start.
    JsonConstraint d(table, schema, "</think>", false);
    d.advance(id("Let"));
    d.advance(id("</think>\n{"));
    EXPECT_TRUE(d.held());
    EXPECT_NE(test::error_of([&] { d.advance(id("Let")); }).find("does not continue"), std::string::npos);
}

// Held behind a reasoning block the answer may open itself (a gate without a trigger: Qwen3-style models write
// their own <think>): at the answer's start whitespace and the open tag keep it free, a block is free to its close
// and the JSON follows it; any other start makes the answer the JSON from its first byte (with the whitespace
// before it, which only a schema that takes whitespace allows). Every step's mask is checked against that reading
// of the text with each token after it; answers that start inside the block too.
TEST(JsonConstraint, HeldAfterAReasoningBlockTheAnswerMayOpen) {
    std::vector<std::string> bytes = {"<think>", "</think>", "<", "<th", "ink>", "think", ">", " ", "\n", "Hi",
                                      "{\"a\":", "1", "}", "{\"a\":1}", "</think>{\"a\":1}", "</think>\n{", "</think>x",
                                      "</",
                                      "<think>hm</think>{\"a\":", "<think></think>x", " <think>", "\n\n{", "{", "x"};
    const size_t named = bytes.size();
    for (int b = 32; b < 127; ++b) bytes.push_back(std::string(1, char(b)));
    auto table = std::make_shared<const TokenTable>(bytes);
    const ReasoningTags tags;
    const ojson spec = ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                                        "additionalProperties": false})");
    const auto is_space = [](char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; };
    // The JSON the text is held to so far (nullopt: free: its start undecided, or inside the block).
    const auto json_of = [&](const std::string &t, bool starts) -> std::optional<std::string> {
        std::string after = t;
        if (!starts) {
            size_t i = 0;
            while (i < t.size() && is_space(t[i])) ++i;
            const std::string rest = t.substr(i);
            if (!rest.starts_with(tags.open)) {
                if (tags.open.starts_with(rest)) return std::nullopt;
                return t;
            }
            after = rest.substr(tags.open.size());
        }
        const size_t close = after.find(tags.close);
        if (close == std::string::npos) return std::nullopt;
        return after.substr(close + tags.close.size());
    };
    std::mt19937 rng(17);
    int opened = 0, direct = 0, closed = 0, refusals = 0;
    for (int walk = 0; walk < 200; ++walk) {
        const bool starts = walk % 4 >= 2, compact = walk % 2;
        const auto schema = JsonSchema::compile(spec, compact);
        JsonConstraint c(table, schema, "", true, ContentGate(tags, starts));
        std::string text;
        for (int step = 0; step < 12 && !c.complete(); ++step) {
            SCOPED_TRACE(testing::Message() << "walk " << walk << " text: " << text);
            EXPECT_TRUE(c.masks());
            std::vector<float> logits(bytes.size(), 0.0f);
            const int64_t n = c.mask(logits.data());
            std::vector<int32_t> allowed;
            for (size_t id = 0; id < bytes.size(); ++id) {
                const std::optional<std::string> held = json_of(text + bytes[id], starts);
                SchemaGrammar g(schema);
                const bool takes = !held || g.feed(*held);
                ASSERT_EQ(std::isinf(logits[id]), !takes) << "token '" << bytes[id] << "'";
                if (takes) allowed.push_back(int32_t(id));
                refusals += !takes;
            }
            ASSERT_EQ(n, int64_t(allowed.size()));
            ASSERT_FALSE(allowed.empty());
            int32_t t = allowed[rng() % allowed.size()];
            for (int32_t id : allowed)
                if (size_t(id) < named && rng() % 3 == 0) t = id;
            c.advance(t);
            text += bytes[size_t(t)];
            ASSERT_EQ(c.held(), json_of(text, starts).has_value());
        }
        opened += text.find(tags.open) != std::string::npos;
        direct += c.held() && text.find(tags.close) == std::string::npos;
        if (c.complete()) {
            ++closed;
            EXPECT_TRUE(json::parse(*json_of(text, starts))["a"].is_number_integer()) << text;
        }
    }
    EXPECT_GT(opened, 20);
    EXPECT_GT(direct, 10);
    EXPECT_GT(closed, 10);
    EXPECT_GT(refusals, 1000);
}

TEST(JsonConstraint, LazyHoldsTextsFromTheTriggerOn) {
    std::vector<std::string> bytes = {"", "{", "}", "{\"", "\"a", "\":", "{\"a\":", "{\"a\":1}", "{\"a\":x",
                                      " {\"a\"", "\n", " ", "{\"b", "Hi", " there", "1", "2", "}\n", "a\":-", "\"",
                                      ":", "\":3,", "{\"a\": 1}", "x{\"{\"a\":7", "{\"{", "{\"a{", "a\":]"};
    const size_t named = bytes.size();
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
    const std::string trigger = "{\"a\":";
    auto table = std::make_shared<const TokenTable>(bytes);
    std::vector<std::string> parts = bytes; // the same without the tokens that hold the trigger whole
    for (std::string &b : parts)
        if (b.find(trigger) != std::string::npos) b = "zz";
    auto part_table = std::make_shared<const TokenTable>(parts);
    const auto schema = JsonSchema::compile(
        ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                         "additionalProperties": false})"),
        /*compact=*/true);
    auto ends_on_part = [&](const std::string &t) { // the text ends with a part of the trigger
        for (size_t j = 1; j < trigger.size() && j <= t.size(); ++j)
            if (t.compare(t.size() - j, j, trigger, 0, j) == 0) return true;
        return false;
    };
    std::mt19937 rng(3);
    int held = 0, closed = 0, words = 0, unmasked = 0, later = 0;
    for (int walk = 0; walk < 120; ++walk) {
        const std::vector<std::string> &tokens = walk % 3 == 2 ? parts : bytes;
        JsonConstraint c(walk % 3 == 2 ? part_table : table, schema, trigger);
        std::string text;
        for (int step = 0; step < 14 && !c.complete(); ++step) {
            std::vector<float> logits(tokens.size(), 0.0f);
            const bool masks = c.masks();
            const int64_t n = c.mask(logits.data());
            std::vector<int32_t> allowed;
            for (size_t id = 0; id < tokens.size(); ++id) {
                const std::string next = text + tokens[id];
                bool takes = true; // free: allowed unless it completes the trigger with bytes the schema refuses
                if (c.held()) {
                    SchemaGrammar g = c.grammar();
                    takes = !tokens[id].empty() && g.feed(tokens[id]);
                } else if (const size_t at = next.find(trigger); at != std::string::npos) {
                    SchemaGrammar g(schema);
                    takes = g.feed(next.substr(at));
                }
                ASSERT_EQ(std::isinf(logits[id]), !takes) << "token '" << tokens[id] << "' after '" << text << "'";
                if (takes) allowed.push_back(int32_t(id));
            }
            ASSERT_EQ(n, int64_t(allowed.size()));
            if (!masks) { // nothing refused, as promised; and only when the text ends with no part of the trigger
                ++unmasked;
                EXPECT_EQ(walk % 3, 2) << text; // (where no token holds it whole)
                EXPECT_EQ(n, int64_t(tokens.size())) << text;
                EXPECT_FALSE(ends_on_part(text)) << text;
            }
            int32_t t = allowed[rng() % allowed.size()];
            for (int32_t id : allowed)
                if (size_t(id) < named && rng() % 4 == 0) t = id;
            std::vector<int32_t> toward; // tokens that end on a part of the trigger, or complete it
            for (int32_t id : allowed) {
                const std::string next = text + tokens[size_t(id)];
                if (ends_on_part(next) || next.find(trigger) != std::string::npos) toward.push_back(id);
            }
            if (walk % 2 == 0 && !c.held() && !toward.empty() && text.size() > size_t(walk % 5))
                t = toward[rng() % toward.size()];
            c.advance(t);
            text += tokens[size_t(t)];
            EXPECT_EQ(c.held(), text.find(trigger) != std::string::npos) << text; // held from the trigger on
        }
        held += c.held(), words += !c.held();
        later += c.held() && text.find(trigger) > 0;
        if (c.complete()) {
            ++closed;
            const std::string value = text.substr(text.find(trigger));
            EXPECT_TRUE(json::parse(value)["a"].is_number_integer()) << text;
        }
    }
    EXPECT_GT(held, 0);
    EXPECT_GT(later, 0); // triggers after words
    EXPECT_GT(words, 0);
    EXPECT_GT(closed, 0);
    EXPECT_GT(unmasked, 0);
    EXPECT_NE(test::error_of([&] { JsonConstraint(table, schema, "[1"); }).find("does not begin"), std::string::npos);
    EXPECT_NE(test::error_of([&] { JsonConstraint(table, schema, "{\"a\": "); }).find("does not begin"),
              std::string::npos); // compact: no whitespace inside the trigger
    // Advancing past a refused token fails as in any JSON mode; free text takes anything that keeps it free.
    JsonConstraint c(table, schema, trigger);
    EXPECT_NE(test::error_of([&] { c.advance(8); }).find("does not continue"), std::string::npos); // {"a":x
    EXPECT_TRUE(c.masks()); // (tokens hold the trigger whole)
    c = JsonConstraint(part_table, schema, trigger);
    c.advance(13); // "Hi"
    EXPECT_FALSE(c.held());
    EXPECT_FALSE(c.masks());
    c.advance(3); // {"
    EXPECT_TRUE(c.masks());
    EXPECT_NE(test::error_of([&] { c.advance(26); }).find("does not continue"), std::string::npos); // a":]
    c.advance(18); // a":-
    EXPECT_TRUE(c.held());
}

// Lazy behind a thinking model's reasoning (a ContentGate): the trigger counts only in the answer's content, as the
// splitter gives it (infer/reasoning.h) — inside the reasoning it is reasoning, free — and from it on the text is
// held. Every step's mask is checked against that reading of the text with each token after it, for answers that
// start inside the block and answers that may open one.
TEST(JsonConstraint, LazyBehindReasoningWatchesTheContentAlone) {
    std::vector<std::string> bytes = {"<think>", "</think>", "<", "/", "think", ">", " ", "\n", "Hi", "{\"a\":",
                                      "{\"a\":1}", "{\"a\":x", "1", "}", "</think>{\"a\":", "</think>{\"a\":x",
                                      "</think>\n{\"a\":1}", "{", "\"a", "\":", "x{\"a\":7", "<th", "ink>{\"a\":x",
                                      "{\"a\"", ":1}", "?", ":x"};
    const size_t named = bytes.size();
    for (int b = 32; b < 127; ++b) bytes.push_back(std::string(1, char(b)));
    const std::string trigger = "{\"a\":";
    const ReasoningTags think;
    // Tags whose open tag begins like the trigger: an answer's start held as a part of it may turn out to be the
    // content's, and the trigger's start with it.
    const ReasoningTags odd{"{\"a\"?", "?"};
    auto table = std::make_shared<const TokenTable>(bytes);
    const auto schema = JsonSchema::compile(
        ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
                         "additionalProperties": false})"),
        /*compact=*/true);
    std::mt19937 rng(9);
    int inside = 0, held = 0, closed = 0, unmasked = 0;
    for (int walk = 0; walk < 160; ++walk) {
        const bool starts = walk % 2;
        const ReasoningTags &tags = walk % 4 >= 2 ? odd : think;
        JsonConstraint c(table, schema, trigger, true, ContentGate(tags, starts));
        std::string text;
        auto content = [&](const std::string &t) { return split_reasoning(t, tags, starts).content; };
        for (int step = 0; step < 16 && !c.complete(); ++step) {
            SCOPED_TRACE(testing::Message() << "walk " << walk << " text: " << text);
            std::vector<float> logits(bytes.size(), 0.0f);
            const bool masks = c.masks();
            const int64_t n = c.mask(logits.data());
            std::vector<int32_t> allowed;
            for (size_t id = 0; id < bytes.size(); ++id) {
                bool takes = true;
                if (c.held()) {
                    SchemaGrammar g = c.grammar();
                    takes = g.feed(bytes[id]);
                } else {
                    const std::string words = content(text + bytes[id]);
                    if (const size_t at = words.find(trigger); at != std::string::npos) {
                        SchemaGrammar g(schema);
                        takes = g.feed(words.substr(at));
                    }
                }
                ASSERT_EQ(std::isinf(logits[id]), !takes) << "token '" << bytes[id] << "'";
                if (takes) allowed.push_back(int32_t(id));
            }
            ASSERT_EQ(n, int64_t(allowed.size()));
            if (!masks) {
                ++unmasked;
                EXPECT_EQ(n, int64_t(bytes.size()));
            }
            int32_t t = allowed[rng() % allowed.size()];
            for (int32_t id : allowed)
                if (size_t(id) < named && rng() % 3 == 0) t = id;
            c.advance(t);
            text += bytes[size_t(t)];
            const std::string words = content(text);
            ASSERT_EQ(c.held(), words.find(trigger) != std::string::npos); // held from the content's trigger on
            inside += !c.held() && text.find(trigger) != std::string::npos; // a trigger in the reasoning: free
        }
        held += c.held();
        if (c.complete()) {
            ++closed;
            const std::string words = content(text);
            EXPECT_TRUE(json::parse(words.substr(words.find(trigger)))["a"].is_number_integer()) << text;
        }
    }
    EXPECT_GT(inside, 10);
    EXPECT_GT(held, 10);
    EXPECT_GT(closed, 3);
    EXPECT_EQ(unmasked, 0); // (tokens hold the trigger whole: every step reads them)
    // Without the gate the same trigger in a reasoning block would hold the rest of the answer.
    JsonConstraint plain(table, schema, trigger);
    JsonConstraint gated(table, schema, trigger, true, ContentGate(think, true));
    for (const char *t : {"Hi", "{\"a\":", "1", "}"}) {
        const int32_t id = int32_t(std::find(bytes.begin(), bytes.end(), std::string(t)) - bytes.begin());
        plain.advance(id);
        gated.advance(id);
    }
    EXPECT_TRUE(plain.complete());
    EXPECT_FALSE(gated.held());
}

// A direct validator of the schema subset (a different algorithm from the byte acceptor: over parsed values), with
// the properties' order checked too (the value parsed as an ordered_json).
bool valid(const ojson &v, const ojson &s, const ojson &root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) { // a JSON pointer (the tests' only percent-escape is %20)
        std::string r = s["$ref"].get<std::string>().substr(1);
        for (size_t at; (at = r.find("%20")) != std::string::npos;) r.replace(at, 3, " ");
        return valid(v, root.at(ojson::json_pointer(r)), root);
    }
    if (s.contains("const")) return v == s["const"];
    if (s.contains("enum")) return std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
    if (s.contains("anyOf"))
        return std::any_of(s["anyOf"].begin(), s["anyOf"].end(), [&](const ojson &a) { return valid(v, a, root); });
    if (s.contains("oneOf"))
        return std::count_if(s["oneOf"].begin(), s["oneOf"].end(), [&](const ojson &a) { return valid(v, a, root); }) ==
               1;
    if (s.contains("allOf"))
        return std::all_of(s["allOf"].begin(), s["allOf"].end(), [&](const ojson &a) { return valid(v, a, root); });
    if (s.contains("type") && s["type"].is_array())
        return std::any_of(s["type"].begin(), s["type"].end(), [&](const ojson &t) {
            ojson one = s;
            one["type"] = t;
            return valid(v, one, root);
        });
    const std::string type = s.value("type", "");
    if (type == "string") {
        if (!v.is_string()) return false;
        const auto chars = size_t(utf8_characters(v.get<std::string>())); // code points
        return chars >= s.value("minLength", size_t(0)) && chars <= s.value("maxLength", SIZE_MAX) &&
               (!s.contains("pattern") || // (the tests' patterns are ASCII: bytes are characters)
                std::regex_search(v.get<std::string>(), std::regex(s["pattern"].get<std::string>())));
    }
    if (type == "number" || type == "integer") { // (the tests' bounds are exact in binary)
        if (!v.is_number()) return false;
        const double x = v.get<double>();
        if (type == "integer" && !v.is_number_integer() && std::floor(x) != x) return false; // 64 bits: a double
        if (s.contains("multipleOf")) { // (the tests' steps and values have at most 6 decimals)
            const double q = x / s["multipleOf"].get<double>();
            if (std::fabs(q - std::round(q)) > 1e-6 * std::max(1.0, std::fabs(q))) return false;
        }
        return !(s.contains("minimum") && x < s["minimum"].get<double>()) &&
               !(s.contains("maximum") && x > s["maximum"].get<double>()) &&
               !(s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) &&
               !(s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>());
    }
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "array") {
        if (!v.is_array() || v.size() < s.value("minItems", size_t(0)) || v.size() > s.value("maxItems", SIZE_MAX))
            return false;
        if (s.value("uniqueItems", false))
            for (size_t a = 0; a < v.size(); ++a)
                for (size_t b = a + 1; b < v.size(); ++b)
                    if (json(v[a]) == json(v[b])) return false; // as values (1 and 1.0 equal)
        const ojson prefix = s.value("prefixItems", ojson::array());
        for (size_t k = 0; k < v.size(); ++k)
            if (!valid(v[k], k < prefix.size() ? prefix[k] : s.value("items", ojson(true)), root)) return false;
        return true;
    }
    if (type == "object") {
        if (!v.is_object()) return false;
        if (v.size() < s.value("minProperties", size_t(0)) || v.size() > s.value("maxProperties", SIZE_MAX))
            return false;
        if (s.contains("propertyNames"))
            for (const auto &[key, x] : v.items())
                if (!valid(ojson(key), s.at("propertyNames"), root)) return false;
        if (s.contains("patternProperties")) { // (one pattern, no other keys, as the acceptor takes them)
            const auto &pp = s.at("patternProperties");
            for (const auto &[key, x] : v.items())
                if (!std::regex_search(key, std::regex(pp.begin().key())) || !valid(x, pp.begin().value(), root))
                    return false;
            return true;
        }
        if (!s.contains("properties") && !s.contains("additionalProperties")) return true;
        // (an object with minProperties or maxProperties alone takes other keys of any value, below)
        const ojson props = s.value("properties", ojson::object()); // (const operator[] of a missing key: UB)
        const ojson others = s.value("additionalProperties", ojson(false));
        auto at = props.begin();
        for (const auto &[key, x] : v.items()) { // in the schema's order; other keys as additionalProperties says
            if (!props.contains(key)) {
                if (!valid(x, others, root)) return false;
                continue;
            }
            while (at != props.end() && at.key() != key) ++at;
            if (at == props.end() || !valid(x, at.value(), root)) return false;
        }
        for (const ojson &r : s.value("required", ojson::array()))
            if (!v.contains(r.get<std::string>())) return false;
        return true;
    }
    return true; // any value
}

const ojson &person_schema() {
    static const ojson s = ojson::parse(R"({
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "ignored"},
            "age": {"type": "integer"},
            "score": {"type": "number"},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "kind": {"enum": ["a", "b", 1, 12]},
            "nick": {"type": ["string", "null"]},
            "meta": {},
            "opt": {"type": "boolean"},
            "child": {"$ref": "#/$defs/node"}
        },
        "required": ["name", "age", "score", "tags", "kind", "nick", "meta", "child"],
        "additionalProperties": false,
        "$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                  "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}},
                  "required": ["v", "next"], "additionalProperties": false}}
    })");
    return s;
}

bool takes(const std::shared_ptr<const JsonSchema> &schema, const std::string &text, bool *complete = nullptr) {
    SchemaGrammar g(schema);
    const bool ok = g.feed(text);
    if (complete) *complete = ok && g.complete();
    return ok;
}

// Whether the schema's grammar takes the whole text as a complete value.
bool whole(const std::shared_ptr<const JsonSchema> &schema, const std::string &text) {
    bool complete = false;
    return takes(schema, text, &complete) && complete;
}

// The error compiling the schema's text gives (empty if it compiles).
std::string refusal(const std::string &schema) {
    return test::error_of([&] { JsonSchema::compile(ojson::parse(schema)); });
}

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingThePlace) {
    EXPECT_NE(refusal(R"({"type": "string"})").find("root must be an object"), std::string::npos);
    const std::string negation = refusal(R"({"type": "object", "properties": {"a": {"not": {"type": "integer"}}}})");
    EXPECT_NE(negation.find("schema.properties.a: 'not' is not supported"), std::string::npos) << negation;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {}, "additionalProperties": 5})")
                  .find("schema.additionalProperties: must be a schema or a boolean, got 5"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})").find("'b' is not among"),
              std::string::npos);
    const std::string both = refusal(R"({"type": "object", "properties": {"a": {"oneOf": [
        {"type": "object", "properties": {"x": {}}}, {"type": "string"}, {"type": "object"}]}}})");
    EXPECT_NE(both.find("schema.properties.a.oneOf: alternatives 0 and 2 could both match"), std::string::npos)
        << both;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"maxLength": 2}]}}})")
                  .find("a.allOf: 2 schemas: only allOf of one schema"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}], "type": "string"}}})")
                  .find("'type' beside allOf"),
              std::string::npos);
    const std::string endless = refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/n"}},
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"]}}})");
    EXPECT_NE(endless.find("schema.properties.a: admits no finite value"), std::string::npos) << endless;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/l"}},
        "$defs": {"l": {"type": "array", "items": {"$ref": "#/$defs/l"}, "minItems": 1}}})")
                  .find("admits no finite value"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/u"}},
        "$defs": {"u": {"anyOf": [{"$ref": "#/$defs/u"}, {"type": "null"}]}}})")
                  .find("refers to itself without describing a value"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}})").find("names no definition"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "date"}}})").find("unknown type 'date'"),
              std::string::npos);
    // Bounds: where they cannot be enforced, and bounds that admit nothing.
    const std::string untyped = refusal(R"({"type": "object", "properties": {"a": {"enum": [1, 5], "maximum": 3}}})");
    EXPECT_NE(untyped.find("schema.properties.a: 'maximum' is supported beside \"type\": \"number\""),
              std::string::npos)
        << untyped;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"minLength": 3}}})").find("not without a type"),
              std::string::npos);
    const std::string none = refusal(R"({"type": "object", "properties": {"a": {"type": "integer",
        "exclusiveMinimum": 2, "exclusiveMaximum": 3}}})");
    EXPECT_NE(none.find("schema.properties.a: no integer lies within exclusiveMinimum 2, exclusiveMaximum 3"),
              std::string::npos)
        << none;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "number", "minimum": 2, "maximum": 1}}})")
                  .find("no number lies within minimum 2, maximum 1"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "number", "exclusiveMinimum": true}}})")
                  .find("draft 4"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "string", "maxLength": -1}}})")
                  .find("a.maxLength: must be a non-negative integer, got -1"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "string", "minLength": 4, "maxLength": 3}}})")
                  .find("maxLength 3 is below minLength 4"),
              std::string::npos);
    // Bounds of the other types are ignored, as JSON Schema does: a boolean has no minimum.
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(
        R"({"type": "object", "properties": {"a": {"type": ["boolean", "string"], "minimum": 1, "maxLength": 2}}})")));
}

// $ref by JSON pointer: to a definition, a property, an array element, names with "/", "~" and escapes.
TEST(JsonSchema, FollowsReferencesByJsonPointer) {
    const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 3},
        "b": {"$ref": "#/properties/a"},
        "t": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "boolean"}], "items": false},
        "c": {"$ref": "#/properties/t/prefixItems/1"},
        "d": {"$ref": "#/$defs/x~1y~0z"},
        "e": {"$ref": "#/$defs/sp%20ace"}},
        "required": ["a", "b", "c", "d", "e"],
        "$defs": {"x/y~z": {"enum": ["q"]}, "sp ace": {"type": "null"}}})");
    const auto schema = JsonSchema::compile(s);
    const std::string good = R"({"a": 3, "b": 4, "c": true, "d": "q", "e": null})";
    EXPECT_TRUE(whole(schema, good));
    EXPECT_TRUE(valid(ojson::parse(good), s, s));
    EXPECT_FALSE(takes(schema, R"({"a": 3, "b": 2,)")); // b is a, minimum 3
    EXPECT_FALSE(takes(schema, R"({"a": 3, "b": 4, "c": ")"));
    EXPECT_FALSE(takes(schema, R"({"a": 3, "b": 4, "c": true, "d": "r)"));
    EXPECT_FALSE(takes(schema, R"({"a": 3, "b": 4, "c": true, "d": "q", "e": 1)"));
    // A reference into a recursive definition's own properties.
    const auto tree = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "kids": {"type": "array", "items": {"$ref": "#"}}, "first": {"$ref": "#/properties/kids/items"}}})"));
    EXPECT_TRUE(whole(tree, R"({"kids": [{"kids": []}], "first": {"first": {}}})"));
    EXPECT_FALSE(takes(tree, R"({"first": [)"));
    // Refused, naming the reference and the place.
    const std::string nothing = refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/properties/zz"}}})");
    EXPECT_NE(nothing.find("schema.properties.a.$ref: '#/properties/zz' names no definition (nothing at "
                           "'/properties/zz' in the schema)"),
              std::string::npos)
        << nothing;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/a~2"}}, "$defs": {"a~2": {}}})")
                  .find("'~' not followed by 0 or 1"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/%zz"}}, "$defs": {}})")
                  .find("two hex digits"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{}]},
        "b": {"$ref": "#/properties/a/prefixItems/00"}}})")
                  .find("names no definition"),
              std::string::npos); // an index with a leading zero names no element
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"$ref": "other.json#/x"}}})")
                  .find("only references within the schema"),
              std::string::npos);
    // A place that is not a schema fails as one: its path is the place the pointer names.
    const std::string not_schema = refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/required"}},
        "required": ["a"]})");
    EXPECT_NE(not_schema.find("schema.required: a schema must be an object or a boolean"), std::string::npos)
        << not_schema;
}

// A compact schema's texts have no whitespace between tokens, in its free-form values too; strings keep theirs.
TEST(JsonSchema, CompactTextsHaveNoWhitespaceBetweenTokens) {
    const ojson s = ojson::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}, "m": {},
        "s": {"type": "string"}}, "required": ["a", "m", "s"]})");
    const auto compact = JsonSchema::compile(s, true), free = JsonSchema::compile(s);
    EXPECT_TRUE(compact->compact());
    EXPECT_FALSE(free->compact());
    EXPECT_TRUE(whole(compact, R"({"a":1,"m":{"x":[1,{"y":null}]},"s":"a b\n"})"));
    for (const char *spaced : {R"( {"a":1,"m":1,"s":""})", R"({ "a":1,"m":1,"s":""})", R"({"a" :1,"m":1,"s":""})",
                               R"({"a": 1,"m":1,"s":""})", R"({"a":1 ,"m":1,"s":""})", R"({"a":1,"m":{"x": 1},"s":""})",
                               "{\"a\":1,\"m\":[1,\n2],\"s\":\"\"}", R"({"a":1,"m":1,"s":"" })"}) {
        EXPECT_FALSE(takes(compact, spaced)) << spaced;
        EXPECT_TRUE(whole(free, spaced)) << spaced;
    }
}

// Untrusted JSON nested arbitrarily deep is refused before anything recurses into it (nlohmann copies and dumps
// recursively: a 1 MB schema of nested "items" overflowed the stack of `zaya generate` and of the server).
TEST(JsonSchema, RefusesDeepNestingWithoutRecursingIntoIt) {
    auto nested_items = [](int levels) {
        std::string s = R"({"type": "object", "properties": {"a": )";
        for (int i = 0; i < levels; ++i) s += R"({"type": "array", "items": )";
        return s + "{}" + std::string(size_t(levels), '}') + "}}";
    };
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(nested_items(40))));
    const std::string levels = test::error_of([&] { JsonSchema::compile(ojson::parse(nested_items(70))); });
    EXPECT_NE(levels.find("schema.properties.a.items.items."), std::string::npos) << levels.substr(0, 100);
    EXPECT_NE(levels.find("nests deeper than 64 levels"), std::string::npos);
    const size_t deep = 200000;
    const std::string brackets = std::string(deep, '[') + std::string(deep, ']');
    const std::string json_levels = test::error_of([&] {
        JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {"a": {"const": )" + brackets + "}}}"));
    });
    EXPECT_NE(json_levels.find("schema: nests deeper than 256 levels of JSON"), std::string::npos) << json_levels;
    EXPECT_NE(test::error_of([&] { JsonSchema::compile(ojson::parse(nested_items(int(deep)))); }).find("256 levels"),
              std::string::npos);
    for (const std::string &body :
         {R"({"prompt": [1], "x": )" + brackets + "}",
          R"({"prompt": [1], "response_format": {"type": "json_schema", "json_schema": {"schema": )" +
              nested_items(int(deep)) + "}}}"}) {
        try {
            parse_api_request(body, false, 4096);
            ADD_FAILURE() << "a request nested " << deep << " deep was taken";
        } catch (const ApiError &e) {
            EXPECT_EQ(e.status, 400);
            EXPECT_NE(e.message.find("nests deeper than 512 levels"), std::string::npos) << e.message;
        }
    }
}

TEST(SchemaGrammar, TakesTheSchemasValuesInItsOrderAndRefusesOthers) {
    const auto schema = JsonSchema::compile(person_schema());
    const std::string head = R"({"name": "Ada", "age": 36, "score": -1.5e2, "tags": ["x", "y"], "kind": )";
    const std::string tail = R"(, "nick": null, "meta": {"any": [1, "thing"]}, "child": {"v": 1, "next": null}})";
    const std::vector<std::string> good = {
        head + "\"a\"" + tail,
        head + "12" + tail,
        head + "1" + tail,
        head + "1" + R"(, "nick": "A", "meta": 7, "opt": true, "child": {"v": 1, "next": {"v": 2, "next": null}}})",
        R"({ "name" : "" , "age" : -0 , "score" : 0 , "tags" : [ ] , "kind" : "b" , "nick" : "" , "meta" : null ,)"
        R"( "child" : { "v" : 0 , "next" : null } })",
    };
    for (const std::string &t : good) {
        bool complete = false;
        EXPECT_TRUE(takes(schema, t, &complete)) << t;
        EXPECT_TRUE(complete) << t;
        EXPECT_TRUE(valid(ojson::parse(t), person_schema(), person_schema())) << t; // the tests' own view agrees
    }
    const std::vector<std::string> bad = {
        R"({"age": 1})",                                   // properties out of order (name first)
        R"({"name": "A", "score": 1})",                    // age is required, cannot be skipped
        R"({"name": "A", "age": 1.5})",                    // an integer
        R"({"name": "A", "age": 1, "score": "1"})",        // a number
        R"({"name": "A", "age": 1, "score": 1, "tags": ["a", "b", "c", "d"]})", // maxItems 3
        R"({"name": "A", "age": 1, "score": 1, "tags": [1]})",                  // items are strings
        head + "\"c\"",                                    // not in the enum
        head + "13",                                       // 1 and 12 only
        head + "1" + R"(, "nick": 5)",                     // a string or null
        head + "1" + R"(, "nick": null, "meta": 1, "child": {"v": 1, "next": null}, "x": 1)", // no other keys
        head + "1" + R"(, "nick": null, "meta": 1, "child": {"v": 1, "next": null}})" + " ", // nothing after
        head + "1" + R"(, "nick": null, "meta": 1, "child": {"v": 1}})", // next is required
        R"({"name": "A", "age": 1, "score": 1, "tags": [], "kind": 1, "nick": null, "meta": 1})", // child required
    };
    for (const std::string &t : bad) {
        bool complete = false;
        EXPECT_FALSE(takes(schema, t, &complete) && complete) << t;
    }
    EXPECT_FALSE(takes(schema, R"({"age")"));
    EXPECT_FALSE(takes(schema, R"({"name": "A", "age": 1.)"));
    EXPECT_FALSE(takes(schema, head + "13"));
    EXPECT_TRUE(takes(schema, head + "1")); // 1 or 12: the next byte decides
}

// Random walks through the schema's texts: every complete one parses (nlohmann) and is valid by the direct validator,
// every prefix the grammar takes is one the reference parser can finish.
TEST(SchemaGrammar, RandomWalksWriteValidValues) {
    const auto schema = JsonSchema::compile(person_schema());
    std::mt19937 rng(5);
    const std::string alphabet = "{}[],:\"\" 0123456789-.enultrfaAbyx";
    int completed = 0;
    for (int walk = 0; walk < 40; ++walk) {
        SchemaGrammar g(schema);
        std::string text;
        for (int step = 0; step < 400 && !g.complete(); ++step) {
            std::vector<uint8_t> taken;
            for (int b = 0; b < 256; ++b) {
                SchemaGrammar h = g;
                const std::string next = text + char(b);
                if (!exponent_digits_at_least(next, 3) && h.feed(uint8_t(b))) taken.push_back(uint8_t(b));
            }
            ASSERT_FALSE(taken.empty()) << "stuck after '" << text << "'";
            const uint8_t b = pick(taken, alphabet, 8, rng);
            ASSERT_TRUE(g.feed(b));
            text += char(b);
            ASSERT_TRUE(unfinished(text)) << text;
        }
        if (!g.complete()) continue;
        ++completed;
        const ojson v = ojson::parse(text);
        EXPECT_TRUE(valid(v, person_schema(), person_schema())) << json(text).dump();
    }
    EXPECT_GE(completed, 10);
}

// Every number text of up to `max_len` bytes over `alphabet` that a number lexer takes, shortest first, each with
// whether it is whole (a number ends there).
std::vector<std::pair<std::string, bool>> number_texts(const std::string &alphabet, size_t max_len, bool integer) {
    std::vector<std::pair<std::string, bool>> out;
    std::vector<std::string> level = {""};
    for (size_t len = 1; len <= max_len; ++len) {
        std::vector<std::string> next;
        for (const std::string &p : level)
            for (char c : alphabet) {
                NumberLexer lexer(integer);
                bool ok = true;
                for (char d : p + c) ok = ok && lexer.feed(uint8_t(d)) == Lexed::Taken;
                if (!ok) continue;
                next.push_back(p + c);
                out.emplace_back(p + c, lexer.feed(' ') == Lexed::Ended);
            }
        level = std::move(next);
    }
    return out;
}

// NumberRange against brute force: a prefix of up to 3 bytes is viable when one of its continuations of up to 5
// bytes is a whole number whose strtod value lies in the range (the bounds have few digits, so that 5 bytes reach
// the range from any such prefix that can reach it at all, and are exact in binary, so that doubles compare
// exactly); whole numbers of up to 4 bytes are held by the same test.
TEST(NumberRange, PrefixesAreViableExactlyWhenSomeContinuationLiesInTheRange) {
    struct Case {
        const char *bounds;
        bool integer;
        double lo, hi; // the range as the brute force sees it (integers: the closed integer ends)
        bool lo_open, hi_open;
        int64_t step = 0; // multipleOf in units of 10^−4 (the texts have at most 3 decimals); 0: none
    };
    const double inf = INFINITY;
    const std::vector<Case> cases = {
        {R"({"minimum": -2.5, "maximum": 7})", false, -2.5, 7, false, false},
        {R"({"exclusiveMinimum": 0.25, "exclusiveMaximum": 1})", false, 0.25, 1, true, true},
        {R"({"minimum": 0.5, "maximum": 0.5})", false, 0.5, 0.5, false, false},
        {R"({"maximum": -0.5})", false, -inf, -0.5, false, false},
        {R"({"exclusiveMinimum": 10})", false, 10, inf, true, false},
        {R"({"minimum": -3, "maximum": 12})", true, -3, 12, false, false},
        {R"({"exclusiveMinimum": -1.5, "exclusiveMaximum": 2.5})", true, -1, 2, false, false},
        {R"({"minimum": 100})", true, 100, inf, false, false},
        {R"({"minimum": 0, "maximum": 0})", true, 0, 0, false, false},
        {R"({"exclusiveMaximum": -20})", true, -inf, -21, false, false},
        // multipleOf (for an integer the least integer multiple of the step: 0.5 → 1, 2.5 → 5)
        {R"({"multipleOf": 0.25})", false, -inf, inf, false, false, 2500},
        {R"({"multipleOf": 0.3, "minimum": 0.5, "maximum": 1})", false, 0.5, 1, false, false, 3000},
        {R"({"multipleOf": 1.5, "minimum": -2, "exclusiveMaximum": 6})", false, -2, 6, false, true, 15000},
        {R"({"multipleOf": 0.01, "exclusiveMinimum": 0, "maximum": 0.05})", false, 0, 0.05, true, false, 100},
        {R"({"multipleOf": 0.007})", false, -inf, inf, false, false, 70},
        {R"({"multipleOf": 7})", true, -inf, inf, false, false, 70000},
        {R"({"multipleOf": 3, "minimum": 10, "maximum": 14})", true, 10, 14, false, false, 30000},
        {R"({"multipleOf": 0.5, "minimum": -2, "maximum": 3})", true, -2, 3, false, false, 10000},
        {R"({"multipleOf": 2.5, "exclusiveMinimum": -10, "exclusiveMaximum": 10})", true, -9, 9, false, false, 50000},
        {R"({"multipleOf": 25, "maximum": -30})", true, -inf, -30, false, false, 250000},
    };
    for (const Case &c : cases) {
        ojson s = ojson::parse(c.bounds);
        s["type"] = c.integer ? "integer" : "number";
        const auto schema = JsonSchema::compile(ojson{{"type", "object"}, {"properties", {{"x", s}}}});
        const NumberRange &r = schema->node(schema->node(JsonSchema::kRoot).children[0]).range;
        auto in_range = [&](const std::string &t) {
            const double x = std::strtod(t.c_str(), nullptr);
            if (c.step) { // exactly: the text in units of 10^−4 (digits, then the fraction padded to 4 places)
                const size_t dot = std::min(t.find('.'), t.size());
                const std::string fraction = dot < t.size() ? t.substr(dot + 1) : "";
                const int64_t units = std::stoll(t.substr(0, dot) + fraction + std::string(4 - fraction.size(), '0'));
                if (units % c.step != 0) return false;
            }
            return (c.lo_open ? x > c.lo : x >= c.lo) && (c.hi_open ? x < c.hi : x <= c.hi);
        };
        const auto texts = number_texts(c.integer ? "-0123456789" : "-0123456789.", 5, c.integer);
        std::set<std::string> reachable; // the prefixes of up to 3 bytes of a whole number in the range
        int viable = 0, held = 0;
        for (const auto &[t, whole] : texts) {
            if (!whole || !in_range(t)) continue;
            ++held;
            for (size_t n = 1; n <= std::min<size_t>(3, t.size()); ++n) reachable.insert(t.substr(0, n));
        }
        for (const auto &[t, whole] : texts) {
            if (whole && t.size() <= 4) {
                ASSERT_EQ(r.holds(t), in_range(t)) << c.bounds << " " << t;
            }
            if (t.size() > 3) continue;
            ASSERT_EQ(r.viable(t), reachable.count(t) != 0) << c.bounds << " " << t;
            viable += r.viable(t);
        }
        EXPECT_GT(viable, 0) << c.bounds;
        EXPECT_GT(held, 0) << c.bounds;
    }
}

TEST(NumberRange, DecimalsCompareExactlyAndRoundToIntegers) {
    auto dec = [](const char *t) {
        Decimal d;
        EXPECT_TRUE(Decimal::parse(t, d)) << t;
        return d;
    };
    EXPECT_EQ(compare(dec("0.1"), dec("1e-1")), 0);
    EXPECT_EQ(compare(dec("-0"), dec("0.0e5")), 0);
    EXPECT_LT(compare(dec("0.09999999999999999999"), dec("0.1")), 0);
    EXPECT_GT(compare(dec("-0.1"), dec("-0.10000000000000000001")), 0);
    EXPECT_LT(compare(dec("12"), dec("123")), 0);
    EXPECT_LT(compare(dec("99.5"), dec("1E2")), 0);
    EXPECT_LT(compare(dec("-5"), dec("0")), 0);
    EXPECT_EQ(dec("1.5e300").exp, 301);
    for (const char *bad : {"", "-", "01", "1.", ".5", "1e", "1e+", "+1", "1 ", "0x1"}) {
        Decimal d;
        EXPECT_FALSE(Decimal::parse(bad, d)) << bad;
    }
    EXPECT_EQ(dec("999").plus(1).text(), "1000");
    EXPECT_EQ(dec("-1000").plus(1).text(), "-999");
    EXPECT_EQ(dec("1").plus(-1).text(), "0");
    EXPECT_EQ(dec("0").plus(-1).text(), "-1");
    EXPECT_EQ(compare(dec("1e25").plus(-1), dec("9999999999999999999999999")), 0);
    EXPECT_EQ(dec("-1e25").text(), "-1e25");
    EXPECT_EQ(dec("-7.9").truncated().text(), "-7");
    EXPECT_EQ(dec("0.25e-3").text(), "0.00025");
    NumberRange r;
    r.limit_low(dec("-2.5"), true);
    r.limit_low(dec("-3"), false); // looser: no change
    r.limit_high(dec("4"), true);
    r.round_to_integers();
    EXPECT_EQ(r.lo.at.text(), "-2");
    EXPECT_EQ(r.hi.at.text(), "3");
    EXPECT_FALSE(r.lo.open || r.hi.open);
    NumberRange between;
    between.limit_low(dec("2"), true);
    between.limit_high(dec("3"), true);
    EXPECT_FALSE(between.empty()); // 2.5
    between.round_to_integers();
    EXPECT_TRUE(between.empty()); // no integer
}

// Structured outputs with lengths and bounds: texts taken and refused, and where.
TEST(SchemaGrammar, KeepsStringLengthsAndNumberBounds) {
    const auto schema = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "code": {"type": "string", "minLength": 2, "maxLength": 3},
        "n": {"type": ["integer", "null"], "minimum": 1, "exclusiveMaximum": 100},
        "p": {"type": "number", "exclusiveMinimum": 0, "maximum": 0.5}},
        "required": ["code", "n", "p"], "additionalProperties": false})"));
    // Characters, not bytes: an escape is one, a surrogate pair one, a 3-byte character one.
    for (const char *code : {R"("ab")", R"("abc")", R"("\u00e9\n")", R"("\ud83d\ude00☃x")", R"("☃☃☃")"})
        EXPECT_TRUE(whole(schema, fmt::format(R"({{"code": {}, "n": 1, "p": 0.5}})", code))) << code;
    EXPECT_FALSE(takes(schema, R"({"code": "a")")); // the quote, before 2 characters
    EXPECT_FALSE(takes(schema, R"({"code": "abcd)")); // a 4th character
    EXPECT_FALSE(takes(schema, R"({"code": "abc\)")); // an escape is one too
    EXPECT_TRUE(takes(schema, "{\"code\": \"ab\xe2"));   // a 3rd character may begin
    EXPECT_FALSE(takes(schema, "{\"code\": \"abc\xe2")); // a 4th may not, from its first byte
    EXPECT_TRUE(takes(schema, R"({"code": "ab\ud83d\ude00")"));
    const std::string head = R"({"code": "ab", "n": )";
    for (const char *n : {"1", "99", "50", "null"}) EXPECT_TRUE(whole(schema, head + n + R"(, "p": 0.1})")) << n;
    for (const char *n : {"0", "-", "100", "1.", "1e", "nu1"}) EXPECT_FALSE(takes(schema, head + n)) << n;
    EXPECT_TRUE(takes(schema, head + "10"));
    EXPECT_TRUE(takes(schema, head + "10,"));
    const std::string mid = head + "7, \"p\": ";
    for (const char *p : {"0.5", "0.1", "0.0001", "0.49999", "0.50000"}) EXPECT_TRUE(whole(schema, mid + p + "}")) << p;
    for (const char *p : {"0}", "0.0}", "-", "1", "0.51", "0.500001", "5e-1", "0.5e"})
        EXPECT_FALSE(takes(schema, mid + p)) << p;
}

// Patterns in a schema: each character (written raw or escaped) moves the pattern, a character begun must be able
// to become one it takes, and the closing quote needs a whole string of it.
TEST(SchemaGrammar, KeepsStringsToTheirPatterns) {
    const auto schema = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
        "word": {"type": "string", "pattern": "^é+$", "maxLength": 3},
        "emoji": {"type": "string", "pattern": "^😀+$"}},
        "required": ["code", "word", "emoji"], "additionalProperties": false})"));
    EXPECT_TRUE(whole(schema, R"({"code": "AB-123", "word": "é\u00e9", "emoji": "\ud83d\ude00😀"})"));
    EXPECT_TRUE(whole(schema, R"({"code": "\u0041B-123", "word": "\u00E9", "emoji": "😀"})"));
    EXPECT_FALSE(takes(schema, R"({"code": "ab)"));
    EXPECT_FALSE(takes(schema, R"({"code": "AB-12")")); // the quote, before a whole code
    EXPECT_FALSE(takes(schema, R"({"code": "AB-1234)"));
    EXPECT_FALSE(takes(schema, "{\"code\": \"\xc3"));  // a 2-byte character's lead: no such character fits
    const std::string word = R"({"code": "AB-123", "word": ")";
    EXPECT_TRUE(takes(schema, word + "\xc3"));        // é's lead byte
    EXPECT_FALSE(takes(schema, word + "\xc3\xa8"));   // è
    EXPECT_TRUE(takes(schema, word + "\\u00"));
    EXPECT_FALSE(takes(schema, word + "\\u00e8"));
    EXPECT_FALSE(takes(schema, word + "\\n"));
    EXPECT_FALSE(takes(schema, word + "ééé\xc3")); // a 4th character past maxLength, at its first byte
    EXPECT_FALSE(takes(schema, word + "ééé\\"));
    const std::string emoji = word + R"(é", "emoji": ")";
    EXPECT_TRUE(takes(schema, emoji + "\\ud83"));
    EXPECT_FALSE(takes(schema, emoji + "\\ud83e"));   // a high surrogate of other characters
    EXPECT_FALSE(takes(schema, emoji + "\\ud83d\\ude01"));
    EXPECT_TRUE(takes(schema, emoji + "\xf0\x9f\x98"));
    EXPECT_FALSE(takes(schema, emoji + "\xf0\x9e"));
    EXPECT_FALSE(takes(schema, emoji + "\xf0\x9f\x98\x81"));
    // Refusals name the place: a pattern refused, with a format, without a type.
    const std::string lookahead = refusal(R"js({"type": "object", "properties": {"a": {"type": "string",
        "pattern": "(?=x)"}}})js");
    EXPECT_NE(lookahead.find("schema.properties.a: pattern '(?=x)': lookaround"), std::string::npos) << lookahead;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x",
        "format": "date"}}})").find("'pattern' and 'format' together"), std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"pattern": "x"}}})").find("without a type"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "^ab$",
        "maxLength": 1}}})").find("matches no string of 0 to 1 characters"), std::string::npos);
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(
        R"({"type": "object", "properties": {"a": {"type": "string", "format": "textarea"}}})"))); // an annotation
}

// Random walks through a schema's texts, favouring `alphabet`: never stuck (every byte taken leaves a text that some
// value of the schema continues: lengths, bounds and patterns included), and every complete text valid by the direct
// validator. Returns how many walks completed.
int valid_walks(const ojson &s, const std::string &alphabet, unsigned seed) {
    const auto schema = JsonSchema::compile(s);
    std::mt19937 rng(seed);
    int completed = 0;
    for (int walk = 0; walk < 60; ++walk) {
        SchemaGrammar g(schema);
        std::string text;
        for (int step = 0; step < 300 && !g.complete(); ++step) {
            std::vector<uint8_t> taken;
            for (int b = 0; b < 256; ++b) // (exponents of up to 2 digits: the validator's parser reads doubles)
                if (!exponent_digits_at_least(text + char(b), 3) && SchemaGrammar(g).feed(uint8_t(b)))
                    taken.push_back(uint8_t(b));
            if (taken.empty()) {
                ADD_FAILURE() << "stuck after '" << text << "'";
                return completed;
            }
            const uint8_t b = pick(taken, alphabet, 8, rng);
            EXPECT_TRUE(g.feed(b));
            text += char(b);
        }
        if (!g.complete()) continue;
        ++completed;
        EXPECT_TRUE(valid(ojson::parse(text), s, s)) << text;
    }
    return completed;
}

TEST(SchemaGrammar, RandomWalksKeepToPatterns) { // (std::regex validates the patterns)
    const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "a": {"type": "string", "pattern": "^(ab|c)+\\.?$"},
        "b": {"type": "string", "pattern": "x[0-9]", "maxLength": 4},
        "c": {"type": "array", "items": {"type": "string", "pattern": "^[b-z]?b*$", "minLength": 1}, "maxItems": 2}},
        "required": ["a", "b", "c"], "additionalProperties": false})");
    EXPECT_GE(valid_walks(s, "{}[],:\"\" abcx19.\\u", 17), 20);
}

// multipleOf (pydantic's conint(multiple_of=5), condecimal(multiple_of=0.01)): exact in decimal, any size, with and
// without bounds; what cannot be enforced or admits nothing is refused, naming the place.
TEST(SchemaGrammar, KeepsToMultiples) {
    const auto schema = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "n": {"type": "integer", "multipleOf": 5},
        "p": {"type": "number", "multipleOf": 0.1, "maximum": 1},
        "q": {"type": "number", "multipleOf": 0.37}},
        "required": ["n", "p", "q"], "additionalProperties": false})"));
    auto text = [](const char *n, const char *p, const char *q) {
        return fmt::format(R"({{"n": {}, "p": {}, "q": {}}})", n, p, q);
    };
    for (const char *n : {"0", "-35", "1000", "123456789012345678901234567890"})
        EXPECT_TRUE(whole(schema, text(n, "0.3", "0.74"))) << n;
    for (const char *p : {"0.3", "-0.7", "1", "1.0", "0.30", "-12345678901234567.9"}) // 0.3 is 3 × 0.1 in decimal
        EXPECT_TRUE(whole(schema, text("5", p, "0"))) << p;
    for (const char *q : {"0.37", "-3.33", "370000000000000000000", "3.7", "0.7400"})
        EXPECT_TRUE(whole(schema, text("5", "0.3", q))) << q;
    EXPECT_FALSE(takes(schema, R"({"n": 12,)"));          // ends at no multiple
    EXPECT_TRUE(takes(schema, R"({"n": 12)"));            // 120 is one
    EXPECT_FALSE(takes(schema, R"({"n": 1.)"));           // an integer
    EXPECT_FALSE(takes(schema, R"({"n": 1e)"));           // no exponent
    EXPECT_FALSE(takes(schema, R"({"n": 5, "p": 0.35)")); // 0.35… holds no tenth
    EXPECT_FALSE(takes(schema, R"({"n": 5, "p": 1.1)"));  // above the maximum
    EXPECT_FALSE(takes(schema, R"({"n": 5, "p": 2)"));
    const std::string q = R"({"n": 5, "p": 0, "q": )";
    EXPECT_FALSE(takes(schema, q + "0.1"));  // [0.1, 0.2) holds no multiple of 0.37
    EXPECT_TRUE(takes(schema, q + "0.7"));   // 0.74
    EXPECT_FALSE(takes(schema, q + "0.75")); // and then nothing
    EXPECT_FALSE(takes(schema, q + "1.0"));  // [1.0, 1.1) holds none: 1.11 is past it
    EXPECT_TRUE(takes(schema, q + "1.1"));   // 1.11
    EXPECT_FALSE(takes(schema, q + "0.74,") && takes(schema, q + "0.741"));
    // Two zeros past the step's digits, no more: a model writing zeros on must end.
    EXPECT_TRUE(whole(schema, text("5", "0.300", "0.7400")));
    EXPECT_FALSE(takes(schema, text("5", "0.3000", "0")));
    EXPECT_FALSE(takes(schema, q + "0.74000"));
    EXPECT_FALSE(takes(schema, q + "-0.00000"));

    auto refused = [](const char *x) {
        return refusal(fmt::format(R"({{"type": "object", "properties": {{"a": {}}}}})", x));
    };
    for (const char *bad : {R"({"type": "integer", "multipleOf": 0})", R"({"type": "number", "multipleOf": -2})"})
        EXPECT_NE(refused(bad).find("schema.properties.a: multipleOf must be greater than 0"), std::string::npos)
            << bad;
    EXPECT_NE(refused(R"({"type": "number", "multipleOf": "5"})").find("multipleOf: must be a finite number"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "number", "multipleOf": 12345678901234567891})").find("at most 18 significant"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "integer", "multipleOf": 1e18})").find("steps of 10^18 or more"), std::string::npos);
    const std::string none = refused(R"({"type": "integer", "minimum": 1, "maximum": 4, "multipleOf": 2.5})");
    EXPECT_NE(none.find("no integer lies within minimum 1, maximum 4, multipleOf 2.5"), std::string::npos) << none;
    EXPECT_NE(refused(R"({"multipleOf": 3})").find("'multipleOf' is supported beside \"type\": \"number\""),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "array", "items": {"type": "integer", "multipleOf": 3}, "uniqueItems": true})")
                  .find("without bounds or multipleOf"),
              std::string::npos);
    for (const char *fine : {R"({"type": "integer", "multipleOf": 1e17})",
                             R"({"type": "number", "multipleOf": 1e-30, "minimum": 0})",
                             R"({"type": "string", "multipleOf": 3})"}) // other types' keywords are ignored
        EXPECT_NO_THROW(JsonSchema::compile(ojson{{"type", "object"}, {"properties", {{"a", ojson::parse(fine)}}}}))
            << fine;
    // Digits are capped: a step caps a fraction at its own digits (and two zeros), past the lexer's cap for other
    // numbers; a bounded number's fraction is capped as an unbounded one's, by its range (which knows what can end:
    // above 0, the 22nd fraction digit of 0.000… must be no zero); integers as JSON mode's.
    const auto fine = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {
        "s": {"type": "number", "multipleOf": 3e-30}, "b": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
        "u": {"type": "number"}, "i": {"type": "integer"}},
        "required": ["s", "b", "u", "i"], "additionalProperties": false})"));
    EXPECT_NE(refused(R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1e-23})")
                  .find("schema.properties.a: no number of at most 22 digits after the point lies within"),
              std::string::npos);
    const std::string thirty = "0." + std::string(29, '0') + "3";
    const std::string rest = R"(, "u": 1, "i": 1})";
    EXPECT_TRUE(whole(fine, R"({"s": )" + thirty + R"(, "b": 0.5)" + rest));
    EXPECT_FALSE(takes(fine, R"({"s": )" + thirty + "000"));
    const auto frac_cap = size_t(NumberLexer::kMaxFractionDigits);
    const std::string b = R"({"s": 0, "b": 0.)";
    EXPECT_TRUE(whole(fine, b + std::string(frac_cap - 3, '0') + "100" + rest));
    EXPECT_FALSE(takes(fine, b + std::string(frac_cap - 3, '0') + "1000"));
    EXPECT_FALSE(takes(fine, b + std::string(frac_cap - 2, '0')));
    const std::string u = R"({"s": 0, "b": 1, "u": 0.)" + std::string(frac_cap, '0');
    EXPECT_TRUE(whole(fine, u + R"(, "i": 1})"));
    EXPECT_FALSE(takes(fine, u + "0"));
    const std::string i =
        R"({"s": 0, "b": 1, "u": 0, "i": -)" + std::string(size_t(NumberLexer::kMaxIntegerDigits), '9');
    EXPECT_TRUE(whole(fine, i + "}"));
    EXPECT_FALSE(takes(fine, i + "9"));
}

TEST(SchemaGrammar, RandomWalksKeepWithinBounds) {
    const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": -3, "maximum": 40},
        "b": {"type": "number", "exclusiveMinimum": 0, "maximum": 2.5},
        "c": {"type": "string", "minLength": 1, "maxLength": 3},
        "d": {"type": "array", "items": {"type": "integer", "exclusiveMaximum": 0}, "maxItems": 3},
        "e": {"type": ["number", "null"], "minimum": 7.25}},
        "required": ["a", "b", "c", "d", "e"], "additionalProperties": false})");
    EXPECT_GE(valid_walks(s, "{}[],:\"\" 0123456789-.nulxé", 9), 20);
    const ojson steps = ojson::parse(R"({"type": "object", "properties": {
        "a": {"type": "integer", "multipleOf": 7},
        "b": {"type": "number", "multipleOf": 0.37, "minimum": 1, "maximum": 3},
        "c": {"type": "number", "multipleOf": 0.05, "exclusiveMinimum": -0.1},
        "d": {"type": "array", "items": {"type": "integer", "multipleOf": 2.5, "maximum": 100}, "maxItems": 3}},
        "required": ["a", "b", "c", "d"], "additionalProperties": false})");
    EXPECT_GE(valid_walks(steps, "{}[],:\"\" 0123456789-.", 9), 20);
}

// Alternatives that begin alike (pydantic's Union[Cat, Dog], int | float, str | date) are read side by side until the
// text tells them apart; readings that come to the same state are one.
const ojson &alternatives_schema() {
    static const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "pet": {"anyOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}]},
        "n": {"type": ["integer", "number"]},
        "when": {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "maxLength": 3}]},
        "xs": {"type": "array", "items": {"anyOf": [{"type": "integer", "maximum": 5},
                                                    {"type": "number", "minimum": 3}]}, "maxItems": 4}},
        "required": ["pet", "n", "when", "xs"], "additionalProperties": false,
        "$defs": {
            "cat": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 2},
                    "lives": {"type": "integer"}}, "required": ["name", "lives"], "additionalProperties": false},
            "dog": {"type": "object", "properties": {"name": {"type": "string"}, "good": {"type": "boolean"}},
                    "required": ["name"], "additionalProperties": false}}})");
    return s;
}

TEST(SchemaGrammar, ReadsAlternativesThatBeginAlikeSideBySide) {
    const auto schema = JsonSchema::compile(alternatives_schema());
    const std::string tail = R"(, "n": 1, "when": "ab", "xs": []})";
    for (const char *pet : {R"({"name": "Tom", "good": true})", R"({"name": "Tom"})", R"({"name": "To", "lives": 9})",
                            R"({"name": "To"})"}) {
        const std::string t = std::string(R"({"pet": )") + pet + tail;
        EXPECT_TRUE(whole(schema, t)) << t;
        EXPECT_TRUE(valid(ojson::parse(t), alternatives_schema(), alternatives_schema())) << t;
    }
    EXPECT_FALSE(takes(schema, R"({"pet": {"name": "Tom", "lives")")); // a cat's name has at most 2 characters
    EXPECT_FALSE(takes(schema, R"({"pet": {"name": "To", "lives": 9, "good")"));
    EXPECT_FALSE(takes(schema, R"({"pet": {"lives")")); // name first in both
    const std::string head = R"({"pet": {"name": "x"}, "n": )";
    for (const char *n : {"1", "-2.5e3", "0"})
        EXPECT_TRUE(whole(schema, head + n + R"(, "when": "ab", "xs": []})")) << n;
    const std::string when = head + R"(1, "when": )";
    for (const char *w : {R"("2024-01-31")", R"("abc")", R"("")", R"("202")"})
        EXPECT_TRUE(whole(schema, when + w + R"(, "xs": []})")) << w;
    EXPECT_FALSE(takes(schema, when + R"("abcd)"));          // neither a date nor 3 characters
    EXPECT_FALSE(takes(schema, when + R"("2024-02-30)"));    // a date's digits, past 3, must make one
    EXPECT_FALSE(takes(schema, when + R"("2024")"));         // the date is not whole
    const std::string xs = when + R"("ab", "xs": )";
    EXPECT_TRUE(whole(schema, xs + "[1, 4, 4.5, 7]}"));
    for (const char *x : {"[2.5", "[-1.5", "[-7.", "[4, 4, 4, 4, 4"}) EXPECT_FALSE(takes(schema, xs + x)) << x;
    // Readings: two while a name fits both pets, one once a key tells them apart; equal ones merged.
    SchemaGrammar g(schema);
    ASSERT_TRUE(g.feed(R"({"pet": {"name": "T)"));
    EXPECT_EQ(g.readings(), 2u);
    ASSERT_TRUE(g.feed(R"(o", "li)"));
    EXPECT_EQ(g.readings(), 1u);
    SchemaGrammar h(schema);
    ASSERT_TRUE(h.feed(xs + "[4"));
    EXPECT_EQ(h.readings(), 2u); // an integer or a number
    ASSERT_TRUE(h.feed(", 4, 4, "));
    EXPECT_EQ(h.readings(), 1u); // back in the array: the same state, whichever the items were
    EXPECT_GE(valid_walks(alternatives_schema(), "{}[],:\"\" 0123456789-.Ttrue", 23), 20);
}

// oneOf: alternatives no value can match two of, as pydantic's discriminated unions write them (a required property
// of different constant values; the "discriminator" keyword is an annotation).
TEST(SchemaGrammar, TakesOneOfWhoseAlternativesAreToldApart) {
    const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "pet": {"oneOf": [{"$ref": "#/$defs/cat"}, {"$ref": "#/$defs/dog"}],
                "discriminator": {"propertyName": "kind"}},
        "id": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
        "old": {"allOf": [{"$ref": "#/$defs/cat"}], "description": "pydantic v1's reference"}},
        "required": ["pet", "id"], "additionalProperties": false,
        "$defs": {
            "cat": {"type": "object", "properties": {"kind": {"const": "cat", "type": "string"},
                    "name": {"type": "string"}}, "required": ["kind", "name"], "additionalProperties": false},
            "dog": {"type": "object", "properties": {"name": {"type": "string"},
                    "kind": {"enum": ["dog", "puppy"]}}, "required": ["name", "kind"],
                    "additionalProperties": false}}})");
    const auto schema = JsonSchema::compile(s);
    for (const char *t : {R"({"pet": {"kind": "cat", "name": "a"}, "id": "x"})",
                          R"({"pet": {"name": "a", "kind": "puppy"}, "id": 7, "old": {"kind": "cat", "name": "b"}})"}) {
        EXPECT_TRUE(whole(schema, t)) << t;
        EXPECT_TRUE(valid(ojson::parse(t), s, s)) << t;
    }
    EXPECT_FALSE(takes(schema, R"({"pet": {"name": "a", "kind": "cat")"));
    EXPECT_FALSE(takes(schema, R"({"pet": {"kind": "dog")"));
    EXPECT_GE(valid_walks(s, "{}[],:\"\" 0123456789-.catdogpuppykind", 29), 20);
    // Constants equal as values do not tell alternatives apart (1 and 1.0); a discriminator must be required.
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"oneOf": [
        {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]},
        {"type": "object", "properties": {"k": {"const": 1.0}}, "required": ["k"]}]}}})")
                  .find("alternatives 0 and 1 could both match"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"oneOf": [
        {"type": "object", "properties": {"k": {"const": 1}}, "required": ["k"]},
        {"type": "object", "properties": {"k": {"const": 2}}}]}}})")
                  .find("alternatives 0 and 1 could both match"),
              std::string::npos);
    const std::string overlap = R"({"type": "object", "properties": {"a": {"oneOf": [
        {"type": "object", "properties": {"k": {"enum": ["x", "y"]}}, "required": ["k"]},
        {"type": "object", "properties": {"k": {"enum": ["z", KS]}}, "required": ["k"]}]}}})";
    auto with = [&](const std::string &k) { return std::regex_replace(overlap, std::regex("KS"), k); };
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(with("1"))));
    EXPECT_NE(refusal(with("\"y\"")).find("alternatives 0 and 1 could both match"), std::string::npos);
}

// additionalProperties true or a schema (pydantic's dict[str, X]): other keys after the declared properties, each
// with a value of the schema; a declared name (escapes decoded) is that property, never repeated.
const ojson &other_keys_schema() {
    static const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "scores": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "meta": {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
                 "required": ["id"], "additionalProperties": {"type": "boolean"}},
        "any": {"type": "object", "properties": {"a": {"type": "null"}}, "additionalProperties": true}},
        "required": ["scores", "meta", "any"], "additionalProperties": false})");
    return s;
}

TEST(SchemaGrammar, TakesOtherKeysAfterTheDeclaredOnes) {
    const auto schema = JsonSchema::compile(other_keys_schema());
    for (const char *t : {R"({"scores": {}, "meta": {"id": 1}, "any": {}})",
                          R"({"scores": {"x": 1, "y\u00e9": 2, "": 0}, "meta": {"id": 1, "note": "n", "flag": true},)"
                          R"( "any": {"a": null, "b": [1, {"c": 2}]}})",
                          R"({"scores": {"a": 0}, "meta": {"id": 1, "flag": false, "more": true}, "any": {"z": 1}})",
                          R"({"scores": {}, "meta": {"id": 1, "\u006eote": "x"}, "any": {}})"}) {
        EXPECT_TRUE(whole(schema, t)) << t;
        EXPECT_TRUE(valid(ojson::parse(t), other_keys_schema(), other_keys_schema())) << t;
    }
    const std::string meta = R"({"scores": {}, "meta": {)";
    EXPECT_FALSE(takes(schema, R"({"scores": {"x": -1)"));  // a value of additionalProperties' schema
    EXPECT_FALSE(takes(schema, R"({"scores": {"x": 1.5)"));
    EXPECT_FALSE(takes(schema, meta + R"("f)"));                 // id is required first
    EXPECT_FALSE(takes(schema, R"({"scores": {"x": 1, "x")")); // a free key not twice
    EXPECT_FALSE(takes(schema, R"({"scores": {"x": 1, "\u0078")"));
    EXPECT_TRUE(takes(schema, R"({"scores": {"x": 1, "xy")"));
    EXPECT_TRUE(takes(schema, meta + R"("id": 1, "id)"));        // "id2" may come
    EXPECT_FALSE(takes(schema, meta + R"("id": 1, "id")"));      // "id" again may not
    EXPECT_FALSE(takes(schema, meta + R"("id": 1, "\u0069d")")); // nor written with an escape
    EXPECT_FALSE(takes(schema, meta + R"("id": 1, "flag": 1)"));  // a boolean
    EXPECT_FALSE(takes(schema, meta + R"("id": 1, "flag": true, "note")")); // declared properties come first
    EXPECT_FALSE(takes(schema, meta + R"("id": 1, "\u006eote": 1)")); // note, escaped, is still a string
    EXPECT_GE(valid_walks(other_keys_schema(), "{}[],:\"\" 0123456789-abnotrue", 37), 20);
}

// Keys by rule (pydantic's dict[Literal["x", "y"], int], dict[Color, int], dict[constr(pattern=...), int]):
// propertyNames or one patternProperties pattern, for objects of other keys only.
const ojson &key_rules_schema() {
    static const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "lit": {"type": "object", "additionalProperties": {"type": "integer"}, "propertyNames": {"enum": ["x", "y"]}},
        "col": {"type": "object", "additionalProperties": {"type": "boolean"},
                "propertyNames": {"$ref": "#/$defs/Color"}, "maxProperties": 2},
        "pat": {"type": "object", "patternProperties": {"^[a-z]+$": {"type": "integer"}}},
        "len": {"type": "object", "propertyNames": {"type": "string", "pattern": "^k", "maxLength": 2}},
        "odd": {"type": "object", "propertyNames": {"enum": ["\u00e9", "a\"b", "", 3]},
                "additionalProperties": {"type": "null"}}},
        "required": ["lit", "col", "pat", "len", "odd"], "additionalProperties": false,
        "$defs": {"Color": {"enum": ["red", "green"], "type": "string"}}})");
    return s;
}

TEST(SchemaGrammar, KeepsKeysToTheirRules) {
    const auto schema = JsonSchema::compile(key_rules_schema());
    for (const char *t : {R"({"lit": {}, "col": {}, "pat": {}, "len": {}, "odd": {}})",
                          R"({"lit": {"x": 1, "y": -2}, "col": {"red": true, "green": false}, "pat": {"ab": 3},)"
                          R"( "len": {"k": [1], "kz": {}}, "odd": {"é": null, "a\"b": null, "": null}})",
                          R"({"lit": {"y": 1}, "col": {"green": true}, "pat": {"z": 0, "qq": 1},)"
                          R"( "len": {"\u006b": 0, "k": 1}, "odd": {"": null}})"}) {
        EXPECT_TRUE(whole(schema, t)) << t;
        EXPECT_TRUE(valid(ojson::parse(t), key_rules_schema(), key_rules_schema())) << t;
    }
    EXPECT_FALSE(takes(schema, R"({"lit": {"z)"));            // x or y
    EXPECT_FALSE(takes(schema, R"({"lit": {"xx)"));
    // An enum's names are optional properties in its order: none twice, none escaped (keys as JSON writes them).
    EXPECT_FALSE(takes(schema, R"({"lit": {"x": 1, "x)"));
    EXPECT_FALSE(takes(schema, R"({"lit": {"y": 1, "x)"));
    EXPECT_FALSE(takes(schema, R"({"lit": {"\u0078)"));
    EXPECT_FALSE(takes(schema, R"({"lit": {"x": 1, "y": 2, ")"));
    EXPECT_FALSE(takes(schema, R"({"lit": {"x")") && takes(schema, R"({"lit": {"x": 1.5)"));
    EXPECT_FALSE(takes(schema, R"({"lit": {"x": 1.5)"));      // additionalProperties' integers
    const std::string col = R"({"lit": {}, "col": {)";
    EXPECT_FALSE(takes(schema, col + R"("blue)"));
    EXPECT_FALSE(takes(schema, col + R"("red": true, "green": true, ")")); // its two names
    const std::string pat = R"({"lit": {}, "col": {}, "pat": {)";
    EXPECT_FALSE(takes(schema, pat + R"("A)"));               // ^[a-z]+$
    EXPECT_FALSE(takes(schema, pat + R"("")"));               // not empty: the closing quote is refused
    EXPECT_FALSE(takes(schema, pat + R"("a": "s)"));          // its schema's integers
    EXPECT_FALSE(takes(schema, pat + R"("ab": 1, "ab")")); // ^[a-z]+$ is endless: a repeat is refused
    EXPECT_TRUE(takes(schema, pat + R"("ab": 1, "abc")"));
    const std::string len = R"({"lit": {}, "col": {}, "pat": {}, "len": {)";
    EXPECT_FALSE(takes(schema, len + R"("x)"));
    EXPECT_FALSE(takes(schema, len + R"("kab)"));             // 2 characters at most
    EXPECT_TRUE(takes(schema, len + R"("k": 1, "k")"));      // (with a maximum length repeats are not compared)
    const std::string odd = len + R"(}, "odd": {)";
    EXPECT_FALSE(takes(schema, odd + R"("3)"));               // 3 is not a string: no key
    EXPECT_FALSE(takes(schema, odd + R"("ab)"));
    EXPECT_GE(valid_walks(key_rules_schema(), "{}[],:\"\" 0123456789-xyredgnlutabkqzé", 41), 20);

    auto refused = [](const char *x) {
        return refusal(fmt::format(R"({{"type": "object", "properties": {{"a": {}}}}})", x));
    };
    EXPECT_NE(refused(R"({"type": "object", "properties": {"b": {}}, "propertyNames": {"enum": ["b"]}})")
                  .find("schema.properties.a: propertyNames beside properties is not supported"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "object", "patternProperties": {"^a": {}, "^b": {}}})")
                  .find("schema.properties.a.patternProperties: supported with one pattern"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "object", "patternProperties": {"^a": {}}, "additionalProperties": true})")
                  .find("patternProperties beside additionalProperties is not supported"),
              std::string::npos);
    EXPECT_NE(refused(R"js({"type": "object", "patternProperties": {"(?=a)": {}}})js")
                  .find("schema.properties.a.patternProperties: pattern '(?=a)':"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "object", "propertyNames": {"anyOf": [{"const": "a"}, {"const": "b"}]}})")
                  .find("schema.properties.a.propertyNames: anyOf or oneOf of key schemas is not supported"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "object", "propertyNames": {"type": "integer"}, "minProperties": 1})")
                  .find("schema.properties.a.propertyNames: no key is a value of it, and minProperties is 1"),
              std::string::npos);
    EXPECT_NE(refused(R"({"propertyNames": {"enum": ["b"]}})")
                  .find("'propertyNames' is supported beside \"type\": \"object\" only, not without a type"),
              std::string::npos);
    // No string is a key of a number's schema: the object is {}.
    const auto none = JsonSchema::compile(ojson::parse(
        R"({"type": "object", "properties": {"a": {"type": "object", "propertyNames": {"type": "integer"}}}})"));
    EXPECT_TRUE(whole(none, R"({"a": {}})"));
    EXPECT_FALSE(takes(none, R"({"a": {")"));
}

// minProperties and maxProperties (pydantic's dict[str, X] with min_length / max_length): a key is taken only if the
// count can still end within them — with the required properties after it, and the keys left to reach the minimum.
TEST(SchemaGrammar, KeepsPropertyCountsWithinBounds) {
    const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "d": {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 1, "maxProperties": 2},
        "o": {"type": "object", "properties": {"a": {"type": "null"}, "b": {"type": "null"}, "c": {"type": "null"},
              "r": {"type": "null"}}, "required": ["r"], "minProperties": 2, "maxProperties": 2,
              "additionalProperties": false},
        "any": {"type": "object", "maxProperties": 1}},
        "required": ["d", "o", "any"], "additionalProperties": false})");
    const auto schema = JsonSchema::compile(s);
    for (const char *t : {R"({"d": {"x": 1}, "o": {"a": null, "r": null}, "any": {}})",
                          R"({"d": {"x": 1, "y": 2}, "o": {"c": null, "r": null}, "any": {"k": [1]}})"}) {
        EXPECT_TRUE(whole(schema, t)) << t;
        EXPECT_TRUE(valid(ojson::parse(t), s, s)) << t;
    }
    const std::string o = R"({"d": {"x": 1}, "o": {)";
    for (const std::string &t : {std::string(R"({"d": {})"), std::string(R"({"d": {"x": 1, "y": 2,)"),
                                 o + R"("r": null})", o + R"("a": null, "b")", o + R"("a": null, "r": null,)",
                                 o + R"("r": null, "a")", o + R"("a": null, "r": null}, "any": {"k": 1,)"})
        EXPECT_FALSE(takes(schema, t)) << t;
    EXPECT_TRUE(takes(schema, o + R"("a": null, "r")"));
    EXPECT_GE(valid_walks(s, "{}[],:\"\" 0123456789-abcdrxyknul", 47), 20);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "object", "properties": {"x": {}, "y": {}},
        "required": ["x", "y"], "maxProperties": 1}}})").find("a: maxProperties 1 is below the 2 required properties"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "object", "properties": {"x": {}},
        "minProperties": 2, "additionalProperties": false}}})").find("minProperties 2 is above the 1 properties"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "object", "minProperties": 3,
        "maxProperties": 2}}})").find("maxProperties 2 is below minProperties 3"),
              std::string::npos);
}

// prefixItems (pydantic's tuple[int, str]): items by position, then "items" (none when it is false).
TEST(SchemaGrammar, TakesTuplesItemByPosition) {
    const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string", "maxLength": 2}],
                 "minItems": 2, "maxItems": 2},
        "head": {"type": "array", "prefixItems": [{"type": "boolean"}], "items": {"type": "null"}},
        "fixed": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "integer"}], "items": false}},
        "required": ["pair", "head", "fixed"], "additionalProperties": false})");
    const auto schema = JsonSchema::compile(s);
    for (const char *t : {R"({"pair": [1, "ab"], "head": [], "fixed": []})",
                          R"({"pair": [-2, ""], "head": [true, null, null], "fixed": [1, 2]})",
                          R"({"pair": [0, "x"], "head": [false], "fixed": [7]})"}) {
        EXPECT_TRUE(whole(schema, t)) << t;
        EXPECT_TRUE(valid(ojson::parse(t), s, s)) << t;
    }
    for (const char *t : {R"({"pair": ["a")", R"({"pair": [1, 2)", R"({"pair": [1])", R"({"pair": [1, "a",)",
                          R"({"pair": [1, "abc)", R"({"pair": [1, "a"], "head": [null)",
                          R"({"pair": [1, "a"], "head": [true, 1)",
                          R"({"pair": [1, "a"], "head": [], "fixed": [1, 2,)"})
        EXPECT_FALSE(takes(schema, t)) << t;
    EXPECT_GE(valid_walks(s, "{}[],:\"\" 0123456789-abtruefalsn", 41), 20);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "array", "prefixItems": [{}, {}],
        "items": false, "minItems": 3}}})").find("a: minItems 3 is above the 2 prefixItems, and items is false"),
              std::string::npos);
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/t"}},
        "$defs": {"t": {"type": "array", "prefixItems": [{"type": "integer"}, {"$ref": "#/$defs/t"}],
                        "minItems": 2}}})")
                  .find("admits no finite value"),
              std::string::npos);
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/t"}},
        "$defs": {"t": {"type": "array", "prefixItems": [{"type": "integer"}, {"$ref": "#/$defs/t"}]}}})")));
}

// uniqueItems (pydantic's set[str], set[int]): the byte that would end an item equal to an earlier one (as values:
// escapes decoded, 1 and 1.0 alike) is refused, and the item goes on into another value.
TEST(SchemaGrammar, KeepsItemsUnique) {
    const ojson s = ojson::parse(R"({"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
        "ids": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true, "maxItems": 4},
        "xs": {"type": "array", "items": {"$ref": "#/$defs/x"}, "uniqueItems": true}},
        "required": ["tags", "ids", "xs"], "additionalProperties": false,
        "$defs": {"x": {"type": ["number", "string"]}}})");
    const auto schema = JsonSchema::compile(s);
    for (const char *t : {R"({"tags": ["a", "b", "ab"], "ids": [0, 1, 10, -1], "xs": [1, "1", 1.5]})",
                          R"({"tags": [], "ids": [], "xs": []})"}) {
        EXPECT_TRUE(whole(schema, t)) << t;
        EXPECT_TRUE(valid(ojson::parse(t), s, s)) << t;
    }
    for (const char *t : {R"({"tags": ["a", "a")", R"({"tags": ["a", "\u0061")", R"({"tags": ["", "")",
                          R"({"tags": [], "ids": [5, 5,)", R"({"tags": [], "ids": [5, 5])",
                          R"({"tags": [], "ids": [5, 5 )",
                          R"({"tags": [], "ids": [0, 0)", R"({"tags": [], "ids": [0, -0)",
                          R"({"tags": [], "ids": [], "xs": [1, 1.0])", R"({"tags": [], "ids": [], "xs": [0, -0e5,)"})
        EXPECT_FALSE(takes(schema, t)) << t;
    EXPECT_TRUE(takes(schema, R"({"tags": ["a", "aa")"));  // a string goes on into another
    EXPECT_TRUE(takes(schema, R"({"tags": [], "ids": [5, 55)"));
    EXPECT_TRUE(takes(schema, R"({"tags": [], "ids": [], "xs": [0, 0.5)"));
    EXPECT_GE(valid_walks(s, "{}[],:\"\" 0123456789-.ab", 43), 20);
    const std::string bounded = refusal(R"({"type": "object", "properties": {"a": {"type": "array",
        "items": {"type": "integer", "maximum": 3}, "uniqueItems": true}}})");
    EXPECT_NE(bounded.find("schema.properties.a.uniqueItems: supported for items that can always be written unlike"),
              std::string::npos)
        << bounded;
    EXPECT_NE(refusal(R"({"type": "object", "properties": {"a": {"type": "array",
        "items": {"enum": ["x", "y"]}, "uniqueItems": true}}})").find("not for schema.properties.a.items"),
              std::string::npos);
    EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {"a": {"type": "array",
        "items": {"enum": ["x", "y"]}, "uniqueItems": false}}})")));
}

// Untrusted schemas: alternatives nested through shared definitions are found once each (a chain of definitions
// each referring twice to the next took 2^depth walks), and at most kMaxReadings readings are kept, the later
// alternatives dropped, without the grammar ever being stuck.
TEST(SchemaGrammar, BoundsItsReadingsOfAlternatives) {
    ojson chain = ojson::parse(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/d0"}}, "$defs": {}})");
    for (int i = 0; i < 28; ++i) {
        const std::string next = i == 27 ? "" : fmt::format("#/$defs/d{}", i + 1);
        chain["$defs"][fmt::format("d{}", i)] =
            next.empty() ? ojson{{"type", "integer"}}
                         : ojson{{"anyOf", ojson::array({ojson{{"$ref", next}}, ojson{{"$ref", next}}})}};
    }
    const auto deep = JsonSchema::compile(chain); // (2^27 walks before)
    SchemaGrammar d(deep);
    ASSERT_TRUE(d.feed(R"({"a": 12)"));
    EXPECT_EQ(d.readings(), 1u);
    ojson many = ojson::parse(R"({"type": "object", "properties": {"x": {"anyOf": []}}, "required": ["x"],
        "additionalProperties": false})");
    for (int i = 0; i < 20; ++i)
        many["properties"]["x"]["anyOf"].push_back(ojson::parse(fmt::format(
            R"({{"type": "object", "properties": {{"a": {{"type": "string"}}, "b{}": {{"type": "integer"}}}},
                "required": ["a", "b{}"], "additionalProperties": false}})",
            i, i)));
    const auto schema = JsonSchema::compile(many);
    SchemaGrammar g(schema);
    ASSERT_TRUE(g.feed(R"({"x": {"a": "")"));
    EXPECT_EQ(g.readings(), SchemaGrammar::kMaxReadings);
    EXPECT_TRUE(SchemaGrammar(g).feed(R"(, "b0": 1}})"));
    EXPECT_TRUE(SchemaGrammar(g).feed(R"(, "b15": 1}})"));
    EXPECT_FALSE(SchemaGrammar(g).feed(R"(, "b16")")); // dropped
    EXPECT_GE(valid_walks(many, "{}[],:\"\" 0123456789ab", 31), 20);
}

std::unique_ptr<InferModel> json_tiny_model() {
    Model m = Model::create(config_preset("tiny"));
    model_init_random(m, 3);
    return InferModel::from_model(std::move(m), DType::F32);
}

// A random model's tokens, drawn in JSON mode: an object when generation stops, a prefix of one when max_tokens
// cut it; the text is the tokens' text. The bias only makes the random model close strings and containers often.
TEST(Engine, JsonModeGivesAnObjectOrAPrefixOfOne) {
    const Tokenizer &tok = test::small_tokenizer();
    Engine e(json_tiny_model(), tok, EngineOptions{4, 8});
    SampleOptions o;
    o.temperature = 1.0;
    o.top_k = 0;
    o.max_new_tokens = 48;
    o.json_object = true;
    for (const char *s : {"\"", "}", "]", ","}) o.logit_bias.push_back({tok.encode(s).at(0), 6.0f});
    // A stop id that is an ordinary piece (a model whose eos_token_id names one) continues the JSON there: it ended
    // answers at an unclosed value with finish_reason "stop".
    o.stop_tokens = {tok.encode("\"").at(0), tok.encode(",").at(0)};
    const auto biased = o.logit_bias;
    const std::vector<int32_t> prompt = tok.encode("the quick brown fox");
    std::vector<Completion> got(8);
    for (size_t i = 0; i < got.size(); ++i) {
        o.seed = 100 + i;
        e.submit(prompt, o, {}, [&got, i](const Completion &c) { got[i] = c; });
    }
    e.run_until_idle();
    int objects = 0;
    for (const Completion &c : got) {
        EXPECT_EQ(c.text, tok.decode(c.tokens));
        if (c.finish_reason == "stop") {
            ++objects;
            EXPECT_TRUE(json::parse(c.text).is_object()) << c.text;
        } else {
            ASSERT_EQ(c.finish_reason, "length") << c.error;
            EXPECT_TRUE(viable_prefix(c.text)) << c.text;
        }
    }
    EXPECT_GE(objects, 4);
    // The same request without JSON mode: the model alone does not write JSON.
    o.stop_tokens.clear();
    o.json_object = false;
    o.logit_bias.clear();
    o.seed = 100;
    const Completion free = generate_one(e, prompt, o);
    EXPECT_FALSE(viable_prefix(free.text)) << free.text;
    // Batched with other requests, a JSON-mode request draws what it draws alone.
    o.json_object = true;
    o.logit_bias = biased;
    Engine alone(json_tiny_model(), tok, EngineOptions{1, 8});
    EXPECT_EQ(generate_one(alone, prompt, o).tokens, got[0].tokens);
    // Structured output: answers that stop are values of the schema.
    const ojson schema = ojson::parse(R"({"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
        "n": {"type": "integer"}, "why": {"type": ["string", "null"]}}, "required": ["answer", "n", "why"],
        "additionalProperties": false})");
    o.json_schema = JsonSchema::compile(schema);
    for (const char *ws : {" ", "\n", "\t", "\r"}) o.logit_bias.push_back({tok.encode(ws).at(0), -100.0f}); // terse
    int values = 0;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
        o.seed = seed;
        const Completion c = generate_one(e, prompt, o);
        if (c.finish_reason == "stop") {
            ++values;
            EXPECT_TRUE(valid(ojson::parse(c.text), schema, schema)) << c.text;
        } else {
            EXPECT_EQ(c.finish_reason, "length");
            EXPECT_TRUE(unfinished(c.text)) << c.text;
        }
    }
    EXPECT_GE(values, 3);
    // No tokenizer, no token bytes.
    Engine bare(json_tiny_model(), std::nullopt, EngineOptions{1, 8});
    EXPECT_NE(test::error_of([&] { bare.submit(prompt, o, {}, {}); }).find("tokenizer"), std::string::npos);
}

// A lazy constraint in the engine (tool_choice "auto"): answers are held to the schema from the trigger on, wherever
// it appears, and a stop id that is an ordinary piece continues them there; before it (and in answers without it)
// the text is free, and that stop id ends it. A third of the requests lean hard towards the trigger ("{": the random
// model seldom writes it), a third a little (it comes after words), the others write freely: what they would write
// without the constraint.
TEST(Engine, LazyJsonHoldsAnswersFromTheTriggerOn) {
    const Tokenizer &tok = test::small_tokenizer();
    Engine e(json_tiny_model(), tok, EngineOptions{4, 8});
    const ojson schema = ojson::parse(R"({"type": "object", "properties": {"n": {"type": "integer"},
        "why": {"type": "string", "maxLength": 6}}, "required": ["n", "why"], "additionalProperties": false})");
    SampleOptions o;
    o.temperature = 1.0;
    o.top_k = 0;
    o.max_new_tokens = 40;
    o.json_schema = JsonSchema::compile(schema, /*compact=*/true);
    o.json_trigger = "{";
    const int32_t comma = tok.encode(",").at(0);
    o.stop_tokens = {comma};
    const std::vector<int32_t> prompt = tok.encode("the quick brown fox");
    int held = 0, later = 0, values = 0, words = 0, stopped = 0;
    for (uint64_t seed = 1; seed <= 36; ++seed) {
        o.seed = seed;
        o.logit_bias = {{comma, 3.0f}};
        if (seed % 3 != 2)
            for (const char *p : {"{", "\"", "}"})
                o.logit_bias.push_back({tok.encode(p).at(0), *p != '{' ? 4.f : seed % 3 == 0 ? 10.f : 5.f});
        const Completion c = generate_one(e, prompt, o);
        ASSERT_NE(c.finish_reason, "error") << c.error;
        const size_t at = c.text.find('{');
        if (at != std::string::npos) {
            ++held;
            later += c.text.find_first_not_of(" \t\n\r") < at;
            const size_t comma_at = c.text.find(',');
            EXPECT_TRUE(comma_at == std::string::npos || comma_at > at) << c.text; // (it ends free text)
            if (c.finish_reason == "stop") { // closed: a value of the schema, commas and all
                ++values;
                EXPECT_TRUE(valid(ojson::parse(c.text.substr(at)), schema, schema)) << c.text;
            } else {
                EXPECT_TRUE(unfinished(c.text.substr(at))) << c.text;
            }
        } else {
            ++words;
            if (c.finish_reason == "stop") { // ended by the stop id, which is not emitted
                ++stopped;
                EXPECT_EQ(std::find(c.tokens.begin(), c.tokens.end(), comma), c.tokens.end()) << c.text;
            }
        }
        SampleOptions unheld = o; // free throughout: what the model writes without a schema (no token of this
        unheld.json_schema = nullptr; // vocabulary completes the trigger with bytes the schema refuses, so no mask
        unheld.json_trigger.clear();  // took anything away before the trigger)
        const Completion alone = generate_one(e, prompt, unheld);
        if (at == std::string::npos) {
            EXPECT_EQ(alone.tokens, c.tokens) << c.text;
            EXPECT_EQ(alone.finish_reason, c.finish_reason) << c.text;
        } else {
            EXPECT_EQ(alone.text.substr(0, at + 1), c.text.substr(0, at + 1));
        }
    }
    EXPECT_GE(held, 8);
    EXPECT_GE(later, 3);
    EXPECT_GE(values, 3);
    EXPECT_GE(words, 6);
    EXPECT_GE(stopped, 2);
}

// The same behind a reasoning block the prompt opened (SampleOptions::trigger_reasoning): the random model never
// writes "</think>", so its whole answer is reasoning, and the constraint leaves every token to the model, braces
// and all: the answers are those written without it.
TEST(Engine, LazyJsonLeavesTheReasoningFree) {
    const Tokenizer &tok = test::small_tokenizer();
    Engine e(json_tiny_model(), tok, EngineOptions{4, 8});
    SampleOptions o;
    o.temperature = 1.0;
    o.top_k = 0;
    o.max_new_tokens = 24;
    o.json_schema = JsonSchema::compile(ojson::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}},
        "required": ["n"], "additionalProperties": false})"), /*compact=*/true);
    o.json_trigger = "{";
    o.trigger_reasoning = ReasoningTags{};
    o.starts_in_reasoning = true;
    const std::vector<int32_t> prompt = tok.encode("the quick brown fox");
    int braces = 0;
    for (uint64_t seed = 1; seed <= 8; ++seed) {
        o.seed = seed;
        o.logit_bias = {{tok.encode("{").at(0), 6.0f}};
        const Completion c = generate_one(e, prompt, o);
        ASSERT_NE(c.finish_reason, "error") << c.error;
        ASSERT_EQ(c.text.find("</think>"), std::string::npos) << c.text;
        braces += c.text.find('{') != std::string::npos;
        SampleOptions unheld = o;
        unheld.json_schema = nullptr;
        unheld.json_trigger.clear();
        unheld.trigger_reasoning.reset();
        const Completion alone = generate_one(e, prompt, unheld);
        EXPECT_EQ(alone.tokens, c.tokens) << c.text;
    }
    EXPECT_GE(braces, 4);
}

} // namespace
} // namespace zaya
