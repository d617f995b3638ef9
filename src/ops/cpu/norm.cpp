#include "core/profile.h"
#include "ops/cpu/norm.h"

#include <cmath>

namespace zaya::cpu {

void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D, float eps) {
    ZAYA_PROFILE("rmsnorm");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const float *xr = x + n * D;
        float *yr = y + n * D;
        float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
        for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
        float r = 1.0f / std::sqrt(ss / float(D) + eps);
        if (rstd) rstd[n] = r;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) yr[i] = w[i] * (xr[i] * r);
    }
}

} // namespace zaya::cpu
