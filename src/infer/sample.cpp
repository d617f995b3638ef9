#include "infer/sample.h"

#include "core/error.h"
#include "core/rng.h"
#include "infer/logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zaya {

void SampleOptions::validate(int64_t vocab_size) const {
    if (max_new_tokens < 0) fail("max_tokens must be ≥ 0, got {}", max_new_tokens);
    if (!(temperature >= 0.0) || temperature > 100.0) fail("temperature must be in [0, 100], got {}", temperature);
    if (top_k < 0) fail("top_k must be ≥ 0, got {}", top_k);
    if (!(top_p > 0.0 && top_p <= 1.0)) fail("top_p must be in (0, 1], got {}", top_p);
    if (!(min_p >= 0.0 && min_p <= 1.0)) fail("min_p must be in [0, 1], got {}", min_p);
    if (!(repetition_penalty > 0.0) || repetition_penalty > 100.0)
        fail("repetition_penalty must be in (0, 100], got {}", repetition_penalty);
    for (const std::string &s : stop_strings)
        if (s.empty()) fail("stop strings must not be empty");
    if (!(frequency_penalty >= -2.0 && frequency_penalty <= 2.0))
        fail("frequency_penalty must be in [-2, 2], got {}", frequency_penalty);
    if (!(presence_penalty >= -2.0 && presence_penalty <= 2.0))
        fail("presence_penalty must be in [-2, 2], got {}", presence_penalty);
    for (const auto &[token, bias] : logit_bias) {
        if (token < 0) fail("logit_bias: token {} is not a token id", token);
        if (vocab_size > 0 && token >= vocab_size)
            fail("logit_bias: token {} is outside the vocabulary [0, {})", token, vocab_size);
        if (!(bias >= -100.0f && bias <= 100.0f))
            fail("logit_bias of token {} must be in [-100, 100], got {}", token, bias);
    }
    if (logprobs < -1 || logprobs > kMaxTopLogprobs)
        fail("logprobs must be in [-1, {}] (-1: none), got {}", kMaxTopLogprobs, logprobs);
    if (prompt_logprobs && logprobs < 0) fail("prompt log-probabilities need logprobs ≥ 0");
    if (!json_trigger.empty() && !json_schema) fail("a JSON trigger needs a JSON schema");
    if (trigger_reasoning && !json_mode()) fail("a reasoning block before the JSON needs JSON mode");
}

Sampler::Sampler(const SampleOptions &o, int64_t vocab_size)
    : o_(o), V_(vocab_size), rng_(o.seed), work_(size_t(vocab_size)), idx_(size_t(vocab_size)) {
    o_.validate(V_);
}

void Sampler::observe(int32_t token, bool generated) {
    if (o_.repetition_penalty != 1.0) seen_.insert(token);
    if (generated && (o_.frequency_penalty != 0 || o_.presence_penalty != 0)) ++generated_[token];
}

int32_t Sampler::sample(const float *logits) {
    float *w = work_.data();
    std::copy(logits, logits + V_, w);
    for (const auto &[t, bias] : o_.logit_bias) w[t] += bias;
    const float pen = float(o_.repetition_penalty);
    for (int32_t t : seen_)
        if (t >= 0 && t < V_) w[t] = w[t] > 0 ? w[t] / pen : w[t] * pen;
    for (const auto &[t, count] : generated_)
        if (t >= 0 && t < V_) w[t] -= float(o_.frequency_penalty * double(count) + o_.presence_penalty);
    if (o_.temperature <= 0) return int32_t(std::max_element(w, w + V_) - w);

    // Candidates sorted by logit (ties: lower id first), cut by top-k.
    int32_t *idx = idx_.data();
    std::iota(idx, idx + V_, 0);
    auto by_logit = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
    int64_t n = o_.top_k > 0 ? std::min(o_.top_k, V_) : V_;
    if (n < V_) std::partial_sort(idx, idx + n, idx + V_, by_logit);
    else if (o_.top_p < 1.0) std::sort(idx, idx + V_, by_logit);
    else std::swap(idx[0], idx[std::max_element(w, w + V_) - w]); // only the maximum must lead (for min-p)

    // Probabilities of the candidates at the temperature (in place of the logits), then top-p and min-p cuts.
    const double top = double(w[idx[0]]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        float &x = w[idx[i]];
        x = float(std::exp((double(x) - top) / o_.temperature));
        sum += x;
    }
    if (o_.top_p < 1.0) {
        double acc = 0;
        for (int64_t i = 0; i < n; ++i) {
            acc += w[idx[i]] / sum;
            if (acc >= o_.top_p) {
                n = i + 1;
                break;
            }
        }
    }
    double kept = 0;
    int64_t m = 0;
    const double floor = o_.min_p * double(w[idx[0]]); // the top candidate's weight is exp(0) = 1 before the cut
    for (int64_t i = 0; i < n; ++i)
        if (double(w[idx[i]]) >= floor) {
            idx[m++] = idx[i];
            kept += w[idx[i]];
        }
    double u = double(splitmix64(rng_) >> 11) * 0x1.0p-53 * kept;
    for (int64_t i = 0; i < m; ++i) {
        u -= w[idx[i]];
        if (u < 0) return idx[i];
    }
    // Rounding left u ≥ 0: the last candidate of positive weight (a token at −∞, as JSON mode masks them, has none).
    while (m > 1 && !(w[idx[m - 1]] > 0)) --m;
    return idx[m - 1];
}

} // namespace zaya
