// Shared by the cached-decoding tests: feeding a sequence to a Decoder in chunks.
#pragma once
#include "core/rng.h"
#include "infer/decoder.h"
#include "model/forward.h"
#include "model/init.h"

#include <gtest/gtest.h>

#include <algorithm>
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
        dec.forward(s, std::span<const std::span<const int32_t>>(&chunk, 1), out.data() + at * size_t(V), true);
        at += n;
    }
    EXPECT_EQ(seq.length, int64_t(tokens.size()));
    return out;
}

} // namespace zaya::test
