#include "core/profile.h"
#include "ops/cpu/norm.h"

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

} // namespace zaya::cpu
