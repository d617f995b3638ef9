#include "core/profile.h"
#include "ops/cpu/reduce.h"
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

void linear_backward(real *dx, real *dW, real *db, const real *dy, int64_t ldy, const real *x, const real *W, int64_t N,
                     int64_t I, int64_t O, bool accumulate_dx) {
    ZAYA_PROFILE("linear_backward");
    if (dx) gemm(false, false, N, I, O, 1.0f, dy, ldy, W, I, accumulate_dx ? 1.0f : 0.0f, dx, I);
    gemm(true, false, O, I, N, 1.0f, dy, ldy, x, I, 1.0f, dW, I);
    if (db) column_dot_add(db, dy, ldy, nullptr, 0, N, O);
}

} // namespace zaya::cpu
