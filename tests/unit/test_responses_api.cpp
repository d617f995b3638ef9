// The Responses API (infer/responses_api.h): a request read as the chat request it means (items, instructions,
// tools, tool_choice, text.format, max_output_tokens), refusals naming the Responses field, the Response object of
// words, calls and answers cut short, and a stream's events — gathered as OpenAI's client gathers them, whatever the
// pieces — adding up to that object.
#include "infer/response_store.h"
#include "infer/responses_api.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <random>

namespace zaya {
namespace {

using nlohmann::json;

ApiRequest parsed(const std::string &body, json *echoed = nullptr) {
    ResponsesRequest q;
    try {
        q = parse_responses_request(body, 4096);
    } catch (const ApiError &e) {
        ADD_FAILURE() << body << ": " << e.param << ": " << e.message;
        throw;
    }
    if (echoed) *echoed = q.echoed;
    return q.api;
}

std::pair<std::string, std::string> refusal_of(const std::string &body) {
    try {
        parse_responses_request(body, 4096);
    } catch (const ApiError &e) {
        EXPECT_EQ(e.status, 400);
        return {e.param, e.message};
    }
    return {};
}

const char *kResponsesTools = R"([{"type": "function", "name": "get_weather", "description": "The weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
    "additionalProperties": false}, "strict": true}, {"type": "function", "name": "now"}])";

TEST(ResponsesApi, ReadsTheRequestAsTheChatItMeans) {
    // A string input, instructions as the system turn, the sampling fields.
    json echoed;
    ApiRequest r = parsed(R"({"model": "zaya", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 7,
                              "temperature": 0.5, "top_p": 0.9, "seed": 3})",
                          &echoed);
    EXPECT_TRUE(r.chat);
    EXPECT_EQ(r.n, 1);
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "Be brief.");
    EXPECT_EQ(r.messages[1].role, "user");
    EXPECT_EQ(r.messages[1].content, "Hi");
    EXPECT_EQ(r.sample.max_new_tokens, 7);
    EXPECT_DOUBLE_EQ(r.sample.temperature, 0.5);
    EXPECT_DOUBLE_EQ(r.sample.top_p, 0.9);
    EXPECT_EQ(r.sample.seed, 3u);
    EXPECT_EQ(echoed["instructions"], "Be brief.");
    EXPECT_EQ(echoed["max_output_tokens"], 7);
    EXPECT_EQ(echoed["tool_choice"], "none");
    EXPECT_EQ(echoed["text"]["format"]["type"], "text");

    // Items: a system message joins the instructions; text parts; calls in a row are one assistant turn, their
    // outputs the tool results; the same turns as the chat request with those messages.
    const std::string items = R"([
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather in "},
                                                        {"type": "input_text", "text": "Oslo and Rome?"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": "{\"city\":\"Rome\"}"},
        {"type": "function_call_output", "call_id": "c1", "output": "3 C"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "21 C"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Cold, warm."}]},
        {"role": "user", "content": "Thanks"}])";
    r = parsed(R"({"instructions": "Be brief.", "tools": )" + std::string(kResponsesTools) +
                   R"(, "input": )" + items + "}",
               &echoed);
    const ApiRequest chat = parse_api_request(R"({"tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "The weather", "parameters": {
         "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
         "additionalProperties": false}, "strict": true}}, {"type": "function", "function": {"name": "now"}}],
        "messages": [{"role": "system", "content": "Be brief.\n\nUse tools."},
        {"role": "user", "content": "Weather in Oslo and Rome?"},
        {"role": "assistant", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
            {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "3 C"},
        {"role": "tool", "tool_call_id": "c2", "content": "21 C"},
        {"role": "assistant", "content": "Cold, warm."}, {"role": "user", "content": "Thanks"}]})",
                                              true, 4096);
    ASSERT_EQ(r.messages.size(), chat.messages.size());
    for (size_t i = 0; i < r.messages.size(); ++i) {
        EXPECT_EQ(r.messages[i].role, chat.messages[i].role) << i;
        EXPECT_EQ(r.messages[i].content, chat.messages[i].content) << i;
    }
    EXPECT_NE(r.messages[2].content.find(R"("name":"get_weather","arguments":{"city":"Rome"})"), std::string::npos);
    EXPECT_EQ(r.sample.json_trigger, kToolCallsTrigger); // tool_choice auto by default
    EXPECT_EQ(echoed["tool_choice"], "auto");
    EXPECT_EQ(echoed["tools"], json::parse(kResponsesTools));

    // tool_choice naming a function, Responses' form; text.format as structured outputs.
    r = parsed(R"({"input": "x", "tools": )" + std::string(kResponsesTools) +
               R"(, "tool_choice": {"type": "function", "name": "now"}, "parallel_tool_calls": false})");
    EXPECT_EQ(r.tools.choice, ApiTools::Choice::Named);
    EXPECT_EQ(r.tools.named, "now");
    EXPECT_FALSE(r.tools.parallel);
    r = parsed(R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "A", "strict": true,
                   "schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}})");
    ASSERT_TRUE(r.sample.json_schema);
    SchemaGrammar g(r.sample.json_schema);
    EXPECT_TRUE(g.feed(R"({"a": 3})") && g.complete());
    EXPECT_TRUE(parsed(R"({"input": "x", "text": {"format": {"type": "json_object"}}})").sample.json_object);
    EXPECT_FALSE(parsed(R"({"input": "x", "text": {"format": {"type": "text"}}})").sample.json_mode());
}

TEST(ResponsesApi, RefusesNamingTheResponsesField) {
    struct Case {
        std::string body, param, says;
    };
    const std::vector<Case> cases = {
        {R"({"model": "m"})", "input", "required"},
        {R"({"input": []})", "input", "non-empty"},
        {R"({"input": 3})", "input", "string"},
        {R"({"input": [3]})", "input[0]", "object"},
        {R"({"input": [{"role": "tool", "content": "x"}]})", "input[0].role", "user, assistant"},
        {R"({"input": [{"type": "web_search_call"}]})", "input[0].type", "not supported"},
        {R"({"input": [{"type": "reasoning", "content": "x"}, {"role": "user", "content": "hi"}]})",
         "input[0].content", "reasoning_text parts"},
        {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "u"}]}]})",
         "input[0].content[0]", "only text parts"},
        {R"({"input": [{"type": "function_call", "name": "a", "arguments": "{}"}]})", "input[0].call_id", "string"},
        {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "input[0].output", "string"},
        {R"({"input": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]})", "input[1].role",
         "only come first"},
        {R"({"input": "x", "max_output_tokens": -1})", "max_output_tokens", "max_output_tokens"},
        {R"({"input": "x", "temperature": "hot"})", "temperature", "temperature"},
        {R"({"input": "x", "include": ["message.output_text.logprobs", "usage.magic"]})", "include[1]",
         "'usage.magic' is not supported"},
        {R"({"input": "x", "include": "message.output_text.logprobs"})", "include", "array of strings"},
        {R"({"input": "x", "include": [1]})", "include[0]", "must be a string"},
        {R"({"input": "x", "top_logprobs": 21})", "top_logprobs", "from 0 to 20"},
        {R"({"input": "x", "top_logprobs": 1.5})", "top_logprobs", "from 0 to 20"},
        {R"({"input": "x", "truncation": "sometimes"})", "truncation", "'auto' or 'disabled'"},
        {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type", "only function tools"},
        {R"({"input": "x", "tools": [{"type": "function", "name": "a b"}]})", "tools[0].name", "tools[0].name"},
        {R"({"input": "x", "tools": [{"type": "function", "name": "a", "parameters": {"not": {}}}]})",
         "tools[0].parameters", "'not' is not supported"},
        {R"({"input": "x", "tools": [{"type": "function", "name": "a"}], "tool_choice": {"type": "mcp"}})",
         "tool_choice", "tool_choice"},
        {R"({"input": "x", "tool_choice": "auto"})", "tool_choice", "needs 'tools'"},
        {R"({"input": "x", "text": {"format": {"type": "json_schema", "name": "a", "schema": {"not": {}}}}})",
         "text.format", "text.format.schema"},
        {R"({"input": "x", "text": {"format": {"type": "xml"}}})", "text.format", "text.format"},
        {R"({"input": "x", "previous_response_id": 1})", "previous_response_id", "string"},
        {R"({"input": "x", "store": "yes"})", "store", "boolean"},
        {R"({"input": "x", "conversation": "c"})", "conversation", "no conversation objects"},
        {R"({"input": "x", "background": true})", "background", "not supported"},
        {R"({"input": )" + std::string(100000, '[') + std::string(100000, ']') + "}", "", "nests deeper"},
        {"[1]", "", "JSON object"},
        {"{", "", "not valid JSON"}};
    for (const Case &c : cases) {
        const auto [param, message] = refusal_of(c.body);
        EXPECT_EQ(param, c.param) << c.body << ": " << message;
        EXPECT_NE(message.find(c.says), std::string::npos) << c.body << ": " << message;
        EXPECT_EQ(message.find("messages"), std::string::npos) << message; // the chat request's names stay hidden
        EXPECT_EQ(message.find("max_tokens"), std::string::npos) << message;
    }
}

// A completion of `text` in tokens of two bytes each (a UTF-8 character may be split, as byte pieces split them),
// with log-probabilities: token ids index the pieces that `spell` spells.
std::vector<std::string> &pieces() {
    static std::vector<std::string> p;
    return p;
}
TokenSpelling spell(int32_t id) { return {pieces()[size_t(id)], "piece " + std::to_string(id)}; }
// GET /v1/responses/{id}/input_items: the request's input as Responses' items, with ids, paged as OpenAI pages them.
TEST(ResponsesApi, ListsAStoredResponsesInputItems) {
    const ResponsesRequest q = parse_responses_request(R"({"instructions": "Be brief.", "input": [
        {"role": "user", "content": "Weather?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "One moment."}]},
        {"type": "function_call", "call_id": "c1", "name": "now", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "noon"}]}],
        "tools": [{"type": "function", "name": "now"}]})",
                                                       4096);
    const json listed = listed_input_items(q, "resp_8");
    const json page = input_items_page(listed, "resp_8", "", "", "");
    EXPECT_EQ(page["object"], "list");
    EXPECT_EQ(page["has_more"], false);
    ASSERT_EQ(page["data"].size(), 4u); // newest first
    EXPECT_EQ(page["data"][0], json::parse(R"({"id": "fco_8_in3", "type": "function_call_output", "call_id": "c1",
        "output": "noon", "status": "completed"})"));
    EXPECT_EQ(page["data"][1]["id"], "fc_8_in2");
    EXPECT_EQ(page["data"][2], json::parse(R"({"id": "msg_8_in1", "type": "message", "role": "assistant",
        "content": [{"type": "output_text", "text": "One moment."}], "status": "completed"})"));
    EXPECT_EQ(page["data"][3]["content"][0], json::parse(R"({"type": "input_text", "text": "Weather?"})"));
    EXPECT_EQ(page["first_id"], "fco_8_in3");
    EXPECT_EQ(page["last_id"], "msg_8_in0");
    // Pages: limit, order, after.
    json asc = input_items_page(listed, "resp_8", "2", "asc", "");
    ASSERT_EQ(asc["data"].size(), 2u);
    EXPECT_EQ(asc["data"][0]["id"], "msg_8_in0");
    EXPECT_EQ(asc["has_more"], true);
    asc = input_items_page(listed, "resp_8", "2", "asc", asc["last_id"]);
    EXPECT_EQ(asc["first_id"], "fc_8_in2");
    EXPECT_EQ(asc["last_id"], "fco_8_in3");
    EXPECT_EQ(asc["has_more"], false);
    EXPECT_TRUE(input_items_page(listed, "resp_8", "", "asc", "fco_8_in3")["data"].empty());
    EXPECT_EQ(parse_responses_request(R"({"input": "Hi"})", 4096).input_items,
              json::parse(R"([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi"}],
                  "status": "completed"}])"));
    for (const auto &[limit, order, after, param] : std::vector<std::array<std::string, 4>>{
             {"0", "", "", "limit"}, {"101", "", "", "limit"}, {"2x", "", "", "limit"}, {"", "up", "", "order"},
             {"", "", "msg_9_in0", "after"}}) {
        try {
            input_items_page(listed, "resp_8", limit, order, after);
            ADD_FAILURE() << param << " taken";
        } catch (const ApiError &e) {
            EXPECT_EQ(e.status, 400);
            EXPECT_EQ(e.param, param);
        }
    }
}

// truncation "auto" drops the oldest turns after the system turn, never the last one; "disabled" is the default.
TEST(ResponsesApi, TruncationDropsTheOldestTurns) {
    ResponsesRequest q = parse_responses_request(R"({"instructions": "Be brief.", "truncation": "auto", "input": [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]})",
                                                 4096);
    EXPECT_TRUE(q.truncate);
    EXPECT_EQ(q.echoed["truncation"], "auto");
    ApiRequest &r = q.api;
    ASSERT_EQ(r.messages.size(), 4u);
    ApiRequest one = r;
    drop_turns_to_fit(one, [](const ApiRequest &fewer) { return fewer.messages.size() <= 3; });
    ASSERT_EQ(one.messages.size(), 3u); // the fewest dropped
    EXPECT_EQ(one.messages[0].content, "Be brief.");
    EXPECT_EQ(one.messages[1].content, "b");
    drop_turns_to_fit(r, [](const ApiRequest &) { return false; }); // none fits: all that may be; the last stays
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].content, "Be brief.");
    EXPECT_EQ(r.messages[1].content, "c");
    ApiRequest no_system = parse_responses_request(R"({"input": [{"role": "user", "content": "a"},
        {"role": "user", "content": "c"}]})", 4096).api;
    drop_turns_to_fit(no_system, [](const ApiRequest &) { return false; });
    ASSERT_EQ(no_system.messages.size(), 1u);
    EXPECT_EQ(no_system.messages[0].content, "c");
    // A long conversation: bisection, a few renders, not one per turn.
    nlohmann::ordered_json turns = nlohmann::ordered_json::array();
    for (int k = 0; k < 41; ++k)
        turns.push_back({{"role", k % 2 ? "assistant" : "user"}, {"content", std::to_string(k)}});
    ApiRequest long_one = parse_responses_request(nlohmann::ordered_json{{"input", turns}}.dump(), 4096).api;
    int renders = 0;
    drop_turns_to_fit(long_one, [&](const ApiRequest &fewer) { return ++renders, fewer.messages.size() <= 10; });
    ASSERT_EQ(long_one.messages.size(), 10u);
    EXPECT_EQ(long_one.messages[0].content, "31");
    EXPECT_LE(renders, 7);
    json echoed;
    parsed(R"({"input": "x"})", &echoed);
    EXPECT_EQ(echoed["truncation"], "disabled");
    EXPECT_TRUE(echoed["top_logprobs"].is_null());
}

Completion completion(const std::string &text, const std::string &finish) {
    Completion c;
    c.text = text;
    c.finish_reason = finish;
    for (size_t at = 0; at < text.size(); at += 2) {
        const auto id = int32_t(pieces().size());
        pieces().push_back(text.substr(at, 2));
        c.tokens.push_back(id);
        c.logprobs.push_back({id, -0.25f * float(at % 7), {{id, -0.25f * float(at % 7)}, {0, -3.5f}}});
    }
    c.prompt_tokens = 10;
    c.cached_tokens = 4;
    return c;
}

TEST(ResponsesApi, AnswersAsAResponseObject) {
    json echoed;
    const ApiRequest plain = parsed(R"({"input": "x", "max_output_tokens": 3})", &echoed);
    json out = responses_response(plain, echoed, "resp_7", 100, "zaya", completion("Hello.", "stop"), spell);
    EXPECT_EQ(out["id"], "resp_7");
    EXPECT_EQ(out["object"], "response");
    EXPECT_EQ(out["created_at"], 100);
    EXPECT_EQ(out["status"], "completed");
    EXPECT_TRUE(out["incomplete_details"].is_null());
    EXPECT_EQ(out["max_output_tokens"], 3);
    ASSERT_EQ(out["output"].size(), 1u);
    EXPECT_EQ(out["output"][0]["type"], "message");
    EXPECT_EQ(out["output"][0]["id"], "msg_7");
    EXPECT_EQ(out["output"][0]["role"], "assistant");
    EXPECT_EQ(out["output"][0]["content"][0]["type"], "output_text");
    EXPECT_EQ(out["output"][0]["content"][0]["text"], "Hello.");
    EXPECT_EQ(out["usage"], json::parse(R"({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 3, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 13})"));
    out = responses_response(plain, echoed, "resp_7", 100, "zaya", completion("Hel", "length"), spell);
    EXPECT_EQ(out["status"], "incomplete");
    EXPECT_EQ(out["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(out["output"][0]["status"], "incomplete");

    // Calls: one function_call item each, ids as the chat endpoint's; with tools, words are a message.
    const ApiRequest tools = parsed(R"({"input": "x", "tools": )" + std::string(kResponsesTools) + "}", &echoed);
    out = responses_response(tools, echoed, "resp_7", 100, "zaya",
                             completion(R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}},)"
                                        R"({"name":"now","arguments":{}}]})",
                                        "stop"),
                             spell);
    EXPECT_EQ(out["status"], "completed");
    ASSERT_EQ(out["output"].size(), 2u);
    EXPECT_EQ(out["output"][0], json::parse(R"({"type": "function_call", "id": "fc_7_0", "call_id": "call_7_0_0",
        "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}", "status": "completed"})"));
    EXPECT_EQ(out["output"][1]["call_id"], "call_7_0_1");
    EXPECT_EQ(out["output"][1]["arguments"], "{}");
    out = responses_response(tools, echoed, "resp_7", 100, "zaya", completion("  Sunny, I think.", "stop"), spell);
    EXPECT_EQ(out["output"][0]["content"][0]["text"], "  Sunny, I think.");
    // include "message.output_text.logprobs": the words' tokens, as the chat endpoint's entries (top_logprobs
    // alternatives each); of an answer with calls, only the tokens that begin within its words. Without it, none.
    EXPECT_FALSE(out["output"][0]["content"][0].contains("logprobs"));
    const ApiRequest lp = parsed(R"({"input": "x", "include": ["reasoning.encrypted_content",
        "message.output_text.logprobs"], "top_logprobs": 1, "tools": )" + std::string(kResponsesTools) + "}", &echoed);
    EXPECT_EQ(lp.sample.logprobs, 1);
    EXPECT_EQ(echoed["top_logprobs"], 1);
    const Completion sunny = completion("Sunny.", "stop");
    out = responses_response(lp, echoed, "resp_7", 100, "zaya", sunny, spell);
    EXPECT_EQ(out["output"][0]["content"][0]["logprobs"],
              api_logprobs(true, sunny.logprobs, spell, nullptr)["content"]);
    EXPECT_EQ(out["output"][0]["content"][0]["logprobs"].size(), 3u);
    const Completion then_calls = completion(R"(Hm, ok {"tool_calls":[{"name":"now","arguments":{}}]})", "stop");
    out = responses_response(lp, echoed, "resp_7", 100, "zaya", then_calls, spell);
    ASSERT_EQ(out["output"].size(), 2u);
    EXPECT_EQ(out["output"][0]["content"][0]["logprobs"], // "Hm", ", ", "ok": not " {", which begins past them
              api_logprobs(true, std::span(then_calls.logprobs).first(3), spell, nullptr)["content"]);
    EXPECT_FALSE(out["output"][1].contains("logprobs"));

    // Words, then calls: a message item, then the function_call items (cut: the last call incomplete).
    out = responses_response(tools, echoed, "resp_7", 100, "zaya",
                             completion("One moment.\n{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}},"
                                        "{\"name\":\"now\",\"arguments\":{",
                                        "length"),
                             spell);
    EXPECT_EQ(out["status"], "incomplete");
    ASSERT_EQ(out["output"].size(), 3u);
    EXPECT_EQ(out["output"][0]["type"], "message");
    EXPECT_EQ(out["output"][0]["content"][0]["text"], "One moment.");
    EXPECT_EQ(out["output"][0]["status"], "completed");
    EXPECT_EQ(out["output"][1]["id"], "fc_7_0");
    EXPECT_EQ(out["output"][1]["status"], "completed");
    EXPECT_EQ(out["output"][2]["call_id"], "call_7_0_1");
    EXPECT_EQ(out["output"][2]["arguments"], "{");
    EXPECT_EQ(out["output"][2]["status"], "incomplete");
}

// An earlier answer's reasoning item goes to the next assistant turn as its reasoning_content (which a model's own
// template may write), and an answer's reasoning item to the stored conversation.
TEST(ResponsesApi, ReasoningItemsGoWithTheirTurn) {
    const ApiRequest r = parsed(R"({"input": [{"role": "user", "content": "2+2?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Sum."}]},
        {"role": "assistant", "content": "4"},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Stray."}]},
        {"role": "user", "content": "And 3+3?"}, {"role": "assistant", "content": "6"},
        {"role": "user", "content": "And 4+4?"}]})");
    ASSERT_EQ(r.messages.size(), 5u);
    EXPECT_EQ(r.messages[1].fields["reasoning_content"], "Sum.");
    EXPECT_TRUE(r.messages[0].fields.is_null());
    EXPECT_TRUE(r.messages[3].fields.is_null()); // (a reasoning item goes with the answer right after it only)
    ResponsesRequest q = parse_responses_request(R"({"input": "2+2?"})", 4096);
    q.api.reasoning = ReasoningTags{};
    const json out =
        responses_response(q.api, q.echoed, "resp_8", 1, "zaya", completion("<think>\nSum.\n</think>\n\n4", "stop"),
                           spell);
    ASSERT_EQ(out["output"].size(), 2u);
    EXPECT_EQ(out["output"][0]["type"], "reasoning");
    EXPECT_EQ(out["output"][0]["content"][0]["text"], "Sum.");
    EXPECT_EQ(out["output"][1]["content"][0]["text"], "4");
    const nlohmann::ordered_json conversation = answered_conversation(q, out);
    EXPECT_EQ(conversation.back()["reasoning_content"], "Sum.");
    EXPECT_EQ(conversation.back()["content"], "4");
}

// previous_response_id: the stored conversation (not its instructions), then the new input; the answer's turn as
// the model wrote it, calls included, so a call's output names its tool.
TEST(ResponsesApi, ContinuesAStoredConversation) {
    ResponseStore store(1 << 20);
    const PreviousResponse previous = [&](const std::string &id) -> std::optional<EarlierResponse> {
        const auto e = store.get(id);
        if (!e) return std::nullopt;
        return earlier_response(e->conversation, e->input_items, e->response);
    };
    const std::string tools = std::string(R"("tools": )") + kResponsesTools;
    ResponsesRequest q = parse_responses_request(
        R"({"instructions": "Be brief.", "input": "Weather in Oslo?", )" + tools + "}", 4096, previous);
    EXPECT_TRUE(q.store);
    EXPECT_EQ(q.echoed["store"], true);
    EXPECT_TRUE(q.echoed["previous_response_id"].is_null());
    ASSERT_EQ(q.conversation.size(), 1u); // (the instructions are not part of it)
    const json first = responses_response(
        q.api, q.echoed, "resp_3", 1, "zaya",
        completion(R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Oslo"}}]})", "stop"),
        spell);
    store.put("resp_3", {first, answered_conversation(q, first), listed_input_items(q, "resp_3")});

    q = parse_responses_request(R"({"previous_response_id": "resp_3", "instructions": "Be kind.", )" + tools +
                                    R"(, "input": [{"type": "function_call_output", "call_id": "call_3_0_0",
                                    "output": "3 C"}], "store": false})",
                                4096, previous);
    EXPECT_FALSE(q.store);
    EXPECT_EQ(q.echoed["previous_response_id"], "resp_3");
    const ApiRequest chat = parse_api_request(R"({"tools": [
        {"type": "function", "function": {"name": "get_weather", "description": "The weather", "parameters": {
         "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
         "additionalProperties": false}, "strict": true}}, {"type": "function", "function": {"name": "now"}}],
        "messages": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "tool_calls": [{"id": "call_3_0_0", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "call_3_0_0", "content": "3 C"}]})",
                                              true, 4096);
    ASSERT_EQ(q.api.messages.size(), chat.messages.size());
    for (size_t i = 0; i < chat.messages.size(); ++i) {
        EXPECT_EQ(q.api.messages[i].role, chat.messages[i].role) << i;
        EXPECT_EQ(q.api.messages[i].content, chat.messages[i].content) << i;
    }
    EXPECT_NE(q.api.messages[3].content.find("The call call_3_0_0 of get_weather returned:\n3 C"), std::string::npos);
    EXPECT_EQ(q.api.messages[0].content.find("Be brief."), std::string::npos); // instructions are not carried over
    // A words answer continues too; an unknown id is a 404 naming it.
    const json second = responses_response(q.api, q.echoed, "resp_4", 1, "zaya", completion("Cold.", "stop"), spell);
    store.put("resp_4", {second, answered_conversation(q, second), listed_input_items(q, "resp_4")});
    // resp_4 lists the chain's items, oldest first: resp_3's input, resp_3's call (its output item), its own input.
    const json chain = input_items_page(store.get("resp_4")->input_items, "resp_4", "", "asc", "")["data"];
    ASSERT_EQ(chain.size(), 3u);
    EXPECT_EQ(chain[0]["id"], "msg_3_in0");
    EXPECT_EQ(chain[0]["content"][0]["text"], "Weather in Oslo?");
    EXPECT_EQ(chain[1], first["output"][0]);
    EXPECT_EQ(chain[1]["type"], "function_call");
    EXPECT_EQ(chain[2]["id"], "fco_4_in0");
    EXPECT_EQ(chain[2]["call_id"], "call_3_0_0");
    q = parse_responses_request(R"({"previous_response_id": "resp_4", "input": "Thanks"})", 4096, previous);
    // and a third lists those, resp_4's answer, then its own.
    const json third = listed_input_items(q, "resp_5");
    ASSERT_EQ(third.size(), 5u);
    EXPECT_EQ(third[3], second["output"][0]);
    EXPECT_EQ(third[4]["id"], "msg_5_in0");
    ASSERT_EQ(q.api.messages.size(), 5u);
    EXPECT_EQ(q.api.messages[3].role, "assistant");
    EXPECT_EQ(q.api.messages[3].content, "Cold.");
    EXPECT_EQ(q.api.messages[4].content, "Thanks");
    // Words and calls in one answer are one assistant turn, stored and sent back as items (its message, then its
    // function_call) alike: the words, a line, the calls, as the chat endpoint writes them.
    q = parse_responses_request(R"({"input": "Time?", )" + tools + "}", 4096, previous);
    const json both = responses_response(
        q.api, q.echoed, "resp_6", 1, "zaya",
        completion(R"(One moment. {"tool_calls":[{"name":"now","arguments":{}}]})", "stop"),
        spell);
    ASSERT_EQ(both["output"].size(), 2u);
    store.put("resp_6", {both, answered_conversation(q, both), listed_input_items(q, "resp_6")});
    const std::string output = R"({"type": "function_call_output", "call_id": "call_6_0_0", "output": "noon"})";
    const ResponsesRequest stored = parse_responses_request(
        R"({"previous_response_id": "resp_6", "input": [)" + output + "], " + tools + "}", 4096, previous);
    const ResponsesRequest sent = parse_responses_request(
        R"({"input": [{"role": "user", "content": "Time?"}, {"type": "message", "role": "assistant", "content":
        [{"type": "output_text", "text": "One moment."}]}, {"type": "function_call", "call_id": "call_6_0_0",
        "name": "now", "arguments": "{}"}, )" + output + "], " + tools + "}",
        4096, previous);
    ASSERT_EQ(stored.api.messages.size(), 4u);
    ASSERT_EQ(sent.api.messages.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(stored.api.messages[i].content, sent.api.messages[i].content) << i;
    EXPECT_EQ(sent.api.messages[2].content, R"(One moment.
{"tool_calls":[{"name":"now","arguments":{}}]})");
    EXPECT_NE(sent.api.messages[3].content.find("The call call_6_0_0 of now returned:\nnoon"), std::string::npos);
    try {
        parse_responses_request(R"({"previous_response_id": "resp_9", "input": "x"})", 4096, previous);
        ADD_FAILURE() << "an unknown previous_response_id was taken";
    } catch (const ApiError &e) {
        EXPECT_EQ(e.status, 404);
        EXPECT_EQ(e.param, "previous_response_id");
        EXPECT_EQ(e.code, "previous_response_not_found");
        EXPECT_NE(e.message.find("resp_9"), std::string::npos);
    }
}

// The store keeps what fits its budget, the oldest dropped first; an id put again is the newest, not dropped for
// its first place.
TEST(ResponseStore, KeepsTheNewestWithinItsBudget) {
    auto entry = [](size_t bytes) {
        return ResponseStore::Entry{json{{"pad", std::string(bytes, 'x')}}, nlohmann::ordered_json::array(),
                                    json::array()};
    };
    const size_t one = entry(1000).response.dump().size() + 4; // ("[]" twice)
    ResponseStore store(3 * one);
    store.put("a", entry(1000));
    store.put("b", entry(1000));
    store.put("c", entry(1000));
    EXPECT_EQ(store.bytes(), 3 * one);
    store.put("a", entry(1000)); // a again: now the newest
    store.put("d", entry(1000)); // drops b, the oldest
    EXPECT_TRUE(store.get("a"));
    EXPECT_FALSE(store.get("b"));
    EXPECT_TRUE(store.get("c") && store.get("d"));
    EXPECT_TRUE(store.erase("c"));
    EXPECT_FALSE(store.erase("c"));
    EXPECT_EQ(store.bytes(), 2 * one);
    store.put("huge", entry(4000)); // larger than the budget: not kept, nothing dropped
    EXPECT_FALSE(store.get("huge"));
    EXPECT_TRUE(store.get("a") && store.get("d"));
    for (int i = 0; i < 1000; ++i) store.put("e", entry(10)); // the same id again and again: one entry
    EXPECT_TRUE(store.get("a") && store.get("d") && store.get("e"));
    EXPECT_FALSE(ResponseStore(0).enabled());
}

// A stream gathered as OpenAI's client gathers it (openai/lib/streaming/responses): items added, parts added, text
// and argument deltas appended; the final event's Response.
struct Gathered {
    json output = json::array();
    json final_response;
    std::vector<std::string> types;
};
void gather(const json &e, Gathered &g, int64_t &sequence) {
    const std::string type = e["type"];
    g.types.push_back(type);
    EXPECT_EQ(e["sequence_number"], sequence++) << type;
    if (type == "response.output_item.added") {
        EXPECT_EQ(e["output_index"], g.output.size());
        g.output.push_back(e["item"]);
    } else if (type == "response.content_part.added") {
        g.output[e["output_index"].get<size_t>()]["content"].push_back(e["part"]);
    } else if (type == "response.output_text.delta") {
        json &part = g.output[e["output_index"].get<size_t>()]["content"][e["content_index"].get<size_t>()];
        part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
        EXPECT_TRUE(part.contains("logprobs") || e["logprobs"].empty());
        for (const json &l : e["logprobs"]) part["logprobs"].push_back(l);
        EXPECT_EQ(e["item_id"], g.output[e["output_index"].get<size_t>()]["id"]);
    } else if (type == "response.reasoning_text.delta") {
        json &part = g.output[e["output_index"].get<size_t>()]["content"][e["content_index"].get<size_t>()];
        part["text"] = part["text"].get<std::string>() + e["delta"].get<std::string>();
        EXPECT_EQ(e["item_id"], g.output[e["output_index"].get<size_t>()]["id"]);
    } else if (type == "response.reasoning_text.done") {
        EXPECT_EQ(e["text"], g.output[e["output_index"].get<size_t>()]["content"][0]["text"]);
    } else if (type == "response.function_call_arguments.delta") {
        json &item = g.output[e["output_index"].get<size_t>()];
        item["arguments"] = item["arguments"].get<std::string>() + e["delta"].get<std::string>();
        EXPECT_EQ(e["item_id"], item["id"]);
    } else if (type == "response.output_text.done") {
        const json &part = g.output[e["output_index"].get<size_t>()]["content"][0];
        EXPECT_EQ(e["text"], part["text"]);
        EXPECT_EQ(e["logprobs"], part.contains("logprobs") ? part["logprobs"] : json::array());
    } else if (type == "response.function_call_arguments.done") {
        EXPECT_EQ(e["arguments"], g.output[e["output_index"].get<size_t>()]["arguments"]);
    } else if (type == "response.output_item.done") {
        g.output[e["output_index"].get<size_t>()]["status"] = e["item"]["status"];
        EXPECT_EQ(e["item"], g.output[e["output_index"].get<size_t>()]);
    } else if (type == "response.completed" || type == "response.incomplete") {
        g.final_response = e["response"];
    }
}

TEST(ResponsesApi, StreamsEventsThatAddUpToTheResponse) {
    struct Case {
        std::string body, text, finish;
        bool reasoning = false, starts_in_reasoning = false; // the model's <think> split off
        ToolFormat format = ToolFormat::Json;                // how the model writes calls
    };
    const std::string tools = R"({"input": "x", "tools": )" + std::string(kResponsesTools) + "}";
    const std::string logprobs = R"({"input": "x", "include": ["message.output_text.logprobs"], "top_logprobs": 1)";
    const std::vector<Case> cases = {
        {R"({"input": "x"})", "Caf\xc3\xa9 \xf0\x9f\x98\x80 ok", "stop"},
        {logprobs + "}", "cut sh", "length"},
        {R"({"input": "x"})", "cut sh", "length"},
        {R"({"input": "x"})", "", "stop"},
        {tools,
         R"({"tool_calls":[{"name":"get_weather","arguments":{"city":"Z\u00fcrich \"Z\""}},)"
         R"({"name":"now","arguments":{}}]})",
         "stop"},
        {tools, R"({"tool_calls":[{"name":"get_weather","arguments":{"ci)", "length"},
        {tools, "\n Words, not calls {\"tool_calls\":", "stop"},
        {tools, " {\"tool_c", "length"}, // undecided when cut: the text, sent at the end
        {tools, "Caf\xc3\xa9 first.\n\n{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}}]}", "stop"}, // words, calls
        {tools, "So {\"tool_c{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{\"x", "length"},
        {tools, "So {\"tool_calls\":[{\"na", "length"}, // no call begun: the text
        {logprobs + "}", "Caf\xc3\xa9 \xf0\x9f\x98\x80 ok", "stop"},
        {logprobs + R"(, "tools": )" + kResponsesTools + "}",
         "Caf\xc3\xa9 first.\n\n{\"tool_calls\":[{\"name\":\"now\",\"arguments\":{}}]}", "stop"},
        {logprobs + R"(, "tools": )" + kResponsesTools + "}", "Hi {\"tool_c", "length"},
        // reasoning split off: an item before the words (or calls), its tokens' log-probabilities not the words'
        {R"({"input": "x"})", "Let me see.\n</think>\n\nIt is 4.", "stop", true, true},
        {logprobs + "}", "<think>\nHm, caf\xc3\xa9.\n</think>\n\nCaf\xc3\xa9 \xf0\x9f\x98\x80 ok", "stop", true},
        {R"({"input": "x"})", "Still thinking ab", "length", true, true},
        {R"({"input": "x"})", "No block here.", "stop", true},
        // a model's own call format, after its reasoning
        {tools,
         "Need the weather.</think>\n<zyphra_tool_call>\n<function=get_weather>\n<parameter=city>\nZ\xc3\xbcrich"
         "\n</parameter>\n</function>\n</zyphra_tool_call>",
         "stop", true, true, ToolFormat::ZayaXml},
        {tools, "Let me look.\n<zyphra_tool_call>\n<function=now>\n</function>\n</zyphra_tool_call>", "stop", false,
         false, ToolFormat::ZayaXml},
        {tools, "Let me look.\n<zyphra_tool_call>\n<function=get_weather>\n<parameter=city>\nOs", "length", false,
         false, ToolFormat::ZayaXml}};
    std::mt19937 rng(9);
    for (const Case &c : cases) {
        json echoed;
        ResponsesRequest q = parse_responses_request(c.body, 4096, {}, c.format);
        echoed = q.echoed;
        ApiRequest r = q.api;
        if (c.reasoning) r.reasoning = ReasoningTags{};
        r.starts_in_reasoning = c.starts_in_reasoning;
        const Completion done = completion(c.text, c.finish);
        const json want = responses_response(r, echoed, "resp_5", 9, "zaya", done, spell);
        for (int trial = 0; trial < 50; ++trial) {
            ResponsesStream s(r, echoed, "resp_5", 9, "zaya", spell);
            Gathered g;
            int64_t sequence = 0;
            for (const json &e : s.open()) gather(e, g, sequence);
            size_t fed = 0; // tokens whose log-probabilities were fed: they come with their text, or before it
            for (size_t at = 0; at < c.text.size();) {
                const size_t n = trial == 0 ? 1 : 1 + rng() % 5;
                const size_t upto = std::min(done.logprobs.size(), (at + n + rng() % 4) / 2 + 1);
                const std::span<const TokenLogprobs> lps =
                    r.sample.logprobs >= 0 && upto > fed ? std::span(done.logprobs).subspan(fed, upto - fed)
                                                         : std::span<const TokenLogprobs>();
                fed += lps.size();
                for (const json &e : s.feed(c.text.substr(at, n), lps)) gather(e, g, sequence);
                at += n;
            }
            for (const json &e : s.finish(done)) gather(e, g, sequence);
            ASSERT_GE(g.types.size(), 3u);
            EXPECT_EQ(g.types[0], "response.created");
            EXPECT_EQ(g.types[1], "response.in_progress");
            EXPECT_EQ(g.types.back(), c.finish == "length" ? "response.incomplete" : "response.completed");
            EXPECT_EQ(g.final_response, want) << c.text;
            EXPECT_EQ(g.output, want["output"]) << c.text; // the streamed items are the Response's
        }
    }
}

} // namespace
} // namespace zaya
