#include "core/profile.h"
#include "ops/cpu/linear.h"

#include "ops/cpu/gemm.h"

namespace zaya::cpu {

void linear_forward(real *y, const real *x, const real *W, const real *b, int64_t N, int64_t I, int64_t O) {
    ZAYA_PROFILE("linear");
    gemm(false, true, N, O, I, 1.0f, x, I, W, I, 0.0f, y, O);
    if (!b) return;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        real *row = y + n * O;
#pragma omp simd
        for (int64_t o = 0; o < O; ++o) row[o] += b[o];
    }
}

} // namespace zaya::cpu
