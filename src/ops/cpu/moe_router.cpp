// The router's top-1 selection and the grouping of tokens by expert (moe.h): no GEMM here, so these link into the
// CUDA tests' CPU reference on their own.
#include "core/profile.h"
#include "ops/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace zaya::cpu {

void router_select_forward(real *probs, int32_t *choice, real *p_sel, const real *logits, const real *bias,
                           int64_t N, int64_t K) {
    ZAYA_PROFILE("router_select");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *l = logits + n * K;
        real *p = probs + n * K;
        real m = l[0];
        for (int64_t e = 1; e < K; ++e) m = std::max(m, l[e]);
        real sum = 0.0f;
        for (int64_t e = 0; e < K; ++e) sum += (p[e] = std::exp(l[e] - m));
        const real inv = 1.0f / sum;
        int32_t best = 0;
        real best_v = -INFINITY;
        for (int64_t e = 0; e < K; ++e) {
            p[e] *= inv;
            real biased = p[e] + bias[e];
            if (biased > best_v) best_v = biased, best = int32_t(e); // strict: lowest index wins ties
        }
        choice[n] = best;
        p_sel[n] = p[best];
    }
}

void moe_group_tokens(int32_t *order, int64_t *offsets, const int32_t *choice, int64_t N, int64_t E) {
    std::fill(offsets, offsets + E + 2, 0);
    for (int64_t n = 0; n < N; ++n) ++offsets[choice[n] + 1];
    for (int64_t e = 0; e <= E; ++e) offsets[e + 1] += offsets[e];
    std::vector<int64_t> fill(offsets, offsets + E + 1);
    for (int64_t n = 0; n < N; ++n) order[fill[size_t(choice[n])]++] = int32_t(n);
}

void router_select_backward(real *dlogits, const real *dp_sel, const real *probs, const int32_t *choice, int64_t N,
                            int64_t K) {
    ZAYA_PROFILE("router_select_backward");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        // p_c = softmax(l)_c  ⇒  ∂p_c/∂l_e = p_c(δ_ce − p_e)
        const real *p = probs + n * K;
        const int32_t c = choice[n];
        const real g = dp_sel[n] * p[c];
        for (int64_t e = 0; e < K; ++e) dlogits[n * K + e] = g * ((e == c ? real(1) : real(0)) - p[e]);
    }
}

} // namespace zaya::cpu
