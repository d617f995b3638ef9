#include "ops/cpu/linear_bf16.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/profile.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/weight_stream.h"

namespace zaya::cpu {

namespace {

// acc[r] += Σ_i x[r][i]·w[i], i < I, for R rows of x (row stride ldx) against one bf16 weight row piece w[I].
template <int R>
inline void dot_rows(float *acc, const float *x, int64_t ldx, int64_t I, const uint16_t *w) {
    int64_t i = 0;
#if defined(__AVX512F__)
    // Two accumulators per row: a single FMA chain (4-cycle latency per 64 bytes of weights) would cap one thread
    // near 24 GB/s at 3 GHz, below what DRAM delivers.
    __m512 s[R], t[R];
    for (int r = 0; r < R; ++r) s[r] = t[r] = _mm512_setzero_ps();
    for (; i + 32 <= I; i += 32) {
        __m512i h = _mm512_loadu_si512(w + i);
        __m512 lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
        __m512 hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
        for (int r = 0; r < R; ++r) {
            s[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i), lo, s[r]);
            t[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i + 16), hi, t[r]);
        }
    }
    for (; i + 16 <= I; i += 16) {
        __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + i));
        __m512 wf = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        for (int r = 0; r < R; ++r) s[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i), wf, s[r]);
    }
    for (int r = 0; r < R; ++r) acc[r] += _mm512_reduce_add_ps(_mm512_add_ps(s[r], t[r]));
#elif defined(__AVX2__)
    // K accumulators per row, at least 4 FMA chains in all: one chain per row (16 bytes of weights per 4-cycle FMA)
    // capped a decoding thread at ~12 GB/s on Zen 3, below what DRAM delivers.
    constexpr int K = R >= 4 ? 1 : 4 / R;
    __m256 s[R][K];
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < K; ++k) s[r][k] = _mm256_setzero_ps();
    auto widen8 = [w](int64_t at) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w + at));
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    };
    for (; i + 8 * K <= I; i += 8 * K) {
        __m256 wf[K];
        for (int k = 0; k < K; ++k) wf[k] = widen8(i + 8 * k);
        for (int r = 0; r < R; ++r)
            for (int k = 0; k < K; ++k)
                s[r][k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + i + 8 * k), wf[k], s[r][k]);
    }
    for (; i + 8 <= I; i += 8) {
        const __m256 wf = widen8(i);
        for (int r = 0; r < R; ++r) s[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + i), wf, s[r][0]);
    }
    for (int r = 0; r < R; ++r) {
        for (int k = 1; k < K; ++k) s[r][0] = _mm256_add_ps(s[r][0], s[r][k]);
        acc[r] += hsum(s[r][0]);
    }
#endif
    for (; i < I; ++i)
        for (int r = 0; r < R; ++r) acc[r] += x[r * ldx + i] * bf16_to_f32(w[i]);
}

// bf16 rows for weight_stream: widened by a 16-bit shift.
struct Bf16Rows {
    const uint16_t *W;
    int64_t I;
    static constexpr int64_t kColAlign = 32;
    template <int R> void dot(float *acc, const float *x, int64_t ldx, int64_t o, int64_t c, int64_t n) const {
        dot_rows<R>(acc, x, ldx, n, W + o * I + c);
    }
    void widen(float *dst, int64_t o0, int64_t rows) const {
        const uint16_t *src = W + o0 * I;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < rows * I; ++k) dst[k] = bf16_to_f32(src[k]);
    }
};

} // namespace

void linear_bf16_with(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                      int64_t O, int64_t dot_max_rows) {
    ZAYA_PROFILE("linear_bf16");
    weight_stream::linear(y, ldy, x, Bf16Rows{W, I}, b, N, I, O, dot_max_rows);
}

void linear_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                 int64_t O) {
    linear_bf16_with(y, ldy, x, W, b, N, I, O, kBf16DotMaxRows);
}

void gather_rows_bf16(float *dst, const uint16_t *table, const int32_t *ids, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const uint16_t *row = table + int64_t(ids[n]) * D;
        for (int64_t d = 0; d < D; ++d) dst[n * D + d] = bf16_to_f32(row[d]);
    }
}

} // namespace zaya::cpu
