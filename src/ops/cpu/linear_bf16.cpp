#include "ops/cpu/linear_bf16.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/profile.h"
#include "ops/cpu/dot_rows.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/weight_stream.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace zaya::cpu {

namespace {

// bf16 rows for weight_stream: widened by a 16-bit shift.
using Bf16Rows = WidenedRows<uint16_t>;

#if defined(__AVX512BF16__)
inline __m512bh load_bh(const uint16_t *p) {
    const __m512i v = _mm512_loadu_si512(p);
    return reinterpret_cast<const __m512bh &>(v);
}
inline __m512bh load_bh(const uint16_t *p, __mmask32 m) { // lanes outside m read as zero
    const __m512i v = _mm512_maskz_loadu_epi16(m, p);
    return reinterpret_cast<const __m512bh &>(v);
}

// acc[k][r] += Σ_i x[r][i]·w[k][i], i < n, for R rows of bf16 activations x (row stride ldx) against K bf16 weight
// row pieces w[k][n] (1 or 2): vdpbf16ps multiplies 32 pairs exactly into fp32 and adds them to 16 fp32 sums per
// instruction, with no widening — twice the FMA path's products per instruction. Two weight rows share each load of
// x (a pass of many rows is bound by those loads); every sum is computed alike for K = 1 and 2. ahead[k] (may be
// null): the same piece of a later weight row, prefetched as this one is read.
template <int R, int K>
inline void dot_rows_bf16_in(float *const *acc, const uint16_t *x, int64_t ldx, int64_t n, const uint16_t *const *w,
                             const uint16_t *const *ahead) {
    __m512 s[K][R], t[K][R]; // two sums per row, as dot_rows
    for (int k = 0; k < K; ++k)
        for (int r = 0; r < R; ++r) s[k][r] = t[k][r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512bh w0[K], w1[K];
        for (int k = 0; k < K; ++k) {
            if (ahead[k]) {
                _mm_prefetch(reinterpret_cast<const char *>(ahead[k] + i), _MM_HINT_T0);
                _mm_prefetch(reinterpret_cast<const char *>(ahead[k] + i + 32), _MM_HINT_T0);
            }
            w0[k] = load_bh(w[k] + i);
            w1[k] = load_bh(w[k] + i + 32);
        }
        for (int r = 0; r < R; ++r) {
            const __m512bh x0 = load_bh(x + r * ldx + i), x1 = load_bh(x + r * ldx + i + 32);
            for (int k = 0; k < K; ++k) {
                s[k][r] = _mm512_dpbf16_ps(s[k][r], x0, w0[k]);
                t[k][r] = _mm512_dpbf16_ps(t[k][r], x1, w1[k]);
            }
        }
    }
    for (; i < n; i += 32) {
        const __mmask32 m = n - i >= 32 ? ~__mmask32(0) : __mmask32((uint32_t(1) << (n - i)) - 1);
        __m512bh wv[K];
        for (int k = 0; k < K; ++k) wv[k] = load_bh(w[k] + i, m);
        for (int r = 0; r < R; ++r) {
            const __m512bh xv = load_bh(x + r * ldx + i, m);
            for (int k = 0; k < K; ++k) s[k][r] = _mm512_dpbf16_ps(s[k][r], xv, wv[k]);
        }
    }
    for (int k = 0; k < K; ++k)
        for (int r = 0; r < R; ++r) acc[k][r] += _mm512_reduce_add_ps(_mm512_add_ps(s[k][r], t[k][r]));
}

// bf16 rows for weight_stream, against bf16 activations: the dot path reads the activations' bf16 copy xb (rows
// ldb apart; row r, column c of x0, the fp32 rows weight_stream passes pointers into, is xb[r·ldb + c]), as
// linear_i8's I8Rows reads its int8 copy.
struct Bf16RowsBf16In {
    const uint16_t *W;
    int64_t I, O;
    const float *x0;
    const uint16_t *xb;
    int64_t ldb;
    static constexpr int64_t kColAlign = 32;
    template <int R> void dot(float *acc, const float *x, int64_t, int64_t o, int64_t c, int64_t n) const {
        const uint16_t *w[1] = {W + o * I + c}, *ahead[1] = {weight_stream::chunk_ahead<R>(W, I, O, o, c)};
        dot_rows_bf16_in<R, 1>(&acc, xb + (x - x0) / I * ldb + c, ldb, n, w, ahead);
    }
    // dot for weight rows o and o + 1 at once (weight_stream::two_weight_rows).
    template <int R>
    void dot2(float *acc0, float *acc1, const float *x, int64_t, int64_t o, int64_t c, int64_t n) const {
        const uint16_t *xr = xb + (x - x0) / I * ldb + c;
        weight_stream::two_weight_rows<R>(
            acc0, acc1, W, I, O, o, c,
            [&]<int Rows>(float *const *acc, int r0, const uint16_t *const *w, const uint16_t *const *ahead) {
                dot_rows_bf16_in<Rows, 2>(acc, xr + r0 * ldb, ldb, n, w, ahead);
            });
    }
    void widen(float *, int64_t, int64_t) const { ZAYA_ASSERT(false); } // the GEMM path takes the bf16 GEMM
};
#endif

// Rows of bf16 values, each starting on a 64-byte boundary: row r at p + r·ld.
struct Bf16Rows64 {
    const uint16_t *p;
    int64_t ld;
};

// The N×I rows of x rounded to bf16 (as the bf16 GEMM rounds its operands), in this thread's buffer, which a
// parallel region's threads reach through the pointer returned. Every row starts on a cache line (ld: I rounded up to
// 32 values): the dot kernel loads 64 bytes of each row at a time, and a load across two lines costs two — measured
// 1.8× on the kernel (82 against 146 GFLOP/s a thread, 8 rows, 2048 columns).
Bf16Rows64 rounded_rows(const float *x, int64_t N, int64_t I) {
    thread_local std::vector<uint16_t> xb; // grown once, reused by every later call of this thread
    const int64_t ld = (I + 31) / 32 * 32;
    xb.resize(size_t(N * ld + 32));
    uint16_t *const out = xb.data() + (64 - reinterpret_cast<uintptr_t>(xb.data()) % 64) % 64 / sizeof(uint16_t);
    // Threads only for many rows: one decoding row is well under a microsecond of work.
#pragma omp parallel for schedule(static) if (N * I >= 65536)
    for (int64_t n = 0; n < N; ++n) f32_to_bf16_n(x + n * I, out + n * ld, size_t(I));
    return {out, ld};
}

// The rows widened back to fp32 (exactly), [N, I].
const float *widened_rows(Bf16Rows64 xb, int64_t N, int64_t I) {
    thread_local std::vector<float> xr;
    xr.resize(size_t(N * I));
    float *const out = xr.data();
#pragma omp parallel for schedule(static) if (N * I >= 65536)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < I; ++i) out[n * I + i] = bf16_to_f32(xb.p[n * xb.ld + i]);
    return out;
}

// Rounded rows: the bf16 GEMM for many rows, the vdpbf16ps dot kernel for few. Where the build or the CPU has
// neither, the rounded rows widened back to fp32 (exactly) take the fp32 paths: the same products, summed in fp32.
void linear_bf16_rounded(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N,
                         int64_t I, int64_t O, int64_t dot_max_rows) {
    const Bf16Rows64 xb = rounded_rows(x, N, I);
    if (N > dot_max_rows && gemm_bf16_native()) {
        gemm_bf16(false, true, N, O, I, 1.0f, xb.p, xb.ld, W, I, 0.0f, y, ldy);
        weight_stream::add_bias(y, ldy, b, N, O);
        return;
    }
#if defined(__AVX512BF16__)
    if (N <= dot_max_rows) {
        weight_stream::linear(y, ldy, x, Bf16RowsBf16In{W, I, O, x, xb.p, xb.ld}, b, N, I, O, dot_max_rows);
        return;
    }
#endif
    weight_stream::linear(y, ldy, widened_rows(xb, N, I), Bf16Rows{W, I, O}, b, N, I, O, dot_max_rows);
}

} // namespace

const float *bf16_rounded_rows(const float *x, int64_t N, int64_t I) {
    return widened_rows(rounded_rows(x, N, I), N, I);
}

void linear_bf16_with(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                      int64_t O, int64_t dot_max_rows, MatmulPrecision rows) {
    ZAYA_PROFILE("linear_bf16");
    if (N <= 0 || O <= 0) return;
    if (rows == MatmulPrecision::BF16) return linear_bf16_rounded(y, ldy, x, W, b, N, I, O, dot_max_rows);
    weight_stream::linear(y, ldy, x, Bf16Rows{W, I, O}, b, N, I, O, dot_max_rows);
}

void linear_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                 int64_t O, MatmulPrecision rows, bool batch_invariant) {
    const int64_t dot_max_rows = batch_invariant                 ? N
                                 : rows == MatmulPrecision::BF16 ? kBf16InDotMaxRows
                                                                 : kBf16DotMaxRows;
    linear_bf16_with(y, ldy, x, W, b, N, I, O, dot_max_rows, rows);
}

void gather_rows_bf16(float *dst, const uint16_t *table, const int32_t *ids, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const uint16_t *row = table + int64_t(ids[n]) * D;
        for (int64_t d = 0; d < D; ++d) dst[n * D + d] = bf16_to_f32(row[d]);
    }
}

} // namespace zaya::cpu
