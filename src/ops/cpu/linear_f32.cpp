#include "ops/cpu/linear_f32.h"

#include "core/error.h"
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

namespace {

// fp32 rows for weight_stream's dot passes (batch_invariant only: never the panels, the SGEMM takes W as it is).
struct F32Rows {
    const float *W;
    int64_t I, O;
    static constexpr int64_t kColAlign = 16;
    template <int R> void dot(float *acc, const float *x, int64_t ldx, int64_t o, int64_t c, int64_t n) const {
        dot_rows<R>(acc, x, ldx, n, W + o * I + c, weight_stream::chunk_ahead<R>(W, I, O, o, c));
    }
    void widen(float *, int64_t, int64_t) const { ZAYA_ASSERT(false); }
};

} // namespace

void linear_f32(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t N, int64_t I,
                int64_t O, MatmulPrecision rows, bool batch_invariant) {
    if (!batch_invariant) return linear_f32_with(y, ldy, x, W, b, N, I, O, kF32SliceMaxRows, rows);
    ZAYA_PROFILE("linear_f32");
    if (N <= 0 || O <= 0) return;
    if (rows == MatmulPrecision::BF16) x = bf16_rounded_rows(x, N, I);
    weight_stream::linear(y, ldy, x, F32Rows{W, I, O}, b, N, I, O, N);
}

} // namespace zaya::cpu
