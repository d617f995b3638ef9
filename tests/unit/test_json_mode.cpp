// JSON mode: the byte acceptor (infer/json_grammar.h) against nlohmann::json as the reference parser, the token
// masks (infer/json_constraint.h), and the engine's JSON-mode requests.
#include "infer/engine.h"
#include "infer/json_constraint.h"
#include "model/init.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fmt/format.h>
#include <random>

namespace zaya {
namespace {

using json = nlohmann::json;

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
                                      "]", "],", "\"}", "null", "a\"b", "x\ny", "☃☃", ",", ":", "\"", "\\", "n"};
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
    JsonConstraint c(table, JsonSchema::any_object());
    EXPECT_NE(test::error_of([&] { c.advance(2); }).find("does not continue"), std::string::npos); // '}' first
    EXPECT_NE(test::error_of([&] { c.advance(0); }).find("does not continue"), std::string::npos); // no bytes
}

using ojson = nlohmann::ordered_json;

// A direct validator of the schema subset (a different algorithm from the byte acceptor: over parsed values), with
// the properties' order checked too (the value parsed as an ordered_json).
bool valid(const ojson &v, const ojson &s, const ojson &root) {
    if (s.is_boolean()) return s.get<bool>();
    if (s.contains("$ref")) {
        const std::string r = s["$ref"].get<std::string>();
        return valid(v, r == "#" ? root : root["$defs"][r.substr(8)], root);
    }
    if (s.contains("const")) return v == s["const"];
    if (s.contains("enum")) return std::find(s["enum"].begin(), s["enum"].end(), v) != s["enum"].end();
    if (s.contains("anyOf"))
        return std::any_of(s["anyOf"].begin(), s["anyOf"].end(), [&](const ojson &a) { return valid(v, a, root); });
    if (s.contains("type") && s["type"].is_array())
        return std::any_of(s["type"].begin(), s["type"].end(), [&](const ojson &t) {
            ojson one = s;
            one["type"] = t;
            return valid(v, one, root);
        });
    const std::string type = s.value("type", "");
    if (type == "string") return v.is_string();
    if (type == "number") return v.is_number();
    if (type == "integer") // beyond 64 bits nlohmann keeps an integer as a double
        return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    if (type == "boolean") return v.is_boolean();
    if (type == "null") return v.is_null();
    if (type == "array") {
        if (!v.is_array() || v.size() < s.value("minItems", size_t(0)) || v.size() > s.value("maxItems", SIZE_MAX))
            return false;
        for (const ojson &x : v)
            if (!valid(x, s.value("items", ojson(true)), root)) return false;
        return true;
    }
    if (type == "object") {
        if (!v.is_object()) return false;
        if (!s.contains("properties")) return true;
        const ojson &props = s["properties"];
        auto at = props.begin();
        for (const auto &[key, x] : v.items()) { // in the schema's order, no other keys
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

TEST(JsonSchema, RefusesWhatItCannotEnforceNamingThePlace) {
    auto refused = [](const std::string &schema) {
        return test::error_of([&] { JsonSchema::compile(ojson::parse(schema)); });
    };
    EXPECT_NE(refused(R"({"type": "string"})").find("root must be an object"), std::string::npos);
    const std::string pattern =
        refused(R"({"type": "object", "properties": {"a": {"type": "string", "pattern": "x+"}}})");
    EXPECT_NE(pattern.find("schema.properties.a: 'pattern' is not supported"), std::string::npos) << pattern;
    EXPECT_NE(refused(R"({"type": "object", "properties": {}, "additionalProperties": true})")
                  .find("additionalProperties: must be false"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})").find("'b' is not among"),
              std::string::npos);
    const std::string twice = refused(R"({"type": "object", "properties": {"a": {"anyOf": [
        {"type": "object", "properties": {"x": {}}}, {"type": "object"}]}}})");
    EXPECT_NE(twice.find("schema.properties.a: the alternatives of anyOf"), std::string::npos) << twice;
    EXPECT_NE(twice.find("begin with '{'"), std::string::npos) << twice;
    EXPECT_NE(refused(R"({"type": "object", "properties": {"a": {"type": ["number", "integer"]}}})")
                  .find("begin with '-'"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}})").find("names no definition"),
              std::string::npos);
    EXPECT_NE(refused(R"({"type": "object", "properties": {"a": {"type": "date"}}})").find("unknown type 'date'"),
              std::string::npos);
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

} // namespace
} // namespace zaya
