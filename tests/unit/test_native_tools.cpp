// Tools in a model's own format (infer/tool_calls.h with a ToolFormat of infer/tool_formats.h): a chat request's
// tools, earlier calls and tool results go to the model's chat template as transformers' apply_chat_template gives
// them (checked against the texts it rendered for tests/golden/chat_templates), nothing is described or held in
// zaya's own JSON form under "auto", and answers are read back in the model's format, whole and streamed; the
// server's chat answers with reasoning split off (infer/chat_answer.h).
#include "core/atomic_file.h"
#include "data/chat_template.h"
#include "data/hf_chat_template.h"
#include "infer/answer_formats.h"
#include "infer/chat_answer.h"
#include "infer/openai_api.h"
#include "infer/tool_calls.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

namespace zaya {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using zaya::test::TempDir;

const ordered_json &nt_goldens() {
    static const ordered_json j = [] {
        std::ifstream in(zaya::test::golden_dir("chat_templates") + "/cases.json");
        return ordered_json::parse(in);
    }();
    return j;
}

std::string nt_template_file(const std::string &name) {
    return zaya::test::golden_dir("chat_templates") + "/templates/" + name + ".jinja";
}

// A golden chat's messages as a client sends them to the server: calls' arguments as JSON texts, an assistant
// turn of calls alone with content null.
ordered_json nt_client_messages(const ordered_json &messages) {
    ordered_json out = ordered_json::array();
    for (ordered_json m : messages) {
        if (m.contains("tool_calls") && m["tool_calls"].is_array()) {
            for (ordered_json &c : m["tool_calls"])
                if (!c["function"]["arguments"].is_string())
                    c["function"]["arguments"] = c["function"]["arguments"].dump();
            if (!m.contains("content")) m["content"] = nullptr;
        }
        out.push_back(std::move(m));
    }
    return out;
}

// Every golden chat with tools, calls or results, sent as a request and rendered as the server renders it, is the
// text transformers' apply_chat_template wrote.
TEST(NativeTools, RequestsRenderAsApplyChatTemplate) {
    size_t checked = 0, with_tools = 0, with_calls = 0;
    for (const ordered_json &c : nt_goldens()["cases"]) {
        const ordered_json &ctx = c["context"];
        bool tool_messages = false, openai = true;
        for (const ordered_json &m : ctx["messages"]) {
            tool_messages = tool_messages || m.contains("tool_calls") || m["role"] == "tool";
            // Requests have OpenAI's roles (not Llama 3.1's "ipython"), and the server gives a template each call's
            // arguments as an object, as vLLM does (a golden chat that gave transformers a JSON text is not one).
            openai = openai && m["role"] != "ipython";
            if (m.contains("tool_calls") && m["tool_calls"].is_array())
                for (const ordered_json &call : m["tool_calls"])
                    openai = openai && !call["function"]["arguments"].is_string();
        }
        if (c.contains("error") || (ctx["tools"].is_null() && !tool_messages) || !openai) continue;
        SCOPED_TRACE(c["name"].get<std::string>());
        ordered_json body = {{"messages", nt_client_messages(ctx["messages"])}};
        if (!ctx["tools"].is_null()) body["tools"] = ctx["tools"];
        ordered_json special = ordered_json::object(), variables = ordered_json::object();
        for (const auto &[k, v] : ctx.items()) {
            if (k == "bos_token" || k == "eos_token") special[k] = v;
            else if (k != "messages" && k != "tools" && k != "documents" && k != "add_generation_prompt")
                variables[k] = v;
        }
        if (!variables.empty()) body["chat_template_kwargs"] = variables;
        ApiRequest r;
        try {
            r = parse_api_request(body.dump(), /*chat=*/true, 4096, ToolFormat::Hermes);
        } catch (const ApiError &e) {
            ADD_FAILURE() << e.param << ": " << e.message;
            continue;
        }
        EXPECT_EQ(r.tools.format, ToolFormat::Hermes);
        TempDir dir;
        std::filesystem::copy_file(nt_template_file(c["template"].get<std::string>()),
                                   dir.str("chat_template.jinja"));
        write_file_atomic(dir.str("tokenizer_config.json"), special.dump());
        const std::optional<HfChatTemplate> t = HfChatTemplate::find_in(dir.str());
        ASSERT_TRUE(t.has_value());
        EXPECT_EQ(t->render(r.messages, ctx["add_generation_prompt"].get<bool>(), nullptr, r.chat_template_kwargs),
                  c["expected"].get<std::string>());
        ++checked;
        with_tools += !ctx["tools"].is_null();
        with_calls += tool_messages;
    }
    EXPECT_GE(checked, 10u); // the golden set is not silently empty
    EXPECT_GE(with_tools, 8u);
    EXPECT_GE(with_calls, 6u);
}

const char *kNtTools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}])";

// In a model's own format the messages keep their roles and fields, the tools are the template's and nothing is
// written in zaya's own form; in zaya's, calls and results are written into the text as before.
TEST(NativeTools, MessagesAndToolsGoToTheTemplate) {
    const std::string messages = R"([{"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": null, "reasoning_content": "Look it up.",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"}])";
    const std::string body = std::string(R"({"messages": )") + messages + R"(, "tools": )" + kNtTools + "}";
    const ApiRequest r = parse_api_request(body, true, 4096, ToolFormat::ZayaXml);
    ASSERT_EQ(r.messages.size(), 4u);
    EXPECT_EQ(r.messages[0].role, "system");
    EXPECT_EQ(r.messages[0].content, "Be brief."); // no tool instructions of zaya's
    EXPECT_EQ(r.messages[2].role, "assistant");
    EXPECT_EQ(r.messages[2].content, "");
    EXPECT_EQ(r.messages[2].fields.dump(),
              R"({"tool_calls":[{"id":"c1","type":"function","function":{"name":"get_weather",)"
              R"("arguments":{"city":"Paris","days":2}}}],"reasoning_content":"Look it up."})");
    EXPECT_EQ(r.messages[3].role, "tool");
    EXPECT_EQ(r.messages[3].fields.dump(), R"({"tool_call_id":"c1","name":"get_weather"})");
    ASSERT_TRUE(r.chat_template_kwargs.contains("tools"));
    EXPECT_EQ(r.chat_template_kwargs["tools"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(r.sample.json_schema, nullptr); // "auto": nothing is held
    EXPECT_TRUE(r.sample.json_trigger.empty());

    // "required" is held to zaya's object from the first token, as vLLM holds it to JSON.
    const std::string required = std::string(R"({"messages": )") + messages + R"(, "tools": )" + kNtTools +
                                 R"(, "tool_choice": "required"})";
    const ApiRequest q = parse_api_request(required, true, 4096, ToolFormat::ZayaXml);
    EXPECT_NE(q.sample.json_schema, nullptr);
    EXPECT_TRUE(q.sample.json_trigger.empty());
    EXPECT_EQ(q.tools.answer_format(), ToolFormat::Json);

    // zaya's own form: the calls and the result are text, the tools described in the system message.
    const ApiRequest j = parse_api_request(body, true, 4096);
    ASSERT_EQ(j.messages.size(), 4u);
    EXPECT_EQ(j.messages[2].fields.dump(), R"({"reasoning_content":"Look it up."})"); // (for a template's use)
    // vLLM's newer name for it, as its answers (and this server's) carry it, goes to the template alike.
    std::string renamed = body;
    renamed.replace(renamed.find("\"reasoning_content\""), 19, "\"reasoning\"");
    const ApiRequest v = parse_api_request(renamed, true, 4096);
    EXPECT_EQ(v.messages[2].fields.dump(), R"({"reasoning_content":"Look it up."})");
    EXPECT_EQ(v.messages[2].content, j.messages[2].content);
    try {
        renamed.replace(renamed.find("\"Look it up.\""), 13, "3");
        parse_api_request(renamed, true, 4096);
        ADD_FAILURE() << "a reasoning that is no string was taken";
    } catch (const ApiError &e) {
        EXPECT_EQ(e.param, "messages[2].reasoning");
    }
    EXPECT_NE(j.messages[2].content.find(R"({"tool_calls":[{"name":"get_weather")"), std::string::npos);
    EXPECT_EQ(j.messages[3].role, "user");
    EXPECT_NE(j.messages[0].content.find("You can call tools"), std::string::npos);
    EXPECT_FALSE(j.chat_template_kwargs.contains("tools"));

    // A result's call not named: refused naming the field, as in zaya's own form.
    const std::string no_id = R"({"messages": [{"role": "tool", "content": "x"}]})";
    try {
        parse_api_request(no_id, true, 4096, ToolFormat::ZayaXml);
        ADD_FAILURE() << "accepted";
    } catch (const ApiError &e) {
        EXPECT_EQ(e.param, "messages[0].tool_call_id");
    }
}

// An "auto" answer in ZAYA1-8B's format, read whole and streamed: reasoning apart, words, then the calls with
// their arguments typed by the tool's schema.
TEST(NativeTools, AnswersAreReadInTheModelsFormat) {
    const std::string body = std::string(R"({"messages": [{"role": "user", "content": "hi"}], "tools": )") + kNtTools +
                             "}";
    ApiRequest r = parse_api_request(body, true, 4096, ToolFormat::ZayaXml);
    r.reasoning = ReasoningTags{};
    r.starts_in_reasoning = true;
    const std::string text = "I should look.\n</think>\n\nLet me check.\n<zyphra_tool_call>\n<function=get_weather>\n"
                             "<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n</function>\n"
                             "</zyphra_tool_call>";
    const ChatAnswer a = read_chat_answer(r, text, "stop", "7_0");
    EXPECT_EQ(a.reasoning, "I should look.");
    EXPECT_EQ(a.answer.content, "Let me check.");
    EXPECT_EQ(a.answer.finish_reason, "tool_calls");
    ASSERT_EQ(a.answer.tool_calls.size(), 1u);
    EXPECT_EQ(a.answer.tool_calls[0]["id"], "call_7_0_0");
    EXPECT_EQ(a.answer.tool_calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(a.answer.tool_calls[0]["function"]["arguments"], R"({"city":"Paris","days":3})");

    // Streamed in pieces of every size, the deltas add up to the same.
    for (size_t step = 1; step <= text.size(); step += 3) {
        ChatAnswerStream s(r);
        std::string reasoning, words, arguments, name;
        auto take = [&](const ChatPiece &p) {
            reasoning += p.reasoning;
            words += p.answer.words;
            for (const AnswerPiece::Call &c : p.answer.calls) {
                name += c.name;
                arguments += c.arguments;
            }
            const json delta = chat_delta(p, "7_0");
            EXPECT_EQ(delta.contains("reasoning_content"), !p.reasoning.empty());
            EXPECT_EQ(delta.contains("reasoning"), !p.reasoning.empty());
            EXPECT_EQ(delta.contains("tool_calls"), !p.answer.calls.empty());
        };
        for (size_t at = 0; at < text.size(); at += step) take(s.feed(std::string_view(text).substr(at, step)));
        EXPECT_EQ(s.finish_reason("stop"), "tool_calls");
        take(s.finish());
        EXPECT_EQ(reasoning, a.reasoning);
        EXPECT_EQ(words, a.answer.content);
        EXPECT_EQ(name, "get_weather");
        EXPECT_EQ(arguments, R"({"city":"Paris","days":3})");
    }

    // Without parallel_tool_calls only the first call is read.
    ApiRequest one = parse_api_request(
        std::string(R"({"messages": [{"role": "user", "content": "hi"}], "parallel_tool_calls": false, "tools": )") +
            kNtTools + "}",
        true, 4096, ToolFormat::Hermes);
    const ToolAnswer two = read_tool_answer(one.tools,
                                            "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"A\"}}"
                                            "\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                            "{\"city\": \"B\"}}\n</tool_call>",
                                            "stop", "1_0");
    ASSERT_EQ(two.tool_calls.size(), 1u);
    EXPECT_EQ(two.tool_calls[0]["function"]["arguments"], R"({"city":"A"})");
}

// A thinking model's request (expect_reasoning): what is split off, and how the answer is held around it.
TEST(NativeTools, ThinkingRequestsHoldTheirAnswersAfterTheReasoning) {
    const std::string messages = R"({"messages": [{"role": "user", "content": "hi"}], )";
    const ReasoningTags tags;
    for (bool starts : {false, true}) {
        // zaya's own call object under "auto": watched for in the content alone, the reasoning free.
        ApiRequest automatic = parse_api_request(messages + R"("tools": )" + kNtTools + "}", true, 4096);
        expect_reasoning(automatic, tags, starts);
        ASSERT_TRUE(automatic.reasoning && automatic.sample.trigger_reasoning);
        EXPECT_EQ(automatic.sample.starts_in_reasoning, starts);
        EXPECT_EQ(automatic.starts_in_reasoning, starts);
        EXPECT_EQ(automatic.sample.json_trigger, kToolCallsTrigger);
        automatic.sample.validate();
        // Held (required calls, JSON mode): after the reasoning, the block the prompt opened or one the answer opens
        // at its start (JsonConstraint's gate), the reasoning split off.
        for (const std::string &held : {R"("tools": )" + std::string(kNtTools) + R"(, "tool_choice": "required"})",
                                        std::string(R"("response_format": {"type": "json_object"}})")}) {
            ApiRequest r = parse_api_request(messages + held, true, 4096);
            expect_reasoning(r, tags, starts);
            EXPECT_TRUE(r.reasoning) << held;
            EXPECT_TRUE(r.sample.json_trigger.empty()) << held;
            ASSERT_TRUE(r.sample.trigger_reasoning) << held;
            EXPECT_EQ(r.sample.trigger_reasoning->close, "</think>");
            EXPECT_EQ(r.sample.starts_in_reasoning, starts);
            r.sample.validate();
        }
        // Free answers (in the model's own format, unconstrained): split, nothing held.
        ApiRequest native = parse_api_request(messages + R"("tools": )" + kNtTools + "}", true, 4096,
                                              ToolFormat::Hermes);
        expect_reasoning(native, tags, starts);
        EXPECT_TRUE(native.reasoning);
        EXPECT_FALSE(native.sample.json_mode());
        EXPECT_FALSE(native.sample.trigger_reasoning);
    }
}

// A chat delta: content left out beside reasoning or calls alone, kept (even empty) otherwise.
TEST(NativeTools, ChatDeltaHasWhatThePieceHas) {
    ChatPiece p;
    EXPECT_EQ(chat_delta(p, "1").dump(), R"({"content":""})");
    p.reasoning = "hm";
    EXPECT_EQ(chat_delta(p, "1").dump(), R"({"reasoning":"hm","reasoning_content":"hm"})");
    p.answer.words = "ok";
    EXPECT_EQ(chat_delta(p, "1").dump(), R"({"content":"ok","reasoning":"hm","reasoning_content":"hm"})");
}

// --tool-call-parser and --reasoning-parser resolved for a model: auto from its template; a tagged format without
// a template of the model's own refused; markers the tokenizer keeps special become text.
TEST(NativeTools, ParsersResolveFromTheChatTemplate) {
    TempDir dir;
    // The golden byte-level tokenizer, with <tool_call> a special token (as Qwen's are): decoding skips it.
    std::ifstream in(zaya::test::golden_dir("tokenizer") + "/qwen2/tokenizer.json");
    ordered_json tj = ordered_json::parse(in);
    const int32_t tag = 703;
    tj["added_tokens"].push_back({{"id", tag}, {"content", "<tool_call>"}, {"single_word", false}, {"lstrip", false},
                                  {"rstrip", false}, {"normalized", false}, {"special", true}});
    write_file_atomic(dir.str("tokenizer.json"), tj.dump());
    Tokenizer plain = Tokenizer::load(dir.str());
    ASSERT_EQ(plain.piece_id("<tool_call>"), tag);
    EXPECT_EQ(plain.decode({tag}), "");
    EXPECT_EQ(resolve_tool_format(&plain, "auto"), ToolFormat::Json);
    EXPECT_EQ(resolve_tool_format(&plain, "json"), ToolFormat::Json);
    EXPECT_NE(zaya::test::error_of([&] { resolve_tool_format(&plain, "hermes"); }).find("no chat template"),
              std::string::npos);
    EXPECT_NE(zaya::test::error_of([&] { resolve_tool_format(&plain, "xml"); }).find("'xml' is not one of"),
              std::string::npos);
    EXPECT_FALSE(resolve_reasoning(&plain, "auto").has_value());
    EXPECT_TRUE(resolve_reasoning(&plain, "deepseek_r1").has_value());
    EXPECT_NE(zaya::test::error_of([&] { resolve_reasoning(&plain, "r1"); }).find("--reasoning-parser"),
              std::string::npos);

    std::filesystem::copy_file(nt_template_file("chatml_tools"), dir.str("chat_template.jinja"));
    Tokenizer tok = Tokenizer::load(dir.str());
    EXPECT_EQ(tok.decode({tag}), "");
    EXPECT_EQ(resolve_tool_format(&tok, "auto"), ToolFormat::Hermes);
    EXPECT_EQ(tok.decode({tag}), "<tool_call>"); // the marker answers are read by is text now
    EXPECT_EQ(tok.token_bytes(tag), "<tool_call>");
    EXPECT_FALSE(tok.is_control(tag));
    EXPECT_TRUE(tok.is_control(tok.piece_id("<|im_end|>"))); // the others stay special
    EXPECT_EQ(resolve_tool_format(&tok, "zaya_xml"), ToolFormat::ZayaXml);
}

} // namespace
} // namespace zaya
