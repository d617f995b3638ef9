// The router's top-1 selection for one token, shared by the selection kernel (moe_router.cu) and the fused router MLP
// (router_fused.cu): p = softmax(l) over K classes, choice = argmax(p + bias) (the lowest index wins ties), p_sel = the
// chosen unbiased probability — in the arithmetic order of cpu::router_select_forward.
#pragma once
#include <cmath>
#include <cstdint>

namespace zaya::cuda {

__device__ inline void router_select_token(float *p, int32_t &choice, float &p_sel, const float *l, const float *bias,
                                           int64_t K) {
    float m = l[0];
    for (int64_t e = 1; e < K; ++e) m = fmaxf(m, l[e]);
    float sum = 0.0f;
    for (int64_t e = 0; e < K; ++e) sum += (p[e] = expf(l[e] - m));
    const float inv = 1.0f / sum;
    int32_t best = 0;
    float best_v = -INFINITY;
    for (int64_t e = 0; e < K; ++e) {
        p[e] *= inv;
        const float biased = p[e] + bias[e];
        if (biased > best_v) best_v = biased, best = int32_t(e); // strict: the lowest index wins ties
    }
    choice = best;
    p_sel = p[best];
}

} // namespace zaya::cuda
