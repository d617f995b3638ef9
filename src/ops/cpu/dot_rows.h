// The streaming dot kernel of weight_stream.h's storages whose weights widen to fp32 on load: bf16 (a 16-bit shift,
// linear_bf16.cpp) and fp32 itself (linear_f32.cpp). Includes simd.h: include from .cpp files only.
#pragma once
#include "core/dtype.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/weight_stream.h"

#include <cmath>
#include <cstdint>
#include <type_traits>

namespace zaya::cpu {

// Weight w[i] as fp32, one at a time and 8 / 16 / 32 at once; T is uint16_t (bf16 bits) or float.
template <class T> struct WidenWeights {
    static_assert(std::is_same_v<T, uint16_t> || std::is_same_v<T, float>);
    static float one(const T *w) {
        if constexpr (std::is_same_v<T, float>) return *w;
        else return bf16_to_f32(*w);
    }
#if defined(__AVX512F__)
    static __m512 sixteen(const T *w) {
        if constexpr (std::is_same_v<T, float>) return _mm512_loadu_ps(w);
        else return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w)));
    }
    // w[0..16) into lo, w[16..32) into hi (bf16: one 64-byte load for both).
    static void thirty_two(const T *w, __m512 &lo, __m512 &hi) {
        if constexpr (std::is_same_v<T, float>) {
            lo = _mm512_loadu_ps(w);
            hi = _mm512_loadu_ps(w + 16);
        } else {
            const __m512i h = _mm512_loadu_si512(w);
            lo = widen(_mm512_castsi512_si256(h));
            hi = widen(_mm512_extracti64x4_epi64(h, 1));
        }
    }
    static __m512 widen(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
#elif defined(__AVX2__)
    static __m256 eight(const T *w) {
        if constexpr (std::is_same_v<T, float>) return _mm256_loadu_ps(w);
        else {
            const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w));
            return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        }
    }
#endif
};

#if defined(__AVX512F__)
// acc[k][r] += Σ_i x[r][i]·w[k][i], i < I, for R rows of x (row stride ldx) against K weight row pieces w[k][I]
// (1 or 2: two share each load of x, which bounds a pass of many rows); ahead[k] (may be null): the same piece of a
// later weight row, prefetched as this one is read. Two accumulators per row and weight row: a single FMA chain
// (4-cycle latency per 64 bytes of bf16 weights) would cap one thread near 24 GB/s at 3 GHz, below what DRAM
// delivers. The same two for any R and K: a row's sum does not depend on the rows beside it (weight_stream.h).
template <int R, int K, class T>
inline void dot_rows_k(float *const *acc, const float *x, int64_t ldx, int64_t I, const T *const *w,
                       const T *const *ahead) {
    using Widen = WidenWeights<T>;
    int64_t i = 0;
    __m512 s[K][R], t[K][R];
    for (int k = 0; k < K; ++k)
        for (int r = 0; r < R; ++r) s[k][r] = t[k][r] = _mm512_setzero_ps();
    for (; i + 32 <= I; i += 32) {
        __m512 lo[K], hi[K];
        for (int k = 0; k < K; ++k) {
            if (ahead[k]) _mm_prefetch(reinterpret_cast<const char *>(ahead[k] + i), _MM_HINT_T0);
            if (ahead[k] && sizeof(T) == 4) // (32 fp32 weights span two lines)
                _mm_prefetch(reinterpret_cast<const char *>(ahead[k] + i + 16), _MM_HINT_T0);
            Widen::thirty_two(w[k] + i, lo[k], hi[k]);
        }
        for (int r = 0; r < R; ++r) {
            const __m512 x0 = _mm512_loadu_ps(x + r * ldx + i), x1 = _mm512_loadu_ps(x + r * ldx + i + 16);
            for (int k = 0; k < K; ++k) {
                s[k][r] = _mm512_fmadd_ps(x0, lo[k], s[k][r]);
                t[k][r] = _mm512_fmadd_ps(x1, hi[k], t[k][r]);
            }
        }
    }
    for (; i + 16 <= I; i += 16) {
        __m512 wf[K];
        for (int k = 0; k < K; ++k) wf[k] = Widen::sixteen(w[k] + i);
        for (int r = 0; r < R; ++r) {
            const __m512 xv = _mm512_loadu_ps(x + r * ldx + i);
            for (int k = 0; k < K; ++k) s[k][r] = _mm512_fmadd_ps(xv, wf[k], s[k][r]);
        }
    }
    for (int k = 0; k < K; ++k)
        for (int r = 0; r < R; ++r) acc[k][r] += _mm512_reduce_add_ps(_mm512_add_ps(s[k][r], t[k][r]));
    // An explicit fma: the compiler fuses or not by how it vectorises the loop over R rows, and a row's sum must not
    // depend on R (weight_stream.h).
    for (; i < I; ++i)
        for (int k = 0; k < K; ++k)
            for (int r = 0; r < R; ++r) acc[k][r] = std::fma(x[r * ldx + i], Widen::one(w[k] + i), acc[k][r]);
}
#endif

// acc[r] += Σ_i x[r][i]·w[i], i < I, for R rows of x (row stride ldx) against one weight row piece w[I];
// ahead (may be null): the same piece of a later weight row, prefetched as this one is read.
template <int R, class T>
inline void dot_rows(float *acc, const float *x, int64_t ldx, int64_t I, const T *w,
                     [[maybe_unused]] const T *ahead) {
#if defined(__AVX512F__)
    const T *wk[1] = {w}, *ak[1] = {ahead};
    dot_rows_k<R, 1>(&acc, x, ldx, I, wk, ak);
#else
    using Widen = WidenWeights<T>;
    int64_t i = 0;
#if defined(__AVX2__)
    // K accumulators per row, at least 4 FMA chains in all: one chain per row (16 bytes of weights per 4-cycle FMA)
    // capped a decoding thread at ~12 GB/s on Zen 3, below what DRAM delivers. (So a row's sum depends on R here.)
    constexpr int K = R >= 4 ? 1 : 4 / R;
    __m256 s[R][K];
    for (int r = 0; r < R; ++r)
        for (int k = 0; k < K; ++k) s[r][k] = _mm256_setzero_ps();
    for (; i + 8 * K <= I; i += 8 * K) {
        __m256 wf[K];
        for (int k = 0; k < K; ++k) wf[k] = Widen::eight(w + i + 8 * k);
        for (int r = 0; r < R; ++r)
            for (int k = 0; k < K; ++k)
                s[r][k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + i + 8 * k), wf[k], s[r][k]);
    }
    for (; i + 8 <= I; i += 8) {
        const __m256 wf = Widen::eight(w + i);
        for (int r = 0; r < R; ++r) s[r][0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + i), wf, s[r][0]);
    }
    for (int r = 0; r < R; ++r) {
        for (int k = 1; k < K; ++k) s[r][0] = _mm256_add_ps(s[r][0], s[r][k]);
        acc[r] += hsum(s[r][0]);
    }
#endif
    // An explicit fma: the compiler fuses or not by how it vectorises the loop over R rows, and a row's sum must not
    // depend on R (weight_stream.h).
    for (; i < I; ++i)
        for (int r = 0; r < R; ++r) acc[r] = std::fma(x[r * ldx + i], Widen::one(w + i), acc[r]);
#endif
}

// Weights W[O, I] of element T (bf16 bits or fp32) as a weight_stream storage: dot_rows for few rows, rows widened
// to fp32 for the panels' GEMM.
template <class T> struct WidenedRows {
    const T *W;
    int64_t I, O;
    static constexpr int64_t kColAlign = 32;
    template <int R> void dot(float *acc, const float *x, int64_t ldx, int64_t o, int64_t c, int64_t n) const {
        dot_rows<R>(acc, x, ldx, n, W + o * I + c, weight_stream::chunk_ahead<R>(W, I, O, o, c));
    }
#if defined(__AVX512F__)
    // dot for weight rows o and o + 1 at once (weight_stream::two_weight_rows).
    template <int R>
    void dot2(float *acc0, float *acc1, const float *x, int64_t ldx, int64_t o, int64_t c, int64_t n) const {
        weight_stream::two_weight_rows<R>(
            acc0, acc1, W, I, O, o, c,
            [&]<int Rows>(float *const *acc, int r0, const T *const *w, const T *const *ahead) {
                dot_rows_k<Rows, 2>(acc, x + r0 * ldx, ldx, n, w, ahead);
            });
    }
#endif
    void widen(float *dst, int64_t o0, int64_t rows) const {
        const T *src = W + o0 * I;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < rows * I; ++k) dst[k] = WidenWeights<T>::one(src + k);
    }
};

} // namespace zaya::cpu
