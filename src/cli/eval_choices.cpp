// zaya eval MODEL --choices FILE [--tokenizer T] [--batch-tokens N] [--limit N] [--device D] [--precision P] [--json]:
// multiple-choice accuracy (train/evaluate_choices.h), on the CPU or a GPU, shared by the ranks under mpirun.
#include "cli/eval_args.h"
#include "cli/infer_args.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/eval_items.h"
#include "data/tokenizer.h"
#include "model/activations.h"
#include "ops/backend.h"
#include "ops/cpu/gemm.h"
#include "train/evaluate_choices.h"
#include "train/start_model.h"

#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <unistd.h>

namespace zaya::cli {

Tokenizer eval_tokenizer(const EvalArgs &a) {
    InferModelArgs ma;
    ma.model = a.model;
    ma.tokenizer = a.tokenizer;
    ma.chat_template = a.chat_template;
    std::optional<Tokenizer> tok = load_infer_tokenizer(ma);
    if (!tok)
        fail("eval: {} has no tokenizer.model or tokenizer.json: give --tokenizer (the one the model was trained "
             "with)",
             a.model);
    return std::move(*tok);
}

void run_eval_choices(const EvalArgs &a, Communicator &comm) {
    if (a.batch_tokens < 2) fail("eval: --batch-tokens must be at least 2, got {}", a.batch_tokens);
    const cpu::MatmulPrecision precision = cpu::matmul_precision_from_string(a.precision);
    std::vector<ChoiceItem> items = load_choice_items(a.choices);
    if (a.limit > 0 && a.limit < int64_t(items.size())) items.resize(size_t(a.limit));
    const Tokenizer tok = eval_tokenizer(a);
    Model m = load_model_or_checkpoint(a.model, "eval");
    if (tok.vocab_size() > m.config.vocab_size)
        fail("eval: tokenizer {} has {} tokens but the model's vocabulary is {}", tok.path(), tok.vocab_size(),
             m.config.vocab_size);
    if (a.rope_theta > 0) m.config.rope_hybrid.rope_theta = a.rope_theta;

    Backend &be = backend_named(a.device);
    std::optional<Model> on_device;
    if (!be.host_memory()) {
        on_device.emplace(model_on(m, be));
        be.set_matmul_precision(precision);
    }
    // A pass holds --batch-tokens tokens, in as many sequences as choices fit (each at least 2 tokens).
    const int64_t max_len = std::min(a.batch_tokens, m.config.max_position_embeddings);
    const int64_t max_seqs = std::max<int64_t>(1, a.batch_tokens / 2);
    Activations acts = Activations::plan(m.config, a.batch_tokens, max_seqs, /*keep_all_layers=*/false, be,
                                         !be.host_memory() && precision == cpu::MatmulPrecision::BF16);
    const bool tty = !a.json && comm.is_root() && isatty(fileno(stderr));
    const auto t0 = std::chrono::steady_clock::now();
    ChoiceEvalResult r;
    {
        const cpu::MatmulPrecisionScope scope(precision);
        const WeightsUnchanged frozen(be);
        r = evaluate_choices(on_device ? *on_device : m, tok, items, acts, a.batch_tokens, max_seqs, max_len, comm,
                             eval_progress(tty, "item"));
        if (tty) std::fprintf(stderr, "\n");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!a.out.empty()) { // one process: every item, in order
        std::string lines;
        for (size_t i = 0; i < items.size(); ++i)
            lines += nlohmann::json{{"context", items[i].context}, {"choices", items[i].choices},
                                    {"answer", items[i].answer},   {"loglik", r.loglik[i]},
                                    {"pred", r.pred[i]},           {"pred_norm", r.pred_norm[i]}}
                         .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                     "\n";
        write_file_atomic(a.out, lines);
    }
    if (a.json) {
        nlohmann::json j = {{"model", a.model},       {"choices_file", a.choices}, {"items", r.items},
                            {"choices", r.choices},   {"tokens", r.tokens},        {"truncated", r.truncated},
                            {"acc", r.acc},           {"acc_stderr", r.acc_stderr}, {"acc_norm", r.acc_norm},
                            {"acc_norm_stderr", r.acc_norm_stderr}, {"seconds", s}, {"ranks", comm.size()},
                            {"device", a.device}};
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("eval {} on {}: {} items, {} choices, {} tokens{}{}\n", a.model, a.choices, r.items, r.choices,
               r.tokens, comm.size() > 1 ? fmt::format(" ({} ranks)", comm.size()) : std::string(),
               r.truncated > 0 ? fmt::format(", {} contexts cut from the left to {} tokens", r.truncated, max_len)
                               : std::string());
    fmt::print("acc {:.4f} ± {:.4f}  acc_norm {:.4f} ± {:.4f}  ({:.1f} s, {:.0f} tokens/s){}\n", r.acc,
               r.acc_stderr, r.acc_norm, r.acc_norm_stderr, s, double(r.tokens) / s,
               a.out.empty() ? std::string() : fmt::format("; per item in {}", a.out));
}

} // namespace zaya::cli
