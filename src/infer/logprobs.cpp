#include "infer/logprobs.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zaya {

TokenLogprobs token_logprobs(const float *logits, int64_t V, int32_t token, int64_t top, std::vector<int32_t> &idx) {
    if (token < 0 || token >= V) fail("token {} is outside the vocabulary [0, {})", token, V);
    // log Σ exp in double around the maximum: exact to fp32 for any V.
    const double mx = double(*std::max_element(logits, logits + V));
    double sum = 0;
    for (int64_t i = 0; i < V; ++i) sum += std::exp(double(logits[i]) - mx);
    const double lse = mx + std::log(sum);
    TokenLogprobs r;
    r.token = token;
    r.logprob = float(double(logits[token]) - lse);
    const int64_t k = std::min(top, V);
    if (k <= 0) return r;
    idx.resize(size_t(V));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    r.top.reserve(size_t(k));
    for (int64_t i = 0; i < k; ++i) r.top.push_back({idx[size_t(i)], float(double(logits[idx[size_t(i)]]) - lse)});
    return r;
}

} // namespace zaya
