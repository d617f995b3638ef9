// zaya bench decode — batch-1 cached decoding next to its memory-bandwidth bound, both measured in one run:
// bound = DRAM read bandwidth (measured now) ÷ bytes of weights one token reads (every non-expert matrix, one expert
// per layer, the LM head, one embedding row). Also prefill tokens/s.
#include "cli/bench.h"
#include "cli/infer_args.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/membw.h"
#include "infer/decoder.h"
#include "infer/engine_decoder.h"
#include "train/memory.h"

#include <algorithm>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <vector>

namespace zaya::cli {

void bench_decode(const BenchArgs &a) {
    if (a.device == "cuda") return bench_decode_cuda(a);
    // A generic reading first (a 1 GiB buffer), for reference.
    std::vector<double> generic = read_bandwidth_samples();
    std::sort(generic.begin(), generic.end());
    InferModelArgs ma;
    ma.model = a.model;
    ma.dtype = a.dtype;
    ma.layers = a.layers;
    ma.quantize = a.quantize;
    auto im = load_infer_model(ma);
    double t_touch = monotonic_seconds();
    const size_t touched = im->touch_all(); // mapped checkpoints: page everything in before timing anything
    t_touch = monotonic_seconds() - t_touch;
    const ZayaConfig &c = im->config;
    const int64_t V = c.vocab_size;
    if (a.prompt_tokens + a.new_tokens * (a.speculative_tokens > 0 ? 2 : 1) + a.speculative_tokens + 1 >
        c.max_position_embeddings)
        fail("--prompt-tokens + --new-tokens (twice with --speculative-tokens, and a draft) exceed the context length "
             "{}",
             c.max_position_embeddings);
    const DType kv = kv_dtype_for(a.kv_dtype, im->attention_dtype());
    const cpu::MatmulPrecision precision = matmul_precision_for(parse_infer_precision(a.precision), im->weight_dtype);
    // As `zaya generate` feeds a prompt (one sequence, nothing decoding beside it): up to kCpuSolePrefillChunk a step.
    const int64_t chunk = a.prefill_chunk > 0 ? a.prefill_chunk : cpu_sole_prompt_chunk(a.prompt_tokens);
    const int64_t K = a.speculative_tokens;
    Decoder dec(*im, std::max(chunk, 1 + K), 1, kv, precision, a.batch_invariant);
    std::vector<float> logits(static_cast<size_t>(V));
    std::vector<int32_t> prompt(size_t(a.prompt_tokens));
    uint64_t x = 42;
    const auto random_token = [&x, V] { // (a fixed LCG: every run feeds the same tokens)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        return int32_t((x >> 33) % uint64_t(V));
    };
    for (auto &t : prompt) t = random_token();
    { // warm-up: GEMM kernel generation, first touch of the scratch (and of mapped weights)
        SequenceCache w = dec.new_sequence();
        dec.prefill(w, std::span<const int32_t>(prompt.data(), std::min<size_t>(prompt.size(), 8)), logits.data());
        for (int i = 0; i < 2; ++i) {
            int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            dec.prefill(w, std::span<const int32_t>(&t, 1), logits.data());
        }
    }
    // The bound's bandwidth: streaming exactly the weights one token reads, in this process, before and after
    // decoding; the median of the readings, as the decode figure is a median too (this machine is shared, and on
    // it a plain buffer read varies from 30 to 60 GB/s with the process's libraries and placement).
    const std::vector<MemRegion> regions = im->per_token_regions();
    std::vector<double> bw_samples = read_bandwidth_samples(regions);
    SequenceCache seq = dec.new_sequence();
    double t0 = monotonic_seconds();
    dec.prefill(seq, prompt, logits.data());
    const double prefill_s = monotonic_seconds() - t0;
    std::vector<double> times;
    for (int64_t i = 0; i < a.new_tokens; ++i) {
        int32_t t = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        t0 = monotonic_seconds();
        dec.prefill(seq, std::span<const int32_t>(&t, 1), logits.data());
        times.push_back(monotonic_seconds() - t0);
    }
    std::sort(times.begin(), times.end());
    const double per_token = times[times.size() / 2];
    // Speculative steps (the engine's, EngineOptions::lookup): the last token and a draft of K fed with every row's
    // logits and the states inside the draft kept, then the draft cut back whole (none taken: the sequence grows a
    // token a step, as decoding). The draft's tokens are random, as distinct text routes to distinct experts.
    double per_spec_step = 0;
    if (K > 0) {
        std::vector<float> rows(size_t((1 + K) * V));
        std::vector<int32_t> step(size_t(1 + K));
        std::vector<double> spec_times;
        for (int64_t i = 0; i < a.new_tokens; ++i) {
            step[0] = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            for (int64_t k = 1; k <= K; ++k) step[size_t(k)] = random_token();
            SequenceCache *one[1] = {&seq};
            const std::span<const int32_t> chunk_span(step);
            const int64_t n_rows[1] = {1 + K};
            t0 = monotonic_seconds();
            seq.draft_from = seq.length + 1;
            dec.forward(one, std::span<const std::span<const int32_t>>(&chunk_span, 1), rows.data(), n_rows);
            seq.cut_back(seq.length - K);
            spec_times.push_back(monotonic_seconds() - t0);
            std::copy_n(rows.data(), V, logits.data());
        }
        std::sort(spec_times.begin(), spec_times.end());
        per_spec_step = spec_times[spec_times.size() / 2];
    }
    for (double b : read_bandwidth_samples(regions)) bw_samples.push_back(b);
    std::sort(bw_samples.begin(), bw_samples.end());
    const double bw = bw_samples[bw_samples.size() / 2], bw_best = bw_samples.back();
    const double decode_tps = 1.0 / per_token, prefill_tps = double(a.prompt_tokens) / prefill_s;
    const double bytes = double(im->bytes_per_token()), bound = bw / bytes;
    const size_t rss = process_peak_rss_bytes();
    if (a.json) {
        nlohmann::json j = {{"model", a.model},
                            {"layers", c.num_hidden_layers},
                            {"dtype", std::string(dtype_name(im->weight_dtype))},
                            {"threads", omp_get_max_threads()},
                            {"prompt_tokens", a.prompt_tokens},
                            {"new_tokens", a.new_tokens},
                            {"decode_tokens_per_s", decode_tps},
                            {"bound_tokens_per_s", bound},
                            {"fraction_of_bound", decode_tps / bound},
                            {"prefill_tokens_per_s", prefill_tps},
                            {"read_bandwidth_bytes_per_s", bw},
                            {"read_bandwidth_best_bytes_per_s", bw_best},
                            {"generic_read_bandwidth_bytes_per_s", generic[generic.size() / 2]},
                            {"decode_best_tokens_per_s", 1.0 / times.front()},
                            {"weights_paged_in_s", t_touch},
                            {"weight_bytes_per_token", bytes},
                            {"weight_bytes", im->matrix_bytes()},
                            {"kv_cache_bytes", seq.bytes()},
                            {"kv_dtype", std::string(dtype_name(kv))},
                            {"precision", cpu::matmul_precision_name(precision)},
                            {"prefill_chunk", chunk},
                            {"speculative_tokens", K},
                            {"speculative_step_s", per_spec_step},
                            {"batch_invariant", a.batch_invariant},
                            {"peak_rss_bytes", rss}};
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("decode  model {} ({} layers, {} weights {:.2f} GB, {} inputs{})  {} threads  prompt {} + {} new "
               "tokens\n",
               a.model, c.num_hidden_layers, dtype_name(im->weight_dtype), double(im->matrix_bytes()) / 1e9,
               cpu::matmul_precision_name(precision), a.batch_invariant ? ", batch-invariant" : "",
               omp_get_max_threads(), a.prompt_tokens, a.new_tokens);
    fmt::print("  weights paged in: {:.2f} GB in {:.1f} s\n", double(touched) / 1e9, t_touch);
    fmt::print("  decode  {:.2f} tokens/s (median {:.1f} ms/token; best {:.1f} ms)\n", decode_tps, 1e3 * per_token,
               1e3 * times.front());
    fmt::print("  bound   {:.2f} tokens/s = {:.1f} MB of weights per token ÷ {:.1f} GB/s, the speed of streaming those "
               "weights (median of {} readings now; best {:.1f}; a plain 1 GiB buffer: {:.1f})\n",
               bound, bytes / 1e6, bw / 1e9, bw_samples.size(), bw_best / 1e9, generic[generic.size() / 2] / 1e9);
    fmt::print("  decode runs at {:.0f}% of the bound\n", 100.0 * decode_tps / bound);
    fmt::print("  prefill {:.1f} tokens/s ({} tokens in {:.2f} s, {} per forward)\n", prefill_tps, a.prompt_tokens,
               prefill_s, chunk);
    if (K > 0) {
        const double r = per_spec_step / per_token;
        fmt::print("  speculative step (last token + {} drafted, every row's logits, the draft cut back) {:.1f} ms = "
                   "{:.2f}x a decode step: drafts pay where a step takes more than {:.2f} of them; all {} taken: "
                   "{:.2f}x decode's tokens/s\n",
                   K, 1e3 * per_spec_step, r, r - 1, K, double(K + 1) / r);
    }
    fmt::print("  KV cache ({}) {:.1f} KiB for {} tokens; peak RSS {:.1f} MiB\n", dtype_name(kv),
               double(seq.bytes()) / 1024, seq.length, double(rss) / (1 << 20));
}

} // namespace zaya::cli
