// zaya bench forward|train|gemm|checkpoint — throughput next to the machine's measured ceilings, taken in the
// same run (SGEMM peak; for checkpoints, disk write bandwidth: bench_checkpoint.cpp).
#include "cli/bench.h"
#include "cli/commands.h"
#include "cli/infer_args.h"
#include "cli/model_arg.h"
#include "core/clock.h"
#include "core/error.h"
#include "ops/backend.h"
#include "model/flops.h"
#include "model/forward.h"
#include "ops/cpu/gemm.h"
#include "train/memory.h"
#include "train/trainer.h"

#include <algorithm>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <vector>

namespace zaya::cli {

namespace {

// --phases: one more step with phase timing on (Backend::phase: device time where the step runs on a GPU), as a
// table of the phases by time, or as JSON entries; the marks' own cost (an event each) is in the step's time.
nlohmann::json phase_step(Trainer &trainer, RandomTokens &next, bool json) {
    Backend &be = trainer.backend();
    be.set_phase_timing(true);
    const double seconds = trainer.step_on(std::ref(next)).seconds;
    std::vector<PhaseTime> phases = be.phase_report();
    be.set_phase_timing(false);
    std::stable_sort(phases.begin(), phases.end(),
                     [](const PhaseTime &x, const PhaseTime &y) { return x.seconds > y.seconds; });
    nlohmann::json j = nlohmann::json::array();
    double timed = 0;
    for (const PhaseTime &p : phases) {
        j.push_back({{"phase", p.name}, {"seconds", p.seconds}, {"marks", p.marks}});
        timed += p.seconds;
    }
    if (json) return j;
    fmt::print("  phases of one more step ({:.3f} s; {:.3f} s between its first and last mark):\n", seconds, timed);
    fmt::print("    {:<22} {:>10} {:>7} {:>7}\n", "phase", "ms", "%", "marks");
    for (const PhaseTime &p : phases)
        fmt::print("    {:<22} {:>10.2f} {:>6.1f}% {:>7}\n", p.name, 1e3 * p.seconds, 100 * p.seconds / timed, p.marks);
    return j;
}

// On a GPU: whole training steps (forward, backward, gradient norm, Muon and AdamW, balancing) and, apart, forward +
// backward alone, each the median after one warm-up: model FLOPs over H200's dense bf16 peak (989 TFLOP/s; the
// device's measured matrix rate is zaya_cuda_bench's).
void bench_device_train(const BenchArgs &a, const TrainConfig &tc, const ZayaConfig &c, Trainer &trainer,
                        RandomTokens &next) {
    constexpr double kH200DenseBf16 = 989e12;
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    trainer.step_on(std::ref(next)); // warm-up: allocations of the first pass and of Muon, cuBLASLt heuristics
    std::vector<double> steps, passes;
    for (int64_t i = 0; i < a.iters; ++i) steps.push_back(trainer.step_on(std::ref(next)).seconds);
    for (int64_t i = 0; i < a.iters; ++i) {
        const double t0 = monotonic_seconds();
        trainer.forward_backward_on(std::ref(next));
        passes.push_back(monotonic_seconds() - t0);
    }
    const double step_s = median(steps), fwd_bwd_s = median(passes), flops = trainer.flops_per_step();
    const double tok_s = double(tc.batch * tc.seq) / step_s, mfu = flops / step_s / kH200DenseBf16;
    const double mfu_fb = flops / fwd_bwd_s / kH200DenseBf16;
    const size_t peak_bytes = backend_named("cuda").peak_device_bytes();
    const std::vector<MemoryItem> plan = device_train_memory(c, tc.micro(), tc.seq, 1, tc.precision == "bf16");
    const size_t planned = total_bytes(plan);
    if (a.json) {
        nlohmann::json j = {{"model", a.model},       {"device", "cuda"},       {"batch", tc.batch},
                            {"micro_batch", tc.micro()}, {"seq", tc.seq},       {"median_step_s", step_s},
                            {"median_fwd_bwd_s", fwd_bwd_s}, {"tokens_per_s", tok_s}, {"mfu_989", mfu},
                            {"mfu_fwd_bwd_989", mfu_fb}, {"precision", tc.precision},
                            {"peak_device_bytes", peak_bytes}, {"planned_device_bytes", planned}};
        for (const MemoryItem &i : plan) j["planned_device_items"][i.name] = i.bytes;
        if (a.phases) j["phases"] = phase_step(trainer, next, true);
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("train step  model {}  device cuda  batch {} (micro {}) × {} tokens  matmuls {}  {} steps after 1 "
               "warm-up\n",
               a.model, tc.batch, tc.micro(), tc.seq, tc.precision, a.iters);
    fmt::print("  median {:.3f} s/step   {:.0f} tokens/s   {:.1f} TFLOP/s model FLOPs = MFU {:.1f}% of 989 TFLOP/s "
               "(H200 dense bf16)\n",
               step_s, tok_s, flops / step_s / 1e12, 100 * mfu);
    fmt::print("  forward+backward alone: {:.3f} s = MFU {:.1f}%; the rest (norm, optimizer, balancing): {:.3f} s\n",
               fwd_bwd_s, 100 * mfu_fb, step_s - fwd_bwd_s);
    fmt::print("  GPU memory: peak {:.1f} MiB of zaya's allocations, planned {:.1f} MiB (zaya info --train --device "
               "cuda; {:+.1f}%)\n",
               double(peak_bytes) / (1 << 20), double(planned) / (1 << 20),
               100.0 * (double(peak_bytes) / double(planned) - 1));
    if (a.phases) phase_step(trainer, next, false);
}

void bench_train(const BenchArgs &a) {
    const size_t base_rss = process_rss_bytes();
    Model m = load_or_create_model(a.model, 1234);
    TrainConfig tc;
    tc.batch = a.batch;
    tc.micro_batch = a.micro_batch;
    tc.seq = a.seq_len;
    tc.steps = a.iters + 1;
    tc.warmup = 1;
    tc.ns_precision = a.ns_precision;
    tc.precision = a.precision == "auto" ? "fp32" : a.precision;
    tc.device = a.device;
    tc.validate_precisions();
    if (tc.micro() > tc.batch || tc.batch % tc.micro() != 0)
        fail("--micro-batch ({}) must divide --batch ({})", tc.micro(), tc.batch);
    const ZayaConfig c = m.config;
    Trainer trainer(tc, std::move(m), nullptr);
    RandomTokens next(tc.seq, c.vocab_size);
    if (a.device == "cuda") return bench_device_train(a, tc, c, trainer, next);
    trainer.step_on(std::ref(next)); // warm-up: first-touch of every buffer, GEMM kernel generation
    std::vector<double> times;
    for (int64_t i = 0; i < a.iters; ++i) times.push_back(trainer.step_on(std::ref(next)).seconds);
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    const size_t rss = process_peak_rss_bytes(); // before the SGEMM measurement's own buffers
    const cpu::MatmulPrecision prec = cpu::matmul_precision_from_string(tc.precision);
    const double peak = cpu::matmul_peak_gflops(prec, a.gemm_n, 3);
    const double tok_s = double(tc.batch * tc.seq) / t, gflops = trainer.flops_per_step() / t / 1e9;
    const double mfu = gflops / peak;
    const size_t planned = train_memory(c, tc.micro(), tc.seq, 1, ns_precision_from_string(tc.ns_precision), 0,
                                        prec == cpu::MatmulPrecision::BF16)
                               .total() +
                           base_rss;
    if (a.json) {
        nlohmann::json j = {{"model", a.model},       {"batch", tc.batch},       {"micro_batch", tc.micro()},
                            {"seq", tc.seq},          {"threads", omp_get_max_threads()}, {"median_step_s", t},
                            {"tokens_per_s", tok_s},  {"gflops", gflops},        {"matmul_peak_gflops", peak},
                            {"mfu", mfu},             {"planned_memory_bytes", planned}, {"peak_rss_bytes", rss},
                            {"ns_precision", tc.ns_precision}, {"precision", tc.precision}};
        if (a.phases) j["phases"] = phase_step(trainer, next, true);
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("train step  model {}  batch {} (micro {}) × {} tokens  {} threads  matmuls {}  Muon NS {}  {} steps "
               "after 1 warm-up\n",
               a.model, tc.batch, tc.micro(), tc.seq, omp_get_max_threads(), tc.precision, tc.ns_precision, a.iters);
    fmt::print("  median {:.3f} s/step   {:.0f} tokens/s   {:.1f} GFLOP/s model FLOPs (fwd+bwd)\n", t, tok_s, gflops);
    fmt::print("  MFU {:.1f}% of the {} peak measured now ({}, {}^3: {:.1f} GFLOP/s)\n", 100 * mfu,
               prec == cpu::MatmulPrecision::BF16 ? "bf16 matmul" : "SGEMM",
               prec == cpu::MatmulPrecision::BF16 ? "oneDNN" : cpu::gemm_lib_name(cpu::gemm_default_lib()),
               a.gemm_n, peak);
    fmt::print("  memory: planned {:.1f} MiB (zaya info --train), peak RSS {:.1f} MiB ({:+.1f}%)\n",
               double(planned) / (1 << 20), double(rss) / (1 << 20), 100.0 * (double(rss) / double(planned) - 1));
    if (a.phases) phase_step(trainer, next, false);
}

void bench_gemm(const BenchArgs &a) {
    double dnnl = cpu::gemm_peak_gflops(cpu::GemmLib::OneDNN, a.gemm_n, 5);
    double oblas = cpu::gemm_peak_gflops(cpu::GemmLib::OpenBLAS, a.gemm_n, 5);
    if (a.json) {
        nlohmann::json j = {{"n", a.gemm_n}, {"threads", omp_get_max_threads()}, {"onednn_gflops", dnnl},
                            {"openblas_gflops", oblas}};
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("SGEMM {0}x{0}x{0} (C = A·Bᵀ), {1} threads, best of 5\n", a.gemm_n, omp_get_max_threads());
    fmt::print("  oneDNN    {:8.1f} GFLOP/s\n", dnnl);
    fmt::print("  OpenBLAS  {:8.1f} GFLOP/s\n", oblas);
    fmt::print("zaya uses {} (set ZAYA_GEMM=openblas to switch)\n", cpu::gemm_lib_name(cpu::gemm_default_lib()));
}

void bench_forward(const BenchArgs &a) {
    Model m = load_or_create_model(a.model, 1234);
    std::vector<std::vector<int32_t>> seqs(size_t(a.batch));
    uint64_t x = 42;
    for (auto &s : seqs)
        for (int64_t t = 0; t < a.seq_len; ++t) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s.push_back(int32_t((x >> 33) % uint64_t(m.config.vocab_size)));
        }
    Batch batch = Batch::from_sequences(seqs);
    Backend &be = backend_named(a.device);
    std::optional<Model> on_device;
    if (!be.host_memory()) on_device.emplace(model_on(m, be));
    const Model &run = on_device ? *on_device : m;
    Activations acts = Activations::plan(m.config, batch.num_tokens(), batch.num_sequences(), false, be);
    model_forward(run, batch, acts); // warm-up
    be.synchronize();
    std::vector<double> times;
    for (int64_t i = 0; i < a.iters; ++i) {
        double t0 = monotonic_seconds();
        model_forward(run, batch, acts);
        be.synchronize();
        times.push_back(monotonic_seconds() - t0);
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2]; // median
    const double flops = forward_flops(m.config, std::vector<int64_t>(size_t(a.batch), a.seq_len));
    const double tok_s = double(batch.num_tokens()) / t, gflops = flops / t / 1e9;
    if (on_device) { // forward only, fp32 matmuls: model FLOPs per second is the figure
        fmt::print("forward  model {}  device cuda  batch {} x {} tokens: median {:.4f} s  {:.0f} tokens/s  "
                   "{:.1f} TFLOP/s\n",
                   a.model, a.batch, a.seq_len, t, tok_s, gflops / 1e3);
        return;
    }
    const double peak = cpu::gemm_peak_gflops(cpu::gemm_default_lib(), a.gemm_n, 3);
    if (a.json) {
        nlohmann::json j = {{"model", a.model}, {"tokens", batch.num_tokens()}, {"seq_len", a.seq_len},
                            {"batch", a.batch}, {"threads", omp_get_max_threads()}, {"median_s", t},
                            {"tokens_per_s", tok_s}, {"gflops", gflops}, {"sgemm_peak_gflops", peak},
                            {"fraction_of_sgemm_peak", gflops / peak}};
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("forward  model {}  batch {} x {} tokens  {} threads  {} iterations\n", a.model, a.batch, a.seq_len,
               omp_get_max_threads(), a.iters);
    fmt::print("  median {:.3f} s   {:.0f} tokens/s   {:.1f} GFLOP/s ({:.2f} GFLOP per pass)\n", t, tok_s, gflops,
               flops / 1e9);
    fmt::print("  SGEMM peak measured now ({}, {}^3): {:.1f} GFLOP/s  →  forward runs at {:.0f}% of it\n",
               cpu::gemm_lib_name(cpu::gemm_default_lib()), a.gemm_n, peak, 100.0 * gflops / peak);
}

} // namespace

TokenBatch RandomTokens::operator()(int64_t rows) {
    TokenBatch b;
    b.sequences = rows;
    b.seq_len = seq_;
    b.tokens.resize(size_t(rows * (seq_ + 1)));
    for (auto &t : b.tokens) {
        x_ = x_ * 6364136223846793005ull + 1442695040888963407ull;
        t = int32_t((x_ >> 33) % uint64_t(vocab_));
    }
    return b;
}

void register_bench(CLI::App &app) {
    auto *cmd = app.add_subcommand("bench", "Measure speed: 'forward', 'train' (tokens/s, GFLOP/s, MFU vs the SGEMM "
                                            "peak measured in the same run), 'gemm', 'checkpoint' (blocked time "
                                            "and write speed vs the disk's measured bandwidth), or 'decode' (cached "
                                            "decoding vs the memory-bandwidth bound measured in the same run)");
    auto a = std::make_shared<BenchArgs>();
    cmd->add_option("what", a->what, "forward | train | gemm | checkpoint | decode")
        ->required()
        ->check(CLI::IsMember({"forward", "train", "gemm", "checkpoint", "decode"}));
    cmd->add_option("--model", a->model, "Preset or model directory")->capture_default_str();
    cmd->add_option("--seq-len,--seq", a->seq_len, "Tokens per sequence")->check(CLI::PositiveNumber)->capture_default_str();
    cmd->add_option("--micro-batch", a->micro_batch, "train: sequences per forward/backward (0 = batch)")->capture_default_str();
    cmd->add_option("--batch", a->batch, "Sequences per forward pass")->check(CLI::PositiveNumber)->capture_default_str();
    cmd->add_option("--iters", a->iters, "Timed iterations (median reported)")->check(CLI::PositiveNumber)->capture_default_str();
    cmd->add_option("--gemm-n", a->gemm_n, "Size of the square SGEMM used as the peak")->check(CLI::PositiveNumber)->capture_default_str();
    cmd->add_option("--dir", a->dir, "checkpoint: directory to write in (a temporary subdirectory, removed after)")
        ->capture_default_str();
    cmd->add_option("--dtype", a->dtype, "decode, presets: weight dtype (bf16|f32)")->capture_default_str();
    cmd->add_option("--layers", a->layers, "decode, presets: keep the first N layers (0 = all)")->capture_default_str();
    add_quantize_option(cmd, a->quantize, "decode: ");
    cmd->add_option("--prompt-tokens", a->prompt_tokens, "decode: prompt length (prefill)")
        ->check(CLI::PositiveNumber)->capture_default_str();
    cmd->add_option("--new-tokens", a->new_tokens, "decode: tokens decoded one by one (median time reported)")
        ->check(CLI::PositiveNumber)->capture_default_str();
    cmd->add_option("--seqs", a->seqs,
                    "decode --device cuda: also time N sequences decoded together (GPU decoder slots, ≤ 8), and "
                    "their N prompts prefilled together (one pass when they fit one) and one by one")
        ->check(CLI::Range(1, 8))
        ->capture_default_str();
    add_kv_dtype_option(cmd, a->kv_dtype);
    cmd->add_option("--prefill-chunk", a->prefill_chunk,
                    "decode, cpu: prompt tokens per forward (0: as zaya generate feeds one prompt, up to 1024)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--speculative-tokens", a->speculative_tokens,
                    "decode, cpu: also time speculative steps (the last token and a draft of N, every row's logits, "
                    "the draft cut back) against a decode step: what drafts must be taken to pay (0 = no)")
        ->check(CLI::Range(int64_t(0), int64_t(64)))
        ->capture_default_str();
    cmd->add_flag("--batch-invariant", a->batch_invariant,
                  "decode, cpu: every op on its per-row path (as zaya serve --batch-invariant): what that costs");
    cmd->add_option("--context-tokens", a->context_tokens,
                    "decode --device cuda: also prefill a prompt of N tokens (GEMM passes) and time decoding after "
                    "it, where each step reads the KV cache too (0 = no)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    cmd->add_option("--ns-precision", a->ns_precision, "train: Muon Newton-Schulz precision (bf16|fp32)")
        ->capture_default_str();
    cmd->add_option("--precision", a->precision,
                    "train: matmul operands of forward/backward (auto = fp32, or bf16); decode: the rows the linears "
                    "take (auto: bf16 for a bf16 model, else fp32; cpu only)")
        ->capture_default_str();
    cmd->add_option("--device", a->device, "train, forward, decode: where the model runs (cpu|cuda)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->capture_default_str();
    cmd->add_flag("--json", a->json, "Print one JSON object instead of text");
    cmd->add_flag("--phases", a->phases,
                  "train: time one more step by phase (embedding, each layer's attention parts, router, experts, LM "
                  "head, gradient norm, Muon, AdamW; device time on a GPU) and print the phases by time");
    cmd->callback([a] {
        if (a->what == "gemm") bench_gemm(*a);
        else if (a->what == "train") bench_train(*a);
        else if (a->what == "checkpoint") bench_checkpoint(*a);
        else if (a->what == "decode") bench_decode(*a);
        else bench_forward(*a);
    });
}

} // namespace zaya::cli
