// Tool calling (infer/tool_calls.h): the request's tools and tool_choice read and refused naming the field, calls
// held to the tools' schema (compact JSON: calls of the tools offered with arguments of their schemas; under "auto"
// only from the trigger on, wherever it appears), earlier turns written exactly as the model answers, answers read
// back into OpenAI's message, and the words and calls of an answer streamed as they come whatever the pieces.
#include "core/utf8.h"
#include "data/sources.h"
#include "infer/openai_api.h"
#include "infer/tool_calls.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

namespace zaya {
namespace {

using nlohmann::json;

const char *kTools = R"([
    {"type": "function", "function": {"name": "get_weather", "description": "The weather at a place",
     "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                    "unit": {"$ref": "#/$defs/Unit"}}, "required": ["city", "unit"], "additionalProperties": false,
                    "$defs": {"Unit": {"enum": ["c", "f"]}}}}},
    {"type": "function", "function": {"name": "tree", "parameters": {"type": "object", "properties":
                    {"kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2}}, "required": ["kids"]}}},
    {"type": "function", "function": {"name": "now"}},
    {"type": "function", "function": {"name": "odd_names", "parameters": {"type": "object", "properties": {
        "enum": {"$ref": "#/$defs/const"}, "default": {"type": "array", "items": {"$ref": "#/properties/enum"}}},
        "required": ["enum", "default"], "additionalProperties": false,
        "$defs": {"const": {"enum": [{"$ref": "#"}, 2]}}}}}])";

std::string chat_body(const std::string &extra,
                      const std::string &messages = R"([{"role": "user", "content": "hi"}])") {
    return R"({"messages": )" + messages + R"(, "tools": )" + kTools + (extra.empty() ? "" : ", " + extra) + "}";
}

// The ApiError's parameter and message, or empty if the body parses.
std::pair<std::string, std::string> refusal_of(const std::string &body, bool chat = true) {
    try {
        parse_api_request(body, chat, 4096);
    } catch (const ApiError &e) {
        EXPECT_EQ(e.status, 400);
        return {e.param, e.message};
    }
    return {};
}

// An answer in zaya's own object read back (ApiTools' format Json).
ToolAnswer tc_read_answer(const std::string &text, const std::string &finish_reason, const std::string &id_prefix) {
    return read_tool_answer(ApiTools{}, text, finish_reason, id_prefix);
}

bool whole(const std::shared_ptr<const JsonSchema> &schema, const std::string &text) {
    SchemaGrammar g(schema);
    return g.feed(text) && g.complete();
}

TEST(ToolCalls, ReadsToolsAndRefusesNamingTheField) {
    const ApiRequest r = parse_api_request(chat_body(""), true, 4096);
    ASSERT_EQ(r.tools.tools.size(), 4u);
    EXPECT_EQ(r.tools.choice, ApiTools::Choice::Auto); // tools given: "auto"
    EXPECT_TRUE(r.tools.parallel);
    EXPECT_EQ(r.tools.tools[0].description, "The weather at a place");
    EXPECT_EQ(r.tools.tools[2].parameters, nlohmann::ordered_json::parse(R"({"type": "object", "properties": {}})"));
    ASSERT_NE(r.sample.json_schema, nullptr);
    EXPECT_TRUE(r.sample.json_schema->compact());
    EXPECT_NE(r.messages[0].content.find(R"({"name":"get_weather","description":"The weather at a place",)"),
              std::string::npos)
        << r.messages[0].content;
    // "none": no tools shown, no schema.
    const ApiRequest none = parse_api_request(chat_body(R"("tool_choice": "none")"), true, 4096);
    EXPECT_FALSE(none.tools.active());
    EXPECT_EQ(none.sample.json_schema, nullptr);
    ASSERT_EQ(none.messages.size(), 1u);
    EXPECT_EQ(none.messages[0].content, "hi");

    const std::vector<std::tuple<std::string, bool, std::string, std::string>> bad = {
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": []})", true, "tools", "non-empty array"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]})", true, "tools[0]",
         "\"type\": \"function\""},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function":
            {"name": "get weather"}}]})",
         true, "tools[0].function.name", "letters, digits, '_' or '-', got 'get weather'"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "a"}}]})",
         true, "tools[1].function.name", "two tools are named 'a'"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a",
            "parameters": {"type": "object", "properties": {"x": {"not": {}}}}}}]})", true,
         "tools[0].function.parameters", "tools[0].function.parameters.properties.x: 'not' is not supported"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "a",
            "parameters": {"type": "string"}}}]})", true, "tools[0].function.parameters", "the root must be an object"},
        {chat_body(R"("tool_choice": {"type": "function", "function": {"name": "b"}})"), true, "tool_choice",
         "names 'b', which is not among the tools"},
        {chat_body(R"("tool_choice": "sometimes")"), true, "tool_choice", "got 'sometimes'"},
        {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "auto"})", true, "tool_choice",
         "needs 'tools'"},
        {chat_body(R"("parallel_tool_calls": "yes")"), true, "parallel_tool_calls", "must be a boolean"},
        {R"({"messages": [{"role": "user", "content": "x"}], "functions": [{"name": "a"}]})", true, "functions",
         "use 'tools'"},
        {R"({"prompt": "x", "tools": [{"type": "function", "function": {"name": "a"}}]})", false, "tools",
         "applies to /v1/chat/completions"},
        {chat_body(R"("response_format": {"type": "json_object"})"), true, "response_format", "with tools"},
        {chat_body("", R"([{"role": "user", "content": "x"}, {"role": "tool", "content": "3"}])"), true,
         "messages[1].tool_call_id", "needs a string 'tool_call_id'"},
        {chat_body("", R"([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function":
            {"name": "now", "arguments": "{oops"}}]}])"), true, "messages[0].tool_calls[0].function.arguments",
         "is not valid JSON"},
        {chat_body("", R"([{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function":
            {"name": "now", "arguments": ")" + std::string(100000, '[') + std::string(100000, ']') + R"("}}]}])"),
         true, "messages[0].tool_calls[0].function.arguments", "nests deeper than 256 levels"},
        {chat_body("", R"([{"role": "assistant", "tool_calls": [{"id": "c"}]}])"), true, "messages[0].tool_calls[0]",
         "must be {\"type\": \"function\""},
        {chat_body("", R"([{"role": "user", "content": null}])"), true, "messages[0].content", "must be a string"},
        {chat_body("", R"([{"role": "function", "content": "x"}])"), true, "messages[0].role", "unsupported role"},
    };
    for (const auto &[body, chat, param, message] : bad) {
        const auto [p, m] = refusal_of(body, chat);
        EXPECT_EQ(p, param) << body;
        EXPECT_NE(m.find(message), std::string::npos) << m;
    }
}

TEST(ToolCalls, HoldsTheAnswerToTheToolsAndTheirArguments) {
    const auto schema = parse_api_request(chat_body(""), true, 4096).sample.json_schema;
    const std::string weather = R"({"name":"get_weather","arguments":{"city":"Paris","unit":"c"}})";
    for (const std::string &good :
         {R"({"tool_calls":[)" + weather + "]}", R"({"tool_calls":[)" + weather + "," + weather + "]}",
          std::string(R"({"tool_calls":[{"name":"tree","arguments":{"kids":[{"kids":[]},{"kids":[{"kids":[]}]}]}}]})"),
          std::string(R"({"tool_calls":[{"name":"now","arguments":{}}]})"),
          // properties named like keywords, a definition named "const" whose enum holds an object like a reference
          std::string(R"({"tool_calls":[{"name":"odd_names","arguments":{"enum":{"$ref":"#"},"default":[2]}}]})")})
        EXPECT_TRUE(whole(schema, good)) << good;
    for (const std::string &bad : {
             std::string(R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"k"}}]})"),
             std::string(R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}}]})"), // unit required
             std::string(R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris-sur-Seine","unit":"c"}})"
                         "]}"), // maxLength 12
             std::string(R"({"tool_calls":[{"name":"tree","arguments":{"kids":[{},{},{}]}}]})"), // maxItems, kids
             std::string(R"({"tool_calls":[{"name":"now","arguments":{"x":1}}]})"),
             std::string(R"({"tool_calls":[{"name":"other","arguments":{}}]})"),
             std::string(R"({"tool_calls":[]})"), std::string("{}"),
             std::string(R"({"content":"a","tool_calls":[{"name":"now","arguments":{}}]})"), // one of the two
             std::string(R"({"tool_calls":[{"arguments":{},"name":"now"}]})"),               // name first
             std::string(R"({"content":"Hello."})"), // words are not an object (under "auto", the text turned away)
             std::string(R"({"tool_calls": [{"name":"now","arguments":{}}]})"), // no whitespace
             std::string(R"( {"tool_calls":[{"name":"now","arguments":{}}]})"),
             std::string(R"({"tool_calls":[{"name":"tree","arguments":{"kids": []}}]})"),
             std::string(R"({"tool_calls":[{"name":"odd_names","arguments":{"enum":3,"default":[]}}]})")})
        EXPECT_FALSE(whole(schema, bad)) << bad;

    // "auto" is lazy: the trigger, the first bytes of every call object, decides (infer/json_constraint.h).
    const ApiRequest automatic = parse_api_request(chat_body(""), true, 4096);
    EXPECT_EQ(automatic.sample.json_trigger, kToolCallsTrigger);
    EXPECT_TRUE(SchemaGrammar(schema).feed(kToolCallsTrigger));
    EXPECT_NE(automatic.messages[0].content.find("Otherwise answer in words."), std::string::npos);
    const ApiRequest required = parse_api_request(chat_body(R"("tool_choice": "required")"), true, 4096);
    EXPECT_TRUE(whole(required.sample.json_schema, R"({"tool_calls":[)" + weather + "]}"));
    EXPECT_TRUE(required.sample.json_trigger.empty()); // held from the first token
    EXPECT_EQ(required.messages[0].content.find("words"), std::string::npos) << required.messages[0].content;
    const auto named = parse_api_request(
        chat_body(R"("tool_choice": {"type": "function", "function": {"name": "now"}}, "parallel_tool_calls": false)"),
        true, 4096);
    EXPECT_TRUE(named.sample.json_trigger.empty());
    EXPECT_TRUE(whole(named.sample.json_schema, R"({"tool_calls":[{"name":"now","arguments":{}}]})"));
    EXPECT_FALSE(whole(named.sample.json_schema, R"({"tool_calls":[)" + weather + "]}"));
    EXPECT_FALSE(whole(named.sample.json_schema,
                       R"({"tool_calls":[{"name":"now","arguments":{}},{"name":"now","arguments":{}}]})")); // one call
    EXPECT_NE(named.messages[0].content.find(R"({"tool_calls":[{"name":"now","arguments":{...}}]} to call now)"),
              std::string::npos)
        << named.messages[0].content;
    EXPECT_NE(named.messages[0].content.find(R"({"name":"tree")"), std::string::npos); // every tool is described
}

// Earlier turns are written as the model answers: calls as the grammar of the same request takes them whole, words
// as they are.
TEST(ToolCalls, WritesEarlierTurnsAsTheGrammarTakesThem) {
    const std::string history = R"([{"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather",
             "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}},
            {"id": "call_b", "type": "function", "function": {"name": "get_weather",
             "arguments": "{\"city\":\"Ro\\u006de\",\"unit\":\"c\"}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "18 C"},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "21 C"}]},
        {"role": "assistant", "content": "Paris 18, Rome 21 \"C\"."},
        {"role": "user", "content": "And now?"},
        {"role": "tool", "tool_call_id": "call_x", "content": "?"}])";
    const ApiRequest r = parse_api_request(chat_body("", history), true, 4096);
    ASSERT_EQ(r.messages.size(), 7u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content.rfind("Be brief.\n\nYou can call tools.", 0), 0u) << r.messages[0].content;
    const std::string calls = R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris","unit":"c"}},)"
                              R"({"name":"get_weather","arguments":{"city":"Rome","unit":"c"}}]})";
    EXPECT_EQ(r.messages[2].role, "assistant");
    EXPECT_EQ(r.messages[2].content, calls);
    EXPECT_TRUE(whole(r.sample.json_schema, r.messages[2].content));
    EXPECT_EQ(r.messages[3].role, "user"); // the two results, one turn
    EXPECT_EQ(r.messages[3].content,
              "The call call_a of get_weather returned:\n18 C\n\nThe call call_b of get_weather returned:\n21 C");
    EXPECT_EQ(r.messages[4].content, "Paris 18, Rome 21 \"C\".");
    EXPECT_EQ(r.messages[6].content, "The call call_x of a tool returned:\n?"); // a call it was not shown
    // With tool_choice "none", words stay words; calls are still written as they were made.
    const ApiRequest none = parse_api_request(chat_body(R"("tool_choice": "none")", history), true, 4096);
    EXPECT_EQ(none.messages[0].content, "Be brief.");
    EXPECT_EQ(none.messages[2].content, calls);
    EXPECT_EQ(none.messages[4].content, "Paris 18, Rome 21 \"C\".");
    // Words beside calls: the words, a line, then the calls, which read back as the message they came from.
    const ApiRequest both = parse_api_request(
        chat_body("", R"([{"role": "user", "content": "Time?"}, {"role": "assistant", "content": "One moment.",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "now", "arguments": "{}"}}]}])"),
        true, 4096);
    EXPECT_EQ(both.messages[2].content, "One moment.\n{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}}]}");
    const ToolAnswer back = tc_read_answer(both.messages[2].content, "stop", "1_0");
    EXPECT_EQ(back.content, "One moment.");
    EXPECT_EQ(back.tool_calls[0]["function"]["name"], "now");
}

// Fine-tuning chats with tools (`zaya prepare`) are the turns the server prompts with: the same messages, so a model
// learns its calls in the form the grammar holds it to.
TEST(ToolCalls, FineTuningChatsAreTheServersTurns) {
    const std::string history = R"([{"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "18 C"},
        {"role": "assistant", "content": "It is 18 C in Paris."}])";
    const std::string record = chat_body(R"("parallel_tool_calls": false)", history);
    test::TempDir dir;
    const std::string path = dir.str("chats.jsonl");
    std::ofstream(path) << nlohmann::ordered_json::parse(record).dump() << "\n" // one line, in its order
                        << R"({"messages": [{"role": "user", "content": "x"}]})"
                        << "\n";
    const std::vector<Document> docs = read_documents(SourceFile{path, "chats.jsonl", true, 0});
    ASSERT_EQ(docs.size(), 1u); // (the chat without an answer is dropped)
    const ApiRequest served = parse_api_request(record, true, 4096);
    ASSERT_EQ(docs[0].messages.size(), served.messages.size());
    for (size_t i = 0; i < served.messages.size(); ++i) {
        EXPECT_EQ(docs[0].messages[i].role, served.messages[i].role) << i;
        EXPECT_EQ(docs[0].messages[i].content, served.messages[i].content) << i;
    }
    EXPECT_NE(docs[0].messages[0].content.find("exactly one call"), std::string::npos); // the record's choice
    EXPECT_TRUE(whole(served.sample.json_schema, docs[0].messages[2].content)); // the call, as the grammar takes it
    EXPECT_EQ(docs[0].messages[4].content, "It is 18 C in Paris."); // the words as they are

    // OpenAI's deprecated `functions` are refused in a record as in a request, not silently dropped.
    const std::string legacy = dir.str("legacy.jsonl");
    std::ofstream(legacy) << R"({"functions": [{"name": "f"}], "messages": [{"role": "user", "content": "x"},)"
                          << R"( {"role": "assistant", "content": "y"}]})" << "\n";
    try {
        read_documents(SourceFile{legacy, "legacy.jsonl", true, 0});
        ADD_FAILURE() << "a record with 'functions' was read";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("legacy.jsonl:1"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("'functions' is OpenAI's deprecated form"), std::string::npos) << e.what();
    }
}

TEST(ToolCalls, ReadsAnswersBackIntoOpenAIsMessage) {
    ToolAnswer a = tc_read_answer(
        R"({"tool_calls":[{"name":"get_weather","arguments":{"unit":"c","city":"Paris"}},)"
        R"({"name":"now","arguments":{}}]})",
        "stop", "7_1");
    EXPECT_EQ(a.finish_reason, "tool_calls");
    ASSERT_EQ(a.tool_calls.size(), 2u);
    EXPECT_EQ(a.tool_calls[0]["id"], "call_7_1_0");
    EXPECT_EQ(a.tool_calls[1]["id"], "call_7_1_1");
    EXPECT_EQ(a.tool_calls[0]["type"], "function");
    EXPECT_EQ(a.tool_calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(a.tool_calls[0]["function"]["arguments"], R"({"unit":"c","city":"Paris"})"); // as written, in order
    EXPECT_EQ(a.tool_calls[1]["function"]["arguments"], "{}");
    a = tc_read_answer("\n{\"content\":\"caf\u00e9\"} \xf0\x9f\x98\x80", "stop", "1_0"); // words, as written
    EXPECT_TRUE(a.tool_calls.is_null());
    EXPECT_EQ(a.content, "\n{\"content\":\"caf\u00e9\"} \xf0\x9f\x98\x80");
    EXPECT_EQ(a.finish_reason, "stop");
    // Cut short (max_tokens): the calls begun, or the text itself; the finish reason stays.
    a = tc_read_answer(R"( {"tool_ca)", "length", "1_0"); // undecided: the text
    EXPECT_EQ(a.content, R"( {"tool_ca)");
    EXPECT_EQ(a.finish_reason, "length");
    a = tc_read_answer(" \n{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}}]}", "stop", "1_0");
    ASSERT_EQ(a.tool_calls.size(), 1u); // whitespace before the trigger, as the engine allows
    EXPECT_EQ(a.finish_reason, "tool_calls");
    a = tc_read_answer(R"({"tool_calls":[{"name":"no)", "length", "1_0"); // no call begun yet: the text
    EXPECT_TRUE(a.tool_calls.is_null());
    EXPECT_EQ(a.content, R"({"tool_calls":[{"name":"no)");
    a = tc_read_answer(R"({"tool_calls":[{"name":"now","arguments":{}},{"name":"get_weather","arguments":{"ci)",
                         "length", "1_0"); // the calls begun, the last cut where the text ends
    ASSERT_EQ(a.tool_calls.size(), 2u);
    EXPECT_EQ(a.tool_calls[1]["function"]["name"], "get_weather");
    EXPECT_EQ(a.tool_calls[1]["function"]["arguments"], R"({"ci)");
    EXPECT_EQ(a.finish_reason, "length");
    EXPECT_EQ(tc_read_answer(R"({"tool_calls":[{"name":"now","arguments":{}})", "stop", "1_0").finish_reason,
              "stop"); // cut by a stop string: not a whole answer
    // Words, then calls: the words before the trigger are the content, without the whitespace that ends them.
    a = tc_read_answer("Let me look {\"tool_c.\n\n{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}}]}", "stop",
                         "1_0");
    EXPECT_EQ(a.content, "Let me look {\"tool_c.");
    ASSERT_EQ(a.tool_calls.size(), 1u);
    EXPECT_EQ(a.tool_calls[0]["id"], "call_1_0_0");
    EXPECT_EQ(a.finish_reason, "tool_calls");
    a = tc_read_answer("Hm {\"tool_c{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}}]}", "stop", "1_0");
    EXPECT_EQ(a.content, "Hm {\"tool_c"); // the trigger begun again inside its own first bytes
    EXPECT_EQ(a.tool_calls.size(), 1u);
    a = tc_read_answer("Hm. {\"tool_calls\":[{\"na", "length", "1_0"); // no call begun: the text
    EXPECT_TRUE(a.tool_calls.is_null());
    EXPECT_EQ(a.content, "Hm. {\"tool_calls\":[{\"na");

    // The response: no content beside the calls.
    ApiRequest r = parse_api_request(chat_body(""), true, 4096);
    ApiChoice c;
    c.completion.text = R"({"tool_calls":[{"name":"now","arguments":{}}]})";
    c.completion.finish_reason = "stop";
    const json out = completion_response(r, "chatcmpl-9", 0, "m", {c, c}, [](int32_t) { return TokenSpelling{}; });
    const json &m = out["choices"][1]["message"];
    EXPECT_EQ(out["choices"][1]["finish_reason"], "tool_calls");
    EXPECT_TRUE(m["content"].is_null());
    EXPECT_EQ(m["tool_calls"][0]["id"], "call_9_1_0");
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "now");
    c.completion.text = "Right away. " + c.completion.text; // words beside the calls
    const json both = completion_response(r, "chatcmpl-9", 0, "m", {c}, [](int32_t) { return TokenSpelling{}; });
    EXPECT_EQ(both["choices"][0]["message"]["content"], "Right away.");
    EXPECT_EQ(both["choices"][0]["message"]["tool_calls"].size(), 1u);
    EXPECT_EQ(both["choices"][0]["finish_reason"], "tool_calls");
}

// Pieces of an answer in random sizes (byte by byte first): what an AnswerStream gives for them, gathered, with
// what its finish() gives back last.
struct Streamed {
    std::string words, held; // words as they came, and those given back by finish()
    std::vector<std::pair<std::string, std::string>> calls; // name, arguments
    bool is_calls = false, complete = false;
};
Streamed stream_in_pieces(const std::string &text, std::mt19937 &rng, bool byte_by_byte) {
    AnswerStream s;
    Streamed out;
    for (size_t at = 0; at < text.size();) {
        const size_t n = byte_by_byte ? 1 : 1 + rng() % 6;
        const AnswerPiece p = s.feed(std::string_view(text).substr(at, n));
        EXPECT_TRUE(is_utf8(p.words)) << text;
        EXPECT_TRUE(p.words.empty() || out.calls.empty()) << text; // words come before calls
        out.words += p.words;
        for (const AnswerPiece::Call &c : p.calls) {
            EXPECT_TRUE(is_utf8(c.arguments)) << text; // whole characters only
            if (!c.name.empty()) {
                EXPECT_EQ(c.index, out.calls.size()) << text; // each call begins once, in order
                out.calls.emplace_back(c.name, "");
            }
            EXPECT_LT(c.index, out.calls.size()) << text; // (its pieces after its name)
            if (c.index < out.calls.size()) out.calls[c.index].second += c.arguments;
        }
        at += n;
    }
    out.is_calls = s.calls(), out.complete = s.complete();
    out.held = s.finish().words;
    EXPECT_TRUE(s.finish().words.empty()); // given back once
    return out;
}

// The words and calls streamed, cut anywhere (inside escapes, surrogate pairs, UTF-8 characters, names, arguments,
// the trigger), add up to the answer's, and to what read_tool_answer reads from the whole text.
TEST(AnswerStream, StreamsWordsAndCallsWhateverThePieces) {
    // Words: the text as written. Only what may yet begin calls waits for finish(): whitespace at the end, and a
    // part of the trigger (with the whitespace before it).
    const std::vector<std::pair<std::string, std::string>> words = { // text, what finish() gives back
        {"plain words", ""},
        {"\n\n  Caf\xc3\xa9 \xe4\xb8\xad \xf0\x9f\x98\x80", ""},
        {R"({"content":"a\"b"})", ""},
        {R"(Use {"tool_calls" :[]})", ""},
        {"{\n", "\n"},
        {R"(a {"tool_callsX)", ""},
        {"Hi there \n", " \n"},
        {R"(Hi {"tool_c)", R"( {"tool_c)"},
        {R"(Hi {"tool_c{"to)", R"({"to)"},
        {"", ""},
        {" \n", " \n"}};
    std::mt19937 rng(5);
    for (const auto &[text, held] : words) {
        for (int trial = 0; trial < 200; ++trial) {
            const Streamed got = stream_in_pieces(text, rng, trial == 0);
            EXPECT_TRUE(!got.complete && !got.is_calls && got.calls.empty()) << text;
            EXPECT_EQ(got.words + got.held, text);
            EXPECT_EQ(got.held, held) << text;
        }
        EXPECT_EQ(tc_read_answer(text, "stop", "1_0").content, text);
    }
    const std::string args0 = R"({"city":"Par\"is}{","n":[1,{"x":[]}],"é":"\u00e9 \xf0\x9f\x98\x80"})";
    const std::string call0 =
        R"({"tool_calls":[{"name":"get_weather","arguments":)" + args0 + R"(},{"name":"now","arguments":{}}]})";
    const std::vector<std::pair<std::string, std::string>> calls = { // text, its words
        {call0, ""},
        {"\n{\"tool_calls\": [ { \"name\" : \"now\" , \"arguments\" : { } } ] }\n", ""},
        {"Caf\xc3\xa9, one moment.\n" + call0, "Caf\xc3\xa9, one moment."},
        {R"(x{"tool_c{"tool_calls":[{"name":"now","arguments":{}}]})", R"(x{"tool_c)"}};
    for (const auto &[text, before] : calls) {
        const ToolAnswer whole = tc_read_answer(text, "stop", "1_0");
        ASSERT_FALSE(whole.tool_calls.is_null()) << text;
        EXPECT_EQ(whole.finish_reason, "tool_calls");
        EXPECT_EQ(whole.content, before);
        for (int trial = 0; trial < 200; ++trial) {
            const Streamed got = stream_in_pieces(text, rng, trial == 0);
            EXPECT_TRUE(got.is_calls && got.complete && got.held.empty());
            EXPECT_EQ(got.words, before) << text;
            ASSERT_EQ(got.calls.size(), whole.tool_calls.size()) << text;
            for (size_t k = 0; k < got.calls.size(); ++k) {
                EXPECT_EQ(got.calls[k].first, whole.tool_calls[k]["function"]["name"]);
                EXPECT_EQ(got.calls[k].second, whole.tool_calls[k]["function"]["arguments"]);
            }
        }
    }
    EXPECT_EQ(tc_read_answer(call0, "stop", "1_0").tool_calls[0]["function"]["arguments"], args0); // as written
    EXPECT_EQ(tc_read_answer(calls[1].first, "stop", "1_0").tool_calls[0]["function"]["arguments"], "{ }");
    // Calls of other shapes, or cut before a name: no call comes out, and their text, from the words' end on, is
    // given back by finish(): read back they are the text itself.
    for (const std::string &text :
         {std::string(R"({"tool_calls":{"x":1}})"), std::string(R"({"tool_calls":[1]})"),
          std::string(R"(So: {"tool_calls":[{"arguments":{},"name":"now"}]})"),
          std::string("So \xc3\xa9 {\"tool_calls\":[{\"name\":\"no"),
          std::string(R"({"tool_calls":)" "\xe2\x80\x8b")}) {
        for (int trial = 0; trial < 50; ++trial) {
            const Streamed got = stream_in_pieces(text, rng, trial == 0);
            EXPECT_FALSE(got.is_calls || got.complete) << text;
            EXPECT_TRUE(got.calls.empty()) << text;
            EXPECT_EQ(got.words + got.held, text);
            EXPECT_EQ(got.held, text.substr(std::min(text.find(" {"), text.find('{')))) << text;
        }
        const ToolAnswer a = tc_read_answer(text, "stop", "1_0");
        EXPECT_TRUE(a.tool_calls.is_null());
        EXPECT_EQ(a.content, text);
    }
    // A shape that breaks off after a call began is that call, as far as it went (its delta was sent).
    const ToolAnswer broken = tc_read_answer(R"({"tool_calls":[{"name":"now","arguments":3}]})", "stop", "1_0");
    ASSERT_EQ(broken.tool_calls.size(), 1u);
    EXPECT_EQ(broken.tool_calls[0]["function"]["arguments"], "");
    EXPECT_EQ(broken.finish_reason, "stop");
}

} // namespace
} // namespace zaya
