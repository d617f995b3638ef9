#include "ops/cpu/linear_f32.h"

#include "core/profile.h"
#include "ops/cpu/dot_rows.h"
#include "ops/cpu/linear_bf16.h"
#include "ops/cpu/weight_stream.h"

#include <algorithm>

namespace zaya::cpu {

void linear_f32_with(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t N, int64_t I,
                     int64_t O, int64_t slice_max_rows, MatmulPrecision rows) {
    ZAYA_PROFILE("linear_f32");
    if (N <= 0 || O <= 0) return;
    if (rows == MatmulPrecision::BF16) x = bf16_rounded_rows(x, N, I);
    const int64_t slice = N <= slice_max_rows ? kF32SliceRows : N;
    for (int64_t n = 0; n < N; n += slice)
        gemm_with(gemm_default_lib(), false, true, std::min(slice, N - n), O, I, 1.0f, x + n * I, I, W, I, 0.0f,
                  y + n * ldy, ldy);
    weight_stream::add_bias(y, ldy, b, N, O);
}

void linear_f32(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t N, int64_t I,
                int64_t O, MatmulPrecision rows, bool batch_invariant) {
    if (!batch_invariant) return linear_f32_with(y, ldy, x, W, b, N, I, O, kF32SliceMaxRows, rows);
    ZAYA_PROFILE("linear_f32");
    if (N <= 0 || O <= 0) return;
    if (rows == MatmulPrecision::BF16) x = bf16_rounded_rows(x, N, I);
    weight_stream::linear(y, ldy, x, WidenedRows<float>{W, I, O}, b, N, I, O, N); // dot passes only
}

} // namespace zaya::cpu
