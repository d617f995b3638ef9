#include "core/profile.h"
#include "ops/cpu/elementwise.h"

#include <cmath>

namespace zaya::cpu {

void embedding_forward(float *out, const int32_t *tokens, const float *table, const float *bias, const float *scale,
                       int64_t N, int64_t D) {
    ZAYA_PROFILE("embedding");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const float *e = table + int64_t(tokens[n]) * D;
        float *o = out + n * D;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) o[i] = (e[i] + bias[i]) * scale[i];
    }
}

void residual_scale_forward(float *out, const float *x, const float *res, const float *hs_scale, const float *hs_bias,
                            const float *res_scale, const float *res_bias, int64_t N, int64_t D) {
    ZAYA_PROFILE("residual_scale");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const float *xr = x + n * D;
        const float *rr = res + n * D;
        float *o = out + n * D;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] + hs_bias[i]) * hs_scale[i] + (rr[i] + res_bias[i]) * res_scale[i];
    }
}

void gelu_forward(float *y, const float *x, int64_t n) {
    ZAYA_PROFILE("gelu");
    constexpr float inv_sqrt2 = 0.70710678118654752f;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * inv_sqrt2));
}

void swiglu_forward(float *a, const float *h, int64_t N, int64_t I) {
    ZAYA_PROFILE("swiglu");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const float *g = h + n * 2 * I;
        const float *u = g + I;
        float *o = a + n * I;
        for (int64_t i = 0; i < I; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
}

} // namespace zaya::cpu
