// Shared by the cached-decoding tests: feeding a sequence to a Decoder in chunks, the training forward's logits as the
// reference, and log-probabilities checked against them.
#pragma once
#include "core/rng.h"
#include "infer/decoder.h"
#include "infer/logprobs.h"
#include "model/forward.h"
#include "model/init.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace zaya::test {

// tiny, with one sliding-window layer (window 6, shorter than the test sequences), biases on the projections
// and random (not init-constant) residual scales, so every state path matters.
inline ZayaConfig decode_config(bool skip_passthrough = false) {
    ZayaConfig c = config_preset("tiny");
    c.attention_bias = true;
    c.layer_types = {LayerType::Hybrid, LayerType::HybridSliding};
    c.sliding_window = 6;
    c.skip_passthrough = skip_passthrough;
    c.initializer_range = 0.1; // logits of order 1, so a 1e-4 bound is tight
    c.validate();
    return c;
}

// Random weights with the 1/0-initialised vectors and the balancing biases perturbed too.
inline Model perturbed_model(const ZayaConfig &c, uint64_t seed) {
    Model m = Model::create(c);
    model_init_random(m, seed);
    Rng rng(seed + 1, 0);
    for (const ParamView &v : m.layout.views)
        if (v.shape.size() == 1)
            for (size_t i = 0; i < v.numel; ++i) m.params.data()[v.offset + i] += real(0.2 * rng.normal());
    return m;
}

inline std::vector<int32_t> random_tokens(int64_t n, int64_t V, uint64_t seed) {
    Rng rng(seed, 7);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto &x : t) x = int32_t(rng.next() % uint64_t(V));
    return t;
}

// The logits [T, V] of one sequence from the training forward pass: the reference the decoders are checked against.
inline std::vector<float> full_logits(const Model &m, const std::vector<int32_t> &tokens) {
    Batch b = Batch::from_sequences({tokens});
    Activations acts = Activations::plan(m.config, b.num_tokens(), 1, false);
    model_forward(m, b, acts);
    return std::vector<float>(acts.logits, acts.logits + b.num_tokens() * m.config.vocab_size);
}

// Feeds `tokens` to a fresh sequence in chunks of the given sizes (cycled), returning every position's logits.
inline std::vector<float> cached_logits(Decoder &dec, const std::vector<int32_t> &tokens,
                                        const std::vector<int64_t> &sizes) {
    const int64_t V = dec.model().config.vocab_size;
    SequenceCache seq = dec.new_sequence();
    std::vector<float> out(tokens.size() * size_t(V));
    size_t at = 0, k = 0;
    while (at < tokens.size()) {
        const size_t n = std::min(tokens.size() - at, size_t(sizes[k++ % sizes.size()]));
        std::span<const int32_t> chunk(tokens.data() + at, n);
        SequenceCache *s[1] = {&seq};
        const int64_t rows[1] = {int64_t(n)};
        dec.forward(s, std::span<const std::span<const int32_t>>(&chunk, 1), out.data() + at * size_t(V), rows);
        at += n;
    }
    EXPECT_EQ(seq.length, int64_t(tokens.size()));
    return out;
}

// log softmax(row)[t] in double, the reference.
inline double ref_logprob(const float *row, int64_t V, int32_t t) {
    double mx = row[0];
    for (int64_t i = 1; i < V; ++i) mx = std::max(mx, double(row[i]));
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(double(row[i]) - mx);
    return double(row[t]) - mx - std::log(sum);
}

// Entry j of `got` is tokens[first_token + j] with the log softmax of logits' row first_row + j (to 1e-4), and its
// `top` most likely tokens, most likely first.
inline void expect_logprobs_match(const std::vector<TokenLogprobs> &got, const std::vector<float> &logits, int64_t V,
                                  int64_t first_row, const std::vector<int32_t> &tokens, size_t first_token,
                                  int64_t top) {
    for (size_t j = 0; j < got.size(); ++j) {
        const float *row = logits.data() + (first_row + int64_t(j)) * V;
        EXPECT_EQ(got[j].token, tokens[first_token + j]);
        EXPECT_NEAR(got[j].logprob, ref_logprob(row, V, got[j].token), 1e-4) << "entry " << j;
        std::vector<double> ref(static_cast<size_t>(V));
        for (int64_t v = 0; v < V; ++v) ref[size_t(v)] = ref_logprob(row, V, int32_t(v));
        std::sort(ref.rbegin(), ref.rend());
        ASSERT_EQ(int64_t(got[j].top.size()), top);
        for (int64_t k = 0; k < top; ++k) {
            EXPECT_NEAR(got[j].top[size_t(k)].logprob, ref[size_t(k)], 1e-4) << "entry " << j << " top " << k;
            EXPECT_NEAR(got[j].top[size_t(k)].logprob, ref_logprob(row, V, got[j].top[size_t(k)].token), 1e-4);
        }
    }
}

} // namespace zaya::test
