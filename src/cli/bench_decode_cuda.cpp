// zaya bench decode --device cuda — batch-1 cached decoding on the GPU (infer/cuda_decoder.h) next to its
// memory-bandwidth bound, both measured in one run: bound = the device's read bandwidth (a kernel streaming a
// 1 GiB buffer, far past the L2) ÷ bytes of weights one token reads (InferModel::bytes_per_token). Also prefill
// tokens/s and model FLOP/s (a prompt longer than 8 tokens runs as GEMM passes). The decode steps are greedy with
// the argmax on the device (4 bytes downloaded per token, as `zaya generate --device cuda --temperature 0`); a second
// pass downloads every step's logits (what sampling needs) and is reported next to it. With --context-tokens N, decoding
// after an N-token prompt too, where each step also reads the KV cache (its bound counts those bytes). Without a
// usable GPU (or a build without CUDA) it fails, saying why.
#include "cli/bench.h"
#include "cli/infer_args.h"
#include "core/clock.h"
#include "core/error.h"
#include "infer/cuda_decoder.h"
#include "infer/engine_decoder.h"
#include "model/flops.h"

#include <algorithm>
#include <fmt/format.h>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

namespace zaya::cli {

namespace {

// n prompt tokens from a fixed-seed generator: every run decodes the same prompt.
std::vector<int32_t> random_prompt(int64_t n, int64_t V, uint64_t seed) {
    std::vector<int32_t> prompt(static_cast<size_t>(n));
    uint64_t x = seed;
    for (auto &t : prompt) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        t = int32_t((x >> 33) % uint64_t(V));
    }
    return prompt;
}

// Bytes of KV cache a decode step reads with `context` tokens cached: each layer's keys and values of the new
// token's visible positions (a sliding layer's window at most).
double kv_bytes_read(const ZayaConfig &c, int64_t context, DType kv) {
    double bytes = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const bool sliding = c.layer_types[size_t(l)] == LayerType::HybridSliding && c.sliding_window;
        const int64_t keys = sliding ? std::min(context + 1, *c.sliding_window) : context + 1;
        bytes += 2.0 * double(keys) * double(c.kv_dim()) * double(dtype_size(kv));
    }
    return bytes;
}

// --seqs N: the N prompts prefilled one by one, and together (CudaDecoder::prefill of several slots).
struct BatchPrefill {
    double one_by_one_s = 0, together_s = 0;
    int64_t passes = 0; // passes over the weights the prefill together took
};

// A prefill's model FLOPs: the forward of n tokens, the LM head on the last one only.
double prefill_flops(const ZayaConfig &c, int64_t n) {
    return forward_flops(c, {n}) - 2.0 * double(n - 1) * double(c.hidden_size) * double(c.vocab_size);
}

struct LongContext {
    double prefill_s = 0, step_s = 0, kv_bytes = 0;
};

// Decoding after a prompt of a.context_tokens (its own one-slot decoder): the prompt's prefill in GEMM passes (after
// a warm-up on its first two passes' worth of tokens: cuBLASLt's choices for the pass shapes), then the median of
// a.new_tokens greedy steps, each reading the whole cache (sliding layers their window).
LongContext bench_long_context(const InferModel &im, const BenchArgs &a, CudaDecoder::Options o) {
    const ZayaConfig &c = im.config;
    const int64_t n = a.context_tokens;
    if (n + a.new_tokens + 1 > c.max_position_embeddings)
        fail("--context-tokens + --new-tokens exceed the context length {}", c.max_position_embeddings);
    o.max_len = n + a.new_tokens + 1;
    o.max_seqs = 1;
    CudaDecoder dec(im, o);
    const std::vector<int32_t> prompt = random_prompt(n, c.vocab_size, 7);
    const int64_t warm = std::min<int64_t>(n, std::max<int64_t>(2 * o.prefill_chunk, 16));
    dec.prefill_greedy(std::span(prompt).first(size_t(warm)));
    dec.reset();
    LongContext r;
    double t0 = monotonic_seconds();
    int32_t next = dec.prefill_greedy(prompt);
    r.prefill_s = monotonic_seconds() - t0;
    std::vector<double> times;
    for (int64_t i = 0; i < a.new_tokens; ++i) {
        t0 = monotonic_seconds();
        next = dec.step_greedy(next);
        times.push_back(monotonic_seconds() - t0);
    }
    std::sort(times.begin(), times.end());
    r.step_s = times[times.size() / 2];
    r.kv_bytes = kv_bytes_read(c, n + a.new_tokens / 2, dec.kv_dtype()); // at the median step
    return r;
}

} // namespace

void bench_decode_cuda(const BenchArgs &a) {
    InferModelArgs ma;
    ma.model = a.model;
    ma.dtype = a.dtype;
    ma.layers = a.layers;
    auto im = load_infer_model(ma);
    const cpu::MatmulPrecision rows = gpu_matmul_precision(parse_infer_precision(a.precision), im->weight_dtype);
    const ZayaConfig &c = im->config;
    const int64_t V = c.vocab_size;
    if (a.prompt_tokens + a.new_tokens + 1 > c.max_position_embeddings)
        fail("--prompt-tokens + --new-tokens exceed the context length {}", c.max_position_embeddings);
    CudaDecoder::Options o;
    o.max_len = a.prompt_tokens + a.new_tokens + 1;
    o.kv_dtype = a.kv_dtype;
    auto decoder = std::make_unique<CudaDecoder>(*im, o); // batch 1: one slot
    CudaDecoder &dec = *decoder;
    const DType kv = dec.kv_dtype();
    std::vector<float> logits(static_cast<size_t>(V));
    const std::vector<int32_t> prompt = random_prompt(a.prompt_tokens, V, 42);
    auto greedy = [&] { return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()); };
    { // warm-up: module loading, first launches, cuBLASLt's choice of algorithms for the prompt's GEMM passes
        dec.prefill(prompt, logits.data());
        for (int i = 0; i < 2; ++i) dec.step(greedy(), logits.data());
        dec.reset();
    }
    std::vector<double> bw_samples;
    for (int i = 0; i < 5; ++i) bw_samples.push_back(CudaDecoder::measure_read_bandwidth(size_t(1) << 30, 1));
    // Prefill: the best of three (the first token's latency, prompt to greedy token).
    double t0 = 0, prefill_s = 1e30;
    int32_t next = 0;
    for (int i = 0; i < 3; ++i) {
        dec.reset();
        t0 = monotonic_seconds();
        next = dec.prefill_greedy(prompt);
        prefill_s = std::min(prefill_s, monotonic_seconds() - t0);
    }
    std::vector<double> times, times_logits;
    for (int64_t i = 0; i < a.new_tokens; ++i) {
        t0 = monotonic_seconds();
        next = dec.step_greedy(next);
        times.push_back(monotonic_seconds() - t0);
    }
    dec.reset();
    dec.prefill(prompt, logits.data());
    for (int64_t i = 0; i < a.new_tokens; ++i) {
        const int32_t t = greedy();
        t0 = monotonic_seconds();
        dec.step(t, logits.data());
        times_logits.push_back(monotonic_seconds() - t0);
    }
    const size_t step_kernels = dec.step_kernels(), weight_bytes = dec.weight_bytes();
    // The same greedy steps with the graph captured again, its kernels launched the ordinary way: what programmatic
    // dependent launch buys (when the device has it).
    std::vector<double> times_plain;
    const bool pdl = dec.dependent_launch();
    if (pdl) {
        dec.set_dependent_launch(false);
        dec.reset();
        next = dec.prefill_greedy(prompt);
        next = dec.step_greedy(next); // captures
        for (int64_t i = 0; i < a.new_tokens; ++i) {
            t0 = monotonic_seconds();
            next = dec.step_greedy(next);
            times_plain.push_back(monotonic_seconds() - t0);
        }
        std::sort(times_plain.begin(), times_plain.end());
    }
    // seqs > 1: a decoder with that many slots (the batch-1 one freed first), every slot prefilled with its own
    // prompt (the same tokens shifted) one by one, then all together (one call: one GEMM pass when they fit one, as
    // the engine feeds prompts arriving together), each the best of two; then stepped together, greedy.
    std::vector<double> times_batch;
    BatchPrefill bp;
    if (a.seqs > 1) {
        decoder.reset();
        o.max_seqs = a.seqs;
        CudaDecoder batch(*im, o);
        std::vector<std::vector<int32_t>> prompts;
        std::vector<std::span<const int32_t>> chunks;
        std::vector<int64_t> slots;
        for (int64_t s = 0; s < a.seqs; ++s) {
            prompts.push_back(prompt);
            for (auto &t : prompts.back()) t = int32_t((int64_t(t) + s) % V);
            slots.push_back(s);
        }
        for (const auto &p : prompts) chunks.emplace_back(p);
        std::vector<int32_t> next_tokens(size_t(a.seqs));
        bp.one_by_one_s = bp.together_s = 1e30;
        for (int rep = 0; rep < 2; ++rep) {
            batch.reset();
            t0 = monotonic_seconds();
            for (int64_t s = 0; s < a.seqs; ++s) next_tokens[size_t(s)] = batch.prefill_greedy(s, prompts[size_t(s)]);
            bp.one_by_one_s = std::min(bp.one_by_one_s, monotonic_seconds() - t0);
            batch.reset();
            const int64_t passes = batch.passes();
            t0 = monotonic_seconds();
            batch.prefill(slots, chunks, nullptr, next_tokens.data());
            bp.together_s = std::min(bp.together_s, monotonic_seconds() - t0);
            bp.passes = batch.passes() - passes;
        }
        for (int64_t i = 0; i < a.new_tokens; ++i) {
            t0 = monotonic_seconds();
            batch.step(next_tokens, nullptr, next_tokens.data());
            times_batch.push_back(monotonic_seconds() - t0);
        }
        std::sort(times_batch.begin(), times_batch.end());
    }
    const double batch_step = times_batch.empty() ? 0.0 : times_batch[times_batch.size() / 2];
    decoder.reset(); // --context-tokens: its own decoder, the others freed first
    const LongContext lc = a.context_tokens > 0 ? bench_long_context(*im, a, o) : LongContext{};
    std::sort(times.begin(), times.end());
    std::sort(times_logits.begin(), times_logits.end());
    const double logits_tps = 1.0 / times_logits[times_logits.size() / 2];
    std::sort(bw_samples.begin(), bw_samples.end());
    const double per_token = times[times.size() / 2], bw = bw_samples[bw_samples.size() / 2];
    const double decode_tps = 1.0 / per_token, prefill_tps = double(a.prompt_tokens) / prefill_s;
    const double flops = prefill_flops(c, a.prompt_tokens);
    const double bytes = double(im->bytes_per_token()), bound = bw / bytes;
    // --context-tokens: the bound counts the cache's bytes too.
    const double lc_flops = lc.prefill_s > 0 ? prefill_flops(c, a.context_tokens) / lc.prefill_s : 0.0;
    const double lc_tps = lc.step_s > 0 ? 1.0 / lc.step_s : 0.0, lc_bound = bw / (bytes + lc.kv_bytes);
    const double plain_tps = times_plain.empty() ? 0.0 : 1.0 / times_plain[times_plain.size() / 2];
    if (a.json) {
        nlohmann::json j = {{"model", a.model},
                            {"device", CudaDecoder::device_description()},
                            {"layers", c.num_hidden_layers},
                            {"dtype", std::string(dtype_name(im->weight_dtype))},
                            {"kv_dtype", std::string(dtype_name(kv))},
                            {"precision", cpu::matmul_precision_name(rows)},
                            {"prompt_tokens", a.prompt_tokens},
                            {"new_tokens", a.new_tokens},
                            {"decode_tokens_per_s", decode_tps},
                            {"bound_tokens_per_s", bound},
                            {"fraction_of_bound", decode_tps / bound},
                            {"prefill_tokens_per_s", prefill_tps},
                            {"prefill_s", prefill_s},
                            {"prefill_flops_per_s", flops / prefill_s},
                            {"read_bandwidth_bytes_per_s", bw},
                            {"read_bandwidth_best_bytes_per_s", bw_samples.back()},
                            {"decode_best_tokens_per_s", 1.0 / times.front()},
                            {"decode_with_logits_tokens_per_s", logits_tps},
                            {"step_kernels", step_kernels},
                            {"dependent_launch", pdl},
                            {"decode_without_pdl_tokens_per_s", plain_tps},
                            {"seqs", a.seqs},
                            {"batch_step_s", batch_step},
                            {"batch_decode_tokens_per_s", batch_step > 0 ? double(a.seqs) / batch_step : 0.0},
                            {"batch_prefill_s", bp.together_s},
                            {"batch_prefill_passes", bp.passes},
                            {"batch_prefill_one_by_one_s", bp.one_by_one_s},
                            {"weight_bytes_per_token", bytes},
                            {"device_weight_bytes", weight_bytes},
                            {"context_tokens", a.context_tokens},
                            {"context_prefill_s", lc.prefill_s},
                            {"context_prefill_flops_per_s", lc_flops},
                            {"context_decode_tokens_per_s", lc_tps},
                            {"context_kv_bytes_per_token", lc.kv_bytes},
                            {"context_bound_tokens_per_s", a.context_tokens > 0 ? lc_bound : 0.0}};
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("decode  model {} ({} layers, {} weights {:.2f} GB on the device, {} KV cache)  {}  prompt {} + {} "
               "new tokens\n",
               a.model, c.num_hidden_layers, dtype_name(im->weight_dtype), double(weight_bytes) / 1e9,
               dtype_name(kv), CudaDecoder::device_description(), a.prompt_tokens, a.new_tokens);
    fmt::print("  decode  {:.2f} tokens/s greedy on the device (median {:.3f} ms/token; best {:.3f} ms); {:.2f} "
               "tokens/s downloading every step's logits\n",
               decode_tps, 1e3 * per_token, 1e3 * times.front(), logits_tps);
    fmt::print("  bound   {:.2f} tokens/s = {:.1f} MB of weights per token ÷ {:.1f} GB/s device read bandwidth "
               "(median of {} readings of 1 GiB; best {:.1f})\n",
               bound, bytes / 1e6, bw / 1e9, bw_samples.size(), bw_samples.back() / 1e9);
    fmt::print("  decode runs at {:.0f}% of the bound; a step is one graph of {} kernels ({:.2f} µs per kernel)\n",
               100.0 * decode_tps / bound, step_kernels, 1e6 * per_token / double(std::max<size_t>(step_kernels, 1)));
    if (pdl)
        fmt::print("  the step's kernels launched with programmatic dependent launch; without it {:.2f} tokens/s (PDL "
                   "gives {:.2f}×)\n",
                   plain_tps, decode_tps / plain_tps);
    else fmt::print("  the step's kernels launched without programmatic dependent launch (sm_90+, ZAYA_CUDA_PDL≠0)\n");
    fmt::print("  prefill {:.1f} tokens/s ({} tokens in {:.3f} s, best of 3; {:.1f} TFLOP/s of model FLOPs)\n",
               prefill_tps, a.prompt_tokens, prefill_s, flops / prefill_s / 1e12);
    if (a.seqs > 1) {
        fmt::print("  {} sequences together: {:.3f} ms a step = {:.1f} tokens/s in all ({:.2f}× batch 1)\n", a.seqs,
                   1e3 * batch_step, double(a.seqs) / batch_step, double(a.seqs) / batch_step / decode_tps);
        fmt::print("  their {} prompts together: {:.3f} ms in {} pass{} = {:.0f} tokens/s; one by one {:.3f} ms "
                   "({:.2f}×)\n",
                   a.seqs, 1e3 * bp.together_s, bp.passes, bp.passes == 1 ? "" : "es",
                   double(a.seqs * a.prompt_tokens) / bp.together_s, 1e3 * bp.one_by_one_s,
                   bp.one_by_one_s / bp.together_s);
    }
    if (a.context_tokens > 0)
        fmt::print("  after {} tokens of context: prefill {:.0f} tokens/s ({:.2f} s, {:.1f} TFLOP/s); decode {:.2f} "
                   "tokens/s = {:.0f}% of {:.2f} (the weights + {:.1f} MB of {} KV cache per token)\n",
                   a.context_tokens, double(a.context_tokens) / lc.prefill_s, lc.prefill_s, lc_flops / 1e12, lc_tps,
                   100.0 * lc_tps / lc_bound, lc_bound, lc.kv_bytes / 1e6, dtype_name(kv));
}

} // namespace zaya::cli
