// zaya eval MODEL --data DIR [--seq T] [--batch B] [--batches N] [--by-position K] — a model's loss and perplexity
// on the validation split of prepared data, computed as `zaya train` computes val_loss (train/evaluate.h), and with
// --by-position its loss along the sequence. zaya eval MODEL --choices FILE: multiple-choice accuracy
// (eval_choices.cpp).
#include "cli/commands.h"
#include "cli/eval_args.h"
#include "cli/infer_args.h"
#include "core/error.h"
#include "data/dataset.h"
#include "dist/comm.h"
#include "dist/context_parallel.h"
#include "model/activations.h"
#include "ops/backend.h"
#include "ops/cpu/gemm.h"
#include "train/evaluate.h"
#include "train/start_model.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <unistd.h>

namespace zaya::cli {

namespace {

void run_eval(const EvalArgs &a, Communicator &comm) {
    const int modes = int(!a.data.empty()) + int(!a.choices.empty()) + int(!a.generate.empty());
    if (modes != 1)
        fail("eval: give one of --data DIR (the validation loss), --choices FILE (multiple-choice accuracy) and "
             "--generate FILE (exact match of completions), not {}",
             modes == 0 ? "none" : "several");
    if (a.device != "cpu" && a.device != "cuda") fail("eval: --device must be 'cpu' or 'cuda', got '{}'", a.device);
    if (a.batch_invariant && a.generate.empty())
        fail("eval: --batch-invariant applies to --generate (the decoder's steps); --data and --choices score fixed "
             "batches");
    if (a.data.empty()) { // benchmark items: --choices or --generate
        if (a.limit < 0) fail("eval: --limit must be ≥ 0 (0 = every item), got {}", a.limit);
        if (a.context_parallel != 1)
            fail("eval: --choices and --generate score whole sequences on each rank (no --context-parallel)");
        if (!a.out.empty() && comm.size() > 1) fail("eval: --out writes one process's items: run without mpirun");
        return a.choices.empty() ? run_eval_generate(a, comm) : run_eval_choices(a, comm);
    }
    if (a.seq < 2) fail("eval: --seq must be at least 2, got {}", a.seq);
    if (a.batch < 1) fail("eval: --batch must be positive, got {}", a.batch);
    if (a.batches < 0) fail("eval: --batches must be ≥ 0 (0 = the whole split), got {}", a.batches);
    if (a.by_position < 0 || a.by_position > a.seq)
        fail("eval: --by-position must be in [0, --seq {}] (0 = off), got {}", a.seq, a.by_position);
    if (!(a.rope_theta >= 0)) fail("eval: --rope-theta must be positive (0 = the model's own), got {}", a.rope_theta);
    ContextParallel::check_options("eval", a.context_parallel, a.seq, a.device);
    const int cp = int(a.context_parallel);
    const cpu::MatmulPrecision precision = cpu::matmul_precision_from_string(a.precision);
    auto data = DataSet::open(a.data);
    Model m = load_trained_model(a.model, data->manifest(), data->tokenizer_path(), "eval");
    if (a.rope_theta > 0) m.config.rope_hybrid.rope_theta = a.rope_theta; // as `zaya train --rope-theta`

    Backend &be = backend_named(a.device);
    std::optional<Model> on_device;
    if (!be.host_memory()) {
        on_device.emplace(model_on(m, be));
        be.set_matmul_precision(precision);
    }
    const int64_t max_seqs = TokenBatch::max_sequences(a.batch, a.seq, a.doc_mask, cp);
    Activations acts = Activations::plan(m.config, a.batch * (a.seq / cp), max_seqs, /*keep_all_layers=*/false, be,
                                         !be.host_memory() && precision == cpu::MatmulPrecision::BF16);
    std::unique_ptr<ContextParallel> context; // groups of cp consecutive ranks share each sequence
    if (cp > 1) {
        ContextParallel::check_chunks(m.config, a.seq, cp);
        context = std::make_unique<ContextParallel>(ContextParallel::group_of("eval", comm, cp), m.config, a.seq,
                                                    a.batch, /*keep_all_layers=*/false);
        acts.context = context.get();
    }
    const int64_t groups = comm.size() / cp; // the ranks (or groups) that take slices of each batch
    const bool tty = !a.json && comm.is_root() && isatty(fileno(stderr));
    const auto t0 = std::chrono::steady_clock::now();
    EvalResult r;
    {
        const cpu::MatmulPrecisionScope scope(precision);
        const WeightsUnchanged frozen(be); // one bf16 copy of each matrix for all the batches, on a GPU
        r = evaluate_loss(on_device ? *on_device : m, data, a.batch, a.seq, a.batches, acts, comm,
                          RowLayout{packing_from_string(a.packing), a.doc_mask},
                          a.by_position > 0, eval_progress(tty, "batch"));
        if (tty) std::fprintf(stderr, "\n");
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double ppl = std::exp(r.loss);
    // --by-position K: K ranges of positions as equal as they divide, each range's mean loss over its targets
    // (without loss masks every position has as many, so the ranges' means average to the loss).
    nlohmann::json ranges = nlohmann::json::array();
    for (int64_t k = 0; k < a.by_position; ++k) {
        const int64_t from = k * a.seq / a.by_position, to = (k + 1) * a.seq / a.by_position;
        double sum = 0;
        int64_t n = 0;
        for (int64_t p = from; p < to; ++p)
            if (const int64_t np = r.position_tokens[size_t(p)]; np > 0) {
                sum += r.position_loss[size_t(p)] * double(np);
                n += np;
            }
        ranges.push_back({{"from", from}, {"to", to - 1}, {"tokens", n},
                          {"loss", n > 0 ? nlohmann::json(sum / double(n)) : nlohmann::json(nullptr)}});
    }
    if (a.json) {
        nlohmann::json j = {{"model", a.model},         {"data", a.data},     {"seq", a.seq}, {"ranks", comm.size()},
                            {"context_parallel", cp},
                            {"batch", a.batch},         {"batches", r.batches}, {"tokens", r.tokens},
                            {"loss", r.loss},           {"perplexity", ppl},  {"seconds", s},
                            {"rope_theta", m.config.rope_hybrid.rope_theta}, {"device", a.device},
                            {"doc_mask", a.doc_mask}, {"packing", a.packing}};
        if (a.by_position > 0) j["by_position"] = ranges;
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("eval {} on {} (validation split): {} batches of {} × {} tokens{}, {} targets\n", a.model, a.data,
               r.batches, a.batch * groups, a.seq,
               comm.size() > 1 ? fmt::format(" ({} ranks{})", comm.size(),
                                             cp > 1 ? fmt::format(", {} sharing each sequence", cp) : std::string())
                               : std::string(),
               r.tokens);
    fmt::print("loss {:.6f}  perplexity {:.3f}  ({:.1f} s, {:.0f} tokens/s)\n", r.loss, ppl, s, double(r.tokens) / s);
    if (a.by_position > 0) fmt::print("{:>17}  {:>9}\n", "positions", "loss");
    for (const auto &x : ranges)
        fmt::print("{:>17}  {:>9}\n", fmt::format("{}-{}", x["from"].get<int64_t>(), x["to"].get<int64_t>()),
                   x["loss"].is_null() ? std::string("-") : fmt::format("{:.4f}", x["loss"].get<double>()));
}

// Under an MPI launcher every rank evaluates its share of each batch (`--batch` per rank), as training's
// validation does; rank 0 alone prints, and a rank that fails ends the job.
void run_eval_ranks(const EvalArgs &a) {
    std::shared_ptr<Communicator> comm = communicator_from_environment();
    if (comm->size() > 1) {
        if (!comm->is_root() && !std::freopen("/dev/null", "w", stdout))
            fail("rank {}: cannot silence stdout", comm->rank());
        comm->set_watchdog(600);
    }
    run_or_abort_job(*comm, [&] {
        run_eval(a, *comm);
        return 0;
    });
}

} // namespace

void register_eval(CLI::App &app) {
    auto *cmd = app.add_subcommand(
        "eval", "Loss and perplexity of a trained model on the validation split of prepared data (zaya prepare), "
                "its accuracy on multiple-choice items (--choices), or its completions' exact match (--generate)");
    auto a = std::make_shared<EvalArgs>();
    cmd->add_option("model", a->model, "Model directory (config.json + safetensors) or checkpoint directory")
        ->required();
    cmd->add_option("--data", a->data, "Prepared data directory, tokenized with the model's tokenizer");
    cmd->add_option("--choices", a->choices,
                    "Multiple-choice items, JSONL {\"context\": str, \"choices\": [str, ...], \"answer\": int}: "
                    "accuracy by each choice's log-likelihood (acc) and per character (acc_norm), as "
                    "lm-evaluation-harness scores HellaSwag, ARC, PIQA, MMLU");
    cmd->add_option("--generate", a->generate,
                    "Items to complete, JSONL {\"prompt\": str, \"answer\": str}: exact match of the (greedy) "
                    "completion, or of what --answer-regex finds in it, with the answer (GSM8K-style)");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "With --choices or --generate: the tokenizer.model or tokenizer.json, or a directory holding one "
                    "(default: the model directory's own)");
    cmd->add_option("--max-tokens", a->max_tokens, "With --generate: tokens per completion at most")
        ->capture_default_str();
    cmd->add_option("--stop", a->stops, "With --generate: end a completion at this string (repeatable)");
    add_prefix_cache_option(cmd, a->prefix_cache_bytes, "With --generate: ");
    add_quantize_option(cmd, a->quantize, "With --generate: ");
    cmd->add_option("--answer-regex", a->answer_regex,
                    "With --generate: the answer is this regex's last match in the completion (its first group if "
                    "any), e.g. '#### (-?[0-9.,]+)'");
    cmd->add_flag("--chat", a->chat, "With --generate: each prompt as a user's turn in the chat format");
    cmd->add_flag("--batch-invariant", a->batch_invariant,
                  "With --generate (cpu): every completion the same bits whatever --batch, the ranks and threads "
                  "(zaya serve --batch-invariant's per-row paths; AVX-512 builds)");
    cmd->add_option("--system", a->system, "With --generate --chat: a system message");
    add_chat_template_option(cmd, a->chat_template, "With --generate --chat: ");
    cmd->add_option("--reasoning-parser", a->reasoning_parser,
                    "With --generate --chat: the answer is taken from what follows a thinking model's reasoning: "
                    "think (<think>...</think>), none (the whole completion), or auto: think when the chat template "
                    "writes </think>")
        ->capture_default_str();
    cmd->add_option("--out", a->out,
                    "With --choices: write each item's log-likelihoods and picks here (JSONL); with --generate: each "
                    "item's completion, extracted answer and verdict");
    cmd->add_option("--batch-tokens", a->batch_tokens,
                    "With --choices: tokens per forward pass (also the longest sequence; longer contexts are cut "
                    "from the left)")
        ->capture_default_str();
    cmd->add_option("--limit", a->limit, "With --choices or --generate: the first N items only (0 = all)")
        ->capture_default_str();
    cmd->add_option("--seq", a->seq, "Tokens per sequence (the context each target sees at most)")
        ->capture_default_str();
    cmd->add_option("--batch", a->batch,
                    "Sequences per forward pass (per rank under mpirun; with --generate: completions decoded "
                    "together)")
        ->capture_default_str();
    cmd->add_option("--batches", a->batches, "Forward passes at most (0 = the whole split)")->capture_default_str();
    cmd->add_option("--by-position", a->by_position,
                    "Also the loss over K equal ranges of positions (0 = off; with --doc-mask, positions within "
                    "documents): how much of the context is used")
        ->capture_default_str();
    cmd->add_option("--rope-theta", a->rope_theta, "RoPE base of the full-attention layers (0 = the model's own)")
        ->capture_default_str();
    cmd->add_option("--device", a->device, "Where the forward passes run: cpu | cuda")->capture_default_str();
    cmd->add_option("--precision", a->precision, "Matmul operands: fp32 | bf16 (fp32 accumulation)")
        ->capture_default_str();
    cmd->add_flag("--doc-mask", a->doc_mask, "Cut sequences at each EOS, as `zaya train --doc-mask` trains");
    cmd->add_option("--pack", a->packing, "Rows: 'chunks' or whole 'documents', as `zaya train --pack` trains")
        ->capture_default_str();
    cmd->add_option("--context-parallel", a->context_parallel,
                    "Under mpirun: groups of N ranks share each sequence, 2 chunks of --seq/(2N) tokens per rank "
                    "(long contexts)")
        ->capture_default_str();
    cmd->add_flag("--json", a->json,
                  "Print one JSON object (loss, perplexity, tokens, batches, seconds; with --choices acc, acc_norm, "
                  "their standard errors, items; with --generate exact_match and its standard error)");
    cmd->callback([a] { run_eval_ranks(*a); });
}

} // namespace zaya::cli
