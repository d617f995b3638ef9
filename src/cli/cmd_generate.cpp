// zaya generate MODEL --prompt "..." | --tokens 5,17,3 [--chat] [-n 128] — cached generation, streamed.
#include "cli/commands.h"
#include "cli/infer_args.h"
#include "cli/model_arg.h"
#include "core/error.h"
#include "infer/engine.h"
#include "train/memory.h"

#include <algorithm>
#include <cstdio>
#include <fmt/format.h>

namespace zaya::cli {

namespace {

struct GenerateArgs {
    InferModelArgs model;
    SampleOptions sample;
    EngineOptions engine{.max_batch = 1};
    std::string prompt, tokens, system;
    bool chat = false, print_ids = false, no_bos = false, quiet = false;
};

void run_generate(GenerateArgs a) {
    if (a.prompt.empty() == a.tokens.empty()) fail("give exactly one of --prompt TEXT and --tokens IDS");
    if (a.chat && a.prompt.empty()) fail("--chat needs --prompt (the user message)");
    auto model = load_infer_model(a.model);
    std::optional<Tokenizer> tok = load_infer_tokenizer(a.model);
    if (!a.prompt.empty() && !tok)
        fail("--prompt needs a tokenizer: '{}' has no tokenizer.model or tokenizer.json (give --tokenizer PATH, or "
             "--tokens IDS)",
             a.model.model);
    const ZayaConfig c = model->config;
    const int32_t bos = a.no_bos ? -1 : int32_t(c.bos_token_id);
    std::vector<int32_t> prompt;
    if (!a.prompt.empty()) {
        prompt = text_prompt(*tok, a.prompt, a.chat, a.system, bos, chat_variables(a.model.chat_template_kwargs));
        if (a.chat)
            for (std::string &stop : chat_stop_strings(*tok)) a.sample.stop_strings.push_back(std::move(stop));
    } else {
        auto lists = parse_token_lists(a.tokens);
        if (lists.size() != 1) fail("--tokens takes one sequence (no ';')");
        prompt = lists[0];
    }
    // One sequence: on the GPU the whole prompt is one engine step (the decoder cuts it into its own GEMM passes, as
    // long as it allows); the CPU decoder's working memory grows with the chunk, so it takes up to
    // kCpuSolePrefillChunk tokens a step.
    const int64_t prompt_tokens = int64_t(prompt.size());
    a.engine.prefill_chunk = a.engine.device == "cuda" ? std::max<int64_t>(prompt_tokens, 1)
                                                       : cpu_sole_prompt_chunk(prompt_tokens);
    Engine engine(std::move(model), std::move(tok), a.engine);
    if (a.sample.stop_tokens.empty()) a.sample.stop_tokens = engine.default_stop_tokens();
    const bool stream_text = engine.tokenizer() != nullptr;
    const auto stream = [&](int32_t, const std::string &text, const Completion &) {
        if (stream_text && !text.empty()) {
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        }
    };
    // A prompt read in several steps (longer than one on the CPU) says how far it got.
    Completion r =
        generate_one(engine, prompt, a.sample, stream, a.quiet ? Engine::OnPrompt{} : prompt_progress_printer());
    if (stream_text) fmt::print("\n");
    if (a.print_ids) {
        std::string ids;
        for (int32_t t : r.tokens) ids += (ids.empty() ? "" : ",") + std::to_string(t);
        fmt::print("{}\n", ids);
    }
    if (!a.quiet) {
        fmt::print(stderr,
                   "[{} prompt tokens, {} generated ({}); {}; "
                   "weights {:.1f} MiB ({}, {} inputs); KV cache {:.1f} KiB/token ({}); peak RSS {:.1f} MiB; {}]\n",
                   r.prompt_tokens, r.tokens.size(), r.finish_reason, speed_summary(r),
                   double(engine.model().matrix_bytes()) / (1 << 20), dtype_name(engine.model().weight_dtype),
                   engine.matmul_inputs(),
                   double(SequenceCache::bytes_per_token(c, engine.kv_dtype())) / 1024, dtype_name(engine.kv_dtype()),
                   double(process_peak_rss_bytes()) / (1 << 20), engine.device());
    }
}

} // namespace

void register_generate(CLI::App &app) {
    auto *cmd = app.add_subcommand("generate", "Generate text or token ids with cached decoding (streamed)");
    auto a = std::make_shared<GenerateArgs>();
    add_model_options(cmd, a->model);
    cmd->add_option("-p,--prompt", a->prompt, "Prompt text (needs a tokenizer); BOS is prepended");
    cmd->add_option("--tokens", a->tokens, "Prompt token ids, comma-separated, used as given");
    cmd->add_flag("--chat", a->chat, "Wrap --prompt as a user turn of ZAYA1's chat format and answer it");
    cmd->add_option("--system", a->system, "With --chat: a system message");
    cmd->add_flag("--no-bos", a->no_bos, "Do not prepend BOS to --prompt");
    cmd->add_flag("--print-ids", a->print_ids, "Print the generated ids, comma-separated, as the last line");
    cmd->add_flag("-q,--quiet", a->quiet, "No statistics line (nor prompt progress) on stderr");
    add_sampling_options(cmd, a->sample);
    add_engine_device_options(cmd, a->engine);
    cmd->callback([a] { run_generate(*a); });
}

} // namespace zaya::cli
