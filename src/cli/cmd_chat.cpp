// zaya chat MODEL [--system TEXT] [--tools FILE] — an interactive conversation in ZAYA1's chat format: each line read
// from stdin is the user's turn, the answer streams to stdout, and the whole conversation is the next turn's prompt.
// The engine's prefix cache (infer/prefix_cache.h) resumes each turn from the last one's cache, so a turn costs its
// new tokens, not the conversation so far. With --tools the conversation is the server's chat with `tools`
// (infer/tool_calls.h): the same prompt, the answer held to the same calls, read back the same way; `/result TEXT`
// gives each call its result, and the model answers once every call has one. A thinking model's reasoning is kept
// apart as the server keeps it (--reasoning-parser): the answer streams whole, and the conversation's turn carries
// the reasoning as reasoning_content, its calls read from the words after it.
#include "cli/commands.h"
#include "cli/infer_args.h"
#include "core/error.h"
#include "infer/answer_formats.h"
#include "infer/chat_answer.h"
#include "infer/engine.h"
#include "infer/openai_api.h"
#include "infer/tool_calls.h"

#include <cstdio>
#include <deque>
#include <fmt/format.h>
#include <fstream>
#include <iostream>
#include <string>
#include <unistd.h>

namespace zaya::cli {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

struct ChatArgs {
    InferModelArgs model;
    SampleOptions sample;
    EngineOptions engine{.max_batch = 1};
    std::string system;
    std::string tools_file; // OpenAI's `tools` (an array), or an object of a chat request's tool fields
    std::string tool_choice;         // auto | required | none | a tool's name (default: the file's, else auto)
    bool parallel_tool_calls = true; // several calls in one answer
    bool parallel_given = false;     // --parallel-tool-calls given: it replaces the file's parallel_tool_calls
    bool quiet = false;
};

constexpr const char *kChatHelp =
    "/reset forgets the conversation, /save FILE appends it to FILE as a chat record (zaya prepare's fine-tuning "
    "data), /exit (or end of input) ends it";
constexpr const char *kToolsHelp = "/result TEXT gives the next tool call its result";

// --tools FILE with --tool-choice and --parallel-tool-calls, read as a chat request's fields are: `fields` gets them
// as a request would give them (`tools`, `tool_choice`, `parallel_tool_calls`).
ApiTools load_tools(const ChatArgs &a, ordered_json &fields) {
    const ordered_json file = read_json_file("--tools", a.tools_file);
    ordered_json body = file.is_array() ? ordered_json{{"tools", file}} : file;
    if (!body.is_object() || !body.contains("tools"))
        fail("--tools: '{}' must hold OpenAI's `tools` (an array), or an object with `tools`", a.tools_file);
    if (a.tool_choice == "auto" || a.tool_choice == "required" || a.tool_choice == "none")
        body["tool_choice"] = a.tool_choice;
    else if (!a.tool_choice.empty())
        body["tool_choice"] = {{"type", "function"}, {"function", {{"name", a.tool_choice}}}};
    if (a.parallel_given) body["parallel_tool_calls"] = a.parallel_tool_calls;
    fields = ordered_json::object();
    for (const char *key : {"tools", "tool_choice", "parallel_tool_calls"})
        if (body.contains(key)) fields[key] = body[key];
    try {
        return parse_tools(body);
    } catch (const ApiError &e) {
        fail("--tools '{}': {}", a.tools_file, e.message);
    }
}

// /save FILE: the conversation (from its system message, the tools' fields with it) appended to FILE as one JSON
// line, the chat record `zaya prepare` takes (data/sources.h), which renders it as this chat's prompts were.
void save_chat(const std::string &path, const json &messages, size_t fresh, const ordered_json &tool_fields) {
    if (messages.size() <= fresh) {
        fmt::print(stderr, "nothing to save yet\n");
        return;
    }
    ordered_json record = ordered_json::object();
    record["messages"] = messages;
    for (const auto &[key, value] : tool_fields.items()) record[key] = value;
    std::ofstream out(path, std::ios::app);
    out << record.dump() << '\n';
    out.flush();
    if (!out) fmt::print(stderr, "/save: cannot write '{}'\n", path);
    else fmt::print(stderr, "[{} messages appended to {}]\n", messages.size(), path);
}

void run_chat(ChatArgs a) {
    ordered_json tool_fields = ordered_json::object(); // a saved record's tools (none without --tools)
    ApiTools tools = a.tools_file.empty() ? ApiTools{} : load_tools(a, tool_fields);
    if (tools.active() && a.sample.json_mode())
        fail("--json or --json-schema with --tools: the tools hold the answer to their own JSON form (use "
             "--tool-choice none for a JSON answer)");
    auto model = load_infer_model(a.model);
    std::optional<Tokenizer> tok = load_infer_tokenizer(a.model);
    if (!tok)
        fail("chat needs a tokenizer: '{}' has no tokenizer.model or tokenizer.json (give --tokenizer PATH)",
             a.model.model);
    tools.format = resolve_tool_format(&*tok, a.model.tool_call_parser);
    const std::optional<ReasoningTags> reasoning = resolve_reasoning(&*tok, a.model.reasoning_parser);
    if (tools.active()) {
        a.sample.json_schema = tools_schema(tools);
        a.sample.json_trigger = tools_trigger(tools);
    }
    const int32_t bos = int32_t(model->config.bos_token_id);
    nlohmann::ordered_json variables = chat_variables(a.model.chat_template_kwargs);
    if (tools.native() && tools.active()) variables["tools"] = template_tools(tools); // the template describes them
    Engine engine(std::move(model), std::move(tok), a.engine);
    const Tokenizer &t = *engine.tokenizer();
    if (a.sample.stop_tokens.empty()) a.sample.stop_tokens = engine.default_stop_tokens();
    for (std::string &stop : chat_stop_strings(t)) a.sample.stop_strings.push_back(std::move(stop));
    const bool tty = isatty(fileno(stdin));
    const std::string help = tools.active() ? fmt::format("{}; {}", kChatHelp, kToolsHelp) : kChatHelp;
    if (tty) fmt::print(stderr, "zaya chat: {}\n", help);
    // The conversation as OpenAI's messages, which chat_messages writes as the server does.
    json messages = json::array();
    if (!a.system.empty()) messages.push_back({{"role", "system"}, {"content", a.system}});
    const size_t fresh = messages.size();
    std::deque<json> awaiting; // the calls of the last answer without a result yet, in order
    int64_t answers = 0;
    // Answers the conversation so far; false, the caller taking back what it added, when it no longer fits the
    // context.
    auto answer = [&] {
        const std::vector<int32_t> prompt = chat_prompt(t, chat_messages(messages, tools), bos, variables);
        if (int64_t(prompt.size()) >= engine.max_context()) {
            fmt::print(stderr, "the conversation has {} tokens, the context {}: /reset to start a new one\n",
                       prompt.size(), engine.max_context());
            return false;
        }
        auto stream = [](int32_t, const std::string &text, const Completion &) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        };
        ApiRequest q; // the answer read (and held) as the server reads a request's
        q.chat = true;
        q.tools = tools;
        q.sample = a.sample;
        if (reasoning) expect_reasoning(q, *reasoning, prompt_ids_open_reasoning(t, prompt, *reasoning));
        const Completion r =
            generate_one(engine, prompt, q.sample, stream, a.quiet ? Engine::OnPrompt{} : prompt_progress_printer());
        fmt::print("\n");
        std::fflush(stdout);
        if (r.finish_reason == "error") fail("generation failed: {}", r.error);
        const ChatAnswer read = read_chat_answer(q, r.text, r.finish_reason, std::to_string(++answers));
        const ToolAnswer &ta = read.answer;
        const std::string finish = ta.finish_reason;
        json reply = {{"role", "assistant"}, {"content", ta.content}};
        if (!read.reasoning.empty()) reply["reasoning_content"] = read.reasoning; // (the template writes it, or not)
        if (tools.active()) {
            if (!ta.tool_calls.is_null()) {
                reply["content"] = ta.content.empty() ? json(nullptr) : json(ta.content);
                reply["tool_calls"] = ta.tool_calls;
                for (const json &c : ta.tool_calls) {
                    awaiting.push_back(c);
                    fmt::print(stderr, "[tool call {}: {}({})]\n", c["id"].get<std::string>(),
                               c["function"]["name"].get<std::string>(),
                               c["function"]["arguments"].get<std::string>());
                }
            }
        }
        messages.push_back(std::move(reply));
        if (!a.quiet)
            fmt::print(stderr, "[{} prompt tokens ({} from the cache), {} generated ({}); {}]\n", r.prompt_tokens,
                       r.cached_tokens, r.tokens.size(), finish, speed_summary(r));
        if (!awaiting.empty())
            fmt::print(stderr, "[{} call{} awaiting a result: /result TEXT]\n", awaiting.size(),
                       awaiting.size() == 1 ? "" : "s");
        return true;
    };
    std::string line;
    while (true) {
        if (tty) fmt::print(stderr, "> ");
        if (!std::getline(std::cin, line) || line == "/exit") break;
        if (line == "/reset") {
            messages.erase(messages.begin() + std::ptrdiff_t(fresh), messages.end());
            awaiting.clear();
            if (!a.quiet) fmt::print(stderr, "[conversation reset]\n");
            continue;
        }
        if (line.empty()) continue;
        if (line.starts_with("/save ")) {
            save_chat(line.substr(6), messages, fresh, tool_fields);
            continue;
        }
        if (line == "/result" || line.starts_with("/result ")) {
            if (awaiting.empty()) {
                fmt::print(stderr, "no tool call awaits a result\n");
                continue;
            }
            messages.push_back({{"role", "tool"},
                                {"tool_call_id", awaiting.front()["id"]},
                                {"content", line.size() > 8 ? line.substr(8) : ""}});
            awaiting.pop_front();
            if (awaiting.empty() && !answer()) {
                // The results do not fit: take them back with the calls' answer, whose results they were.
                while (messages.back()["role"] == "tool") messages.erase(messages.end() - 1);
                messages.erase(messages.end() - 1);
            }
            continue;
        }
        if (line.starts_with("/")) {
            fmt::print(stderr, "unknown command '{}': {}\n", line, help);
            continue;
        }
        if (!awaiting.empty()) {
            fmt::print(stderr, "{} tool call{} await{} a result first: /result TEXT (or /reset)\n", awaiting.size(),
                       awaiting.size() == 1 ? "" : "s", awaiting.size() == 1 ? "s" : "");
            continue;
        }
        messages.push_back({{"role", "user"}, {"content", line}});
        if (!answer()) messages.erase(messages.end() - 1);
    }
}

} // namespace

void register_chat(CLI::App &app) {
    auto *cmd = app.add_subcommand(
        "chat", "Talk with a chat model: each line of input is your turn, the answer streams back (/reset, /save FILE, "
                "/exit; with --tools, /result TEXT)");
    auto a = std::make_shared<ChatArgs>();
    add_model_options(cmd, a->model);
    cmd->add_option("--system", a->system, "A system message opening the conversation");
    cmd->add_option("--tools", a->tools_file,
                    "Tools the model may call: a JSON file of OpenAI's `tools` (an array of functions), or an object "
                    "with `tools`, `tool_choice`, `parallel_tool_calls`. Calls print on stderr; /result TEXT answers "
                    "each in turn")
        ->type_name("FILE");
    cmd->add_option("--tool-choice", a->tool_choice,
                    "With --tools: auto (words or calls; the default), required (a call every answer), none, or a "
                    "tool's name (calls of it)")
        ->type_name("CHOICE");
    cmd->add_option("--parallel-tool-calls", a->parallel_tool_calls, "With --tools: several calls in one answer")
        ->capture_default_str();
    cmd->add_flag("-q,--quiet", a->quiet, "No statistics line after each answer (nor a long prompt's progress)");
    add_sampling_options(cmd, a->sample);
    add_engine_device_options(cmd, a->engine);
    add_prefix_cache_option(cmd, a->engine.prefix_cache_bytes);
    cmd->callback([a, cmd] {
        a->parallel_given = cmd->count("--parallel-tool-calls") > 0;
        if (a->tools_file.empty() && (!a->tool_choice.empty() || a->parallel_given))
            fail("--tool-choice and --parallel-tool-calls need --tools");
        run_chat(*a);
    });
}

} // namespace zaya::cli
