// Shared by the cached-decoding tests: feeding a sequence to a Decoder in chunks.
#pragma once
#include "infer/decoder.h"
#include "model/forward.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace zaya::test {

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
