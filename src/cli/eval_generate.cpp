// zaya eval MODEL --generate FILE [--max-tokens N] [--stop S] [--answer-regex R] [--chat] [--batch B] [--out F]:
// exact match of completions (infer/evaluate_generation.h), decoded by the Engine on the CPU or a GPU.
#include "cli/eval_args.h"
#include "cli/infer_args.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "infer/answer_formats.h"
#include "infer/evaluate_generation.h"
#include "train/start_model.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace zaya::cli {

void run_eval_generate(const EvalArgs &a, Communicator &comm) {
    if (a.max_tokens < 1) fail("eval: --max-tokens must be at least 1, got {}", a.max_tokens);
    if (a.batch < 1) fail("eval: --batch must be positive, got {}", a.batch);
    if (a.precision != "fp32")
        fail("eval: --generate decodes as `zaya generate` does (a bf16 checkpoint's linears take bf16 rows); drop "
             "--precision");
    std::vector<GenerationItem> items = load_generation_items(a.generate);
    if (a.limit > 0 && a.limit < int64_t(items.size())) items.resize(size_t(a.limit));
    // A model directory is mapped as `zaya generate` maps it; a checkpoint's fp32 weights are loaded as training
    // would resume them.
    InferModelArgs ma;
    ma.model = a.model;
    const bool checkpoint = std::filesystem::exists(std::filesystem::path(a.model) / "manifest.json");
    auto model = checkpoint ? InferModel::from_model(load_model_or_checkpoint(a.model, "eval"), DType::F32)
                            : load_infer_model(ma);
    apply_quantize(*model, a.quantize);
    Tokenizer tok = eval_tokenizer(a);
    GenerationEvalOptions o;
    if (a.chat) o.reasoning = resolve_reasoning(&tok, a.reasoning_parser); // (its markers decoded as text)
    EngineOptions eo{.max_batch = a.batch, .device = a.device, .prefix_cache_bytes = a.prefix_cache_bytes};
    eo.batch_invariant = a.batch_invariant;
    Engine engine(std::move(model), std::move(tok), eo);
    o.sample.temperature = 0; // greedy, as the harness's generation tasks
    o.sample.max_new_tokens = a.max_tokens;
    o.sample.stop_strings = a.stops;
    o.chat = a.chat;
    o.system = a.system;
    o.answer_regex = a.answer_regex;
    const bool tty = !a.json && comm.is_root() && isatty(fileno(stderr));
    const auto t0 = std::chrono::steady_clock::now();
    const GenerationEvalResult r = evaluate_generation(engine, items, o, comm, eval_progress(tty, "item"));
    if (tty) std::fprintf(stderr, "\n");
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!a.out.empty()) {
        std::string lines;
        for (size_t k = 0; k < r.item.size(); ++k) {
            const GenerationItem &it = items[r.item[k]];
            lines += nlohmann::json{{"prompt", it.prompt},           {"answer", it.answer},
                                    {"completion", r.completions[k]}, {"extracted", r.extracted[k]},
                                    {"correct", bool(r.correct[k])}}
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "\n";
        }
        write_file_atomic(a.out, lines);
    }
    if (a.json) {
        fmt::print("{}\n", nlohmann::json{{"model", a.model},
                                          {"generate_file", a.generate},
                                          {"items", r.items},
                                          {"right", r.right},
                                          {"exact_match", r.exact_match},
                                          {"exact_match_stderr", r.exact_match_stderr},
                                          {"tokens", r.tokens},
                                          {"seconds", s},
                                          {"ranks", comm.size()},
                                          {"device", engine.device()}}
                               .dump());
        return;
    }
    fmt::print("eval {} on {}: {} items, {} tokens generated{}\n", a.model, a.generate, r.items, r.tokens,
               comm.size() > 1 ? fmt::format(" ({} ranks)", comm.size()) : std::string());
    fmt::print("exact_match {:.4f} ± {:.4f}  ({} right; {:.1f} s, {:.0f} tokens/s){}\n", r.exact_match,
               r.exact_match_stderr, r.right, s, double(r.tokens) / s,
               a.out.empty() ? std::string() : fmt::format("; completions in {}", a.out));
}

} // namespace zaya::cli
