#include "core/profile.h"
#include <algorithm>
#include "ops/cpu/norm.h"
#include "ops/cpu/reduce.h"

#include <cmath>

namespace zaya::cpu {

void rmsnorm_forward(real *y, real *rstd, const real *x, const real *w, int64_t N, int64_t D, real eps) {
    ZAYA_PROFILE("rmsnorm");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *xr = x + n * D;
        real *yr = y + n * D;
        real ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
        real r = 1.0f / std::sqrt(ss / real(D) + eps);
        if (rstd) rstd[n] = r;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) yr[i] = w[i] * (xr[i] * r);
    }
}

void rmsnorm_backward(real *dx, real *dw, const real *dy, const real *x, const real *w, const real *rstd, int64_t N,
                      int64_t D, bool accumulate_dx) {
    ZAYA_PROFILE("rmsnorm_backward");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *xr = x + n * D, *dyr = dy + n * D;
        real *dxr = dx + n * D;
        const real r = rstd[n];
        real dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t i = 0; i < D; ++i) dot += w[i] * dyr[i] * xr[i] * r;
        const real m = dot / real(D);
        for (int64_t i = 0; i < D; ++i) {
            real g = r * (w[i] * dyr[i] - xr[i] * r * m);
            dxr[i] = accumulate_dx ? dxr[i] + g : g;
        }
    }
    // dw needs x̂ = x·rstd per row; scale rows on the fly through a column reduction of dy⊙x, weighted by rstd.
    for_column_chunks(D, [&](int64_t i0, int64_t i1) {
        real acc[kColumnChunk] = {};
        for (int64_t n = 0; n < N; ++n)
            for (int64_t i = i0; i < i1; ++i) acc[i - i0] += dy[n * D + i] * x[n * D + i] * rstd[n];
        for (int64_t i = i0; i < i1; ++i) dw[i] += acc[i - i0];
    });
}

} // namespace zaya::cpu
