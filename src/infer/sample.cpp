#include "infer/sample.h"

#include "core/error.h"
#include "core/rng.h"
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zaya {

int32_t sample_token(const real *logits, int64_t V, const SampleOptions &o, uint64_t &rng_state) {
    if (o.temperature <= 0) return int32_t(std::max_element(logits, logits + V) - logits);
    std::vector<int32_t> idx(static_cast<size_t>(V));
    std::iota(idx.begin(), idx.end(), 0);
    int64_t k = o.top_k > 0 ? std::min(o.top_k, V) : V;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    const double m = double(logits[idx[0]]);
    std::vector<double> p(static_cast<size_t>(k));
    double sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += p[size_t(i)] = std::exp((double(logits[idx[size_t(i)]]) - m) / o.temperature);
    double u = double(splitmix64(rng_state) >> 11) * 0x1.0p-53 * sum;
    for (int64_t i = 0; i < k; ++i) {
        u -= p[size_t(i)];
        if (u <= 0) return idx[size_t(i)];
    }
    return idx[size_t(k - 1)];
}

std::vector<int32_t> generate_uncached(const Model &m, const std::vector<int32_t> &prompt, const SampleOptions &o,
                                       const std::function<void(int32_t)> &on_token) {
    if (prompt.empty()) fail("generation needs a non-empty prompt");
    const int64_t limit = std::min<int64_t>(m.config.max_position_embeddings, int64_t(prompt.size()) + o.max_new_tokens);
    Activations acts = Activations::plan(m.config, limit, 1, false);
    std::vector<int32_t> seq = prompt, out;
    uint64_t rng = o.seed;
    while (int64_t(seq.size()) < limit) {
        Batch b = Batch::from_sequences({seq});
        model_forward(m, b, acts);
        const real *last = acts.logits + (b.num_tokens() - 1) * m.config.vocab_size;
        int32_t t = sample_token(last, m.config.vocab_size, o, rng);
        if (t == o.stop_token) break;
        seq.push_back(t);
        out.push_back(t);
        if (on_token) on_token(t);
    }
    return out;
}

} // namespace zaya
