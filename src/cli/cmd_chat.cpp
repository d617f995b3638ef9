// zaya chat MODEL [--system TEXT] — an interactive conversation in ZAYA1's chat format: each line read from stdin
// is the user's turn, the answer streams to stdout, and the whole conversation is the next turn's prompt. The
// engine's prefix cache (infer/prefix_cache.h) resumes each turn from the last one's cache, so a turn costs its
// new tokens, not the conversation so far.
#include "cli/commands.h"
#include "cli/infer_args.h"
#include "core/error.h"
#include "infer/engine.h"

#include <cstdio>
#include <fmt/format.h>
#include <iostream>
#include <string>
#include <unistd.h>

namespace zaya::cli {

namespace {

struct ChatArgs {
    InferModelArgs model;
    SampleOptions sample;
    EngineOptions engine{.max_batch = 1};
    std::string system;
    bool quiet = false;
};

constexpr const char *kChatHelp = "/reset forgets the conversation, /exit (or end of input) ends it";

void run_chat(ChatArgs a) {
    auto model = load_infer_model(a.model);
    std::optional<Tokenizer> tok = load_infer_tokenizer(a.model);
    if (!tok) fail("chat needs a tokenizer: '{}' has no tokenizer.model (give --tokenizer PATH)", a.model.model);
    const int32_t bos = int32_t(model->config.bos_token_id);
    Engine engine(std::move(model), std::move(tok), a.engine);
    const Tokenizer &t = *engine.tokenizer();
    if (a.sample.stop_tokens.empty()) a.sample.stop_tokens = engine.default_stop_tokens();
    for (std::string &stop : chat_stop_strings(t)) a.sample.stop_strings.push_back(std::move(stop));
    const bool tty = isatty(fileno(stdin));
    if (tty) fmt::print(stderr, "zaya chat: {}\n", kChatHelp);
    std::vector<ChatMessage> history;
    if (!a.system.empty()) history.push_back({"system", a.system});
    const size_t fresh = history.size();
    std::string line;
    while (true) {
        if (tty) fmt::print(stderr, "> ");
        if (!std::getline(std::cin, line) || line == "/exit") break;
        if (line == "/reset") {
            history.resize(fresh);
            if (!a.quiet) fmt::print(stderr, "[conversation reset]\n");
            continue;
        }
        if (line.empty()) continue;
        if (line.starts_with("/")) {
            fmt::print(stderr, "unknown command '{}': {}\n", line, kChatHelp);
            continue;
        }
        history.push_back({"user", line});
        const std::vector<int32_t> prompt = chat_prompt(t, history, bos);
        if (int64_t(prompt.size()) >= engine.max_context()) {
            fmt::print(stderr, "the conversation has {} tokens, the context {}: /reset to start a new one\n",
                       prompt.size(), engine.max_context());
            history.pop_back();
            continue;
        }
        auto stream = [](int32_t, const std::string &text, const Completion &) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        };
        const Completion r = generate_one(engine, prompt, a.sample, stream);
        fmt::print("\n");
        std::fflush(stdout);
        if (r.finish_reason == "error") fail("generation failed: {}", r.error);
        history.push_back({"assistant", r.text});
        if (!a.quiet)
            fmt::print(stderr, "[{} prompt tokens ({} from the cache), {} generated ({}); {}]\n", r.prompt_tokens,
                       r.cached_tokens, r.tokens.size(), r.finish_reason, speed_summary(r));
    }
}

} // namespace

void register_chat(CLI::App &app) {
    auto *cmd = app.add_subcommand(
        "chat", "Talk with a chat model: each line of input is your turn, the answer streams back (/reset, /exit)");
    auto a = std::make_shared<ChatArgs>();
    add_model_options(cmd, a->model);
    cmd->add_option("--system", a->system, "A system message opening the conversation");
    cmd->add_flag("-q,--quiet", a->quiet, "No statistics line after each answer");
    add_sampling_options(cmd, a->sample);
    add_engine_device_options(cmd, a->engine);
    add_prefix_cache_option(cmd, a->engine.prefix_cache_bytes);
    cmd->callback([a] { run_chat(*a); });
}

} // namespace zaya::cli
