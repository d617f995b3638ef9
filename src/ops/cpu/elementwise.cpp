#include "core/profile.h"
#include "ops/cpu/elementwise.h"

#include <cmath>

namespace zaya::cpu {

void embedding_forward(real *out, const int32_t *tokens, const real *table, const real *bias, const real *scale,
                       int64_t N, int64_t D) {
    ZAYA_PROFILE("embedding");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *e = table + int64_t(tokens[n]) * D;
        real *o = out + n * D;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) o[i] = (e[i] + bias[i]) * scale[i];
    }
}

void residual_scale_forward(real *out, const real *x, const real *res, const real *hs_scale, const real *hs_bias,
                            const real *res_scale, const real *res_bias, int64_t N, int64_t D) {
    ZAYA_PROFILE("residual_scale");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *xr = x + n * D;
        const real *rr = res + n * D;
        real *o = out + n * D;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) o[i] = (xr[i] + hs_bias[i]) * hs_scale[i] + (rr[i] + res_bias[i]) * res_scale[i];
    }
}

void gelu_forward(real *y, const real *x, int64_t n) {
    ZAYA_PROFILE("gelu");
    constexpr real inv_sqrt2 = 0.70710678118654752f;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * inv_sqrt2));
}

void swiglu_forward(real *a, const real *h, int64_t N, int64_t I) {
    ZAYA_PROFILE("swiglu");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *g = h + n * 2 * I;
        const real *u = g + I;
        real *o = a + n * I;
        for (int64_t i = 0; i < I; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    }
}

} // namespace zaya::cpu
