// Token sampling and simple generation. This version recomputes the whole sequence for every new token (no KV
// cache): enough for a text sample at the end of training. Cached decoding is the inference engine's job.
#pragma once
#include "model/params.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace zaya {

struct SampleOptions {
    int64_t max_new_tokens = 128;
    double temperature = 0.8; // 0: greedy
    int64_t top_k = 40;       // 0: no top-k cut
    uint64_t seed = 1234;
    int32_t stop_token = -1;  // e.g. EOS; not emitted
};

// Draws one token from logits[V] (deterministic for a given rng state).
int32_t sample_token(const real *logits, int64_t V, const SampleOptions &o, uint64_t &rng_state);

// Extends `prompt` by up to max_new_tokens tokens (stopping at stop_token or the context limit); calls
// on_token for each new token as it is produced. Returns the new tokens.
std::vector<int32_t> generate_uncached(const Model &m, const std::vector<int32_t> &prompt, const SampleOptions &o,
                                       const std::function<void(int32_t)> &on_token = {});

} // namespace zaya
