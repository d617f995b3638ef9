#include "core/fastmath.h"
#include "core/profile.h"
#include <algorithm>
#include "ops/cpu/elementwise.h"
#include "ops/cpu/reduce.h"

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
#pragma omp simd
        for (int64_t i = 0; i < I; ++i) o[i] = g[i] / (real(1) + fast_exp(-g[i])) * u[i];
    }
}

void embedding_backward(real *dtable, real *dbias, real *dscale, const real *dout, const int32_t *tokens,
                        const real *table, const real *bias, const real *scale, int64_t N, int64_t D,
                        int32_t skip_token) {
    ZAYA_PROFILE("embedding_backward");
    // Parallel over feature columns, tokens in order: deterministic even when a token id repeats.
    for_column_chunks(D, [&](int64_t i0, int64_t i1) {
        for (int64_t n = 0; n < N; ++n) {
            const real *dr = dout + n * D, *er = table + int64_t(tokens[n]) * D;
            real *dt = dtable + int64_t(tokens[n]) * D;
            const bool update_row = tokens[n] != skip_token;
            for (int64_t i = i0; i < i1; ++i) {
                dbias[i] += dr[i] * scale[i];
                dscale[i] += dr[i] * (er[i] + bias[i]);
                if (update_row) dt[i] += dr[i] * scale[i];
            }
        }
    });
}

void residual_scale_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias, real *d_res_scale,
                             real *d_res_bias, const real *dout, const real *x, const real *res, const real *hs_scale,
                             const real *hs_bias, const real *res_scale, const real *res_bias, int64_t N, int64_t D,
                             bool accumulate_dres) {
    ZAYA_PROFILE("residual_scale_backward");
    for_column_chunks(D, [&](int64_t i0, int64_t i1) {
        // The four parameter gradients of this chunk accumulate in local arrays (row order, as before), so the
        // inner loop has no possible aliasing with dx/dres and vectorises.
        const int64_t w = i1 - i0;
        real a_hb[kColumnChunk], a_hs[kColumnChunk], a_rb[kColumnChunk], a_rs[kColumnChunk];
        for (int64_t i = 0; i < w; ++i)
            a_hb[i] = d_hs_bias[i0 + i], a_hs[i] = d_hs_scale[i0 + i], a_rb[i] = d_res_bias[i0 + i],
            a_rs[i] = d_res_scale[i0 + i];
        const real *hs = hs_scale + i0, *hb = hs_bias + i0, *rs = res_scale + i0, *rb = res_bias + i0;
        for (int64_t n = 0; n < N; ++n) {
            const real *g = dout + n * D + i0, *xr = x + n * D + i0, *rr = res + n * D + i0;
            real *dxr = dx + n * D + i0, *drr = dres + n * D + i0;
#pragma omp simd
            for (int64_t i = 0; i < w; ++i) {
                a_hb[i] += g[i] * hs[i];
                a_hs[i] += g[i] * (xr[i] + hb[i]);
                a_rb[i] += g[i] * rs[i];
                a_rs[i] += g[i] * (rr[i] + rb[i]);
                dxr[i] = g[i] * hs[i];
            }
            if (accumulate_dres) {
#pragma omp simd
                for (int64_t i = 0; i < w; ++i) drr[i] += g[i] * rs[i];
            } else {
#pragma omp simd
                for (int64_t i = 0; i < w; ++i) drr[i] = g[i] * rs[i];
            }
        }
        for (int64_t i = 0; i < w; ++i)
            d_hs_bias[i0 + i] = a_hb[i], d_hs_scale[i0 + i] = a_hs[i], d_res_bias[i0 + i] = a_rb[i],
            d_res_scale[i0 + i] = a_rs[i];
    });
}

void gelu_backward(real *dx, const real *dy, const real *x, int64_t n) {
    ZAYA_PROFILE("gelu_backward");
    constexpr double inv_sqrt2 = 0.70710678118654752, inv_sqrt2pi = 0.39894228040143268;
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
        const real v = x[i];
        const real cdf = real(0.5 * (1.0 + std::erf(double(v) * inv_sqrt2)));
        const real pdf = real(inv_sqrt2pi * std::exp(-0.5 * double(v) * double(v)));
        dx[i] = dy[i] * (cdf + v * pdf);
    }
}

void swiglu_backward(real *dh, const real *da, const real *h, int64_t N, int64_t I) {
    ZAYA_PROFILE("swiglu_backward");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *g = h + n * 2 * I, *u = g + I, *d = da + n * I;
        real *dg = dh + n * 2 * I, *du = dg + I;
#pragma omp simd
        for (int64_t i = 0; i < I; ++i) {
            const real sig = real(1) / (real(1) + fast_exp(-g[i]));
            const real silu = g[i] * sig;
            du[i] = d[i] * silu;
            dg[i] = d[i] * u[i] * sig * (real(1) + g[i] * (real(1) - sig));
        }
    }
}

} // namespace zaya::cpu
