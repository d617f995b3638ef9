#include "ops/cpu/linear_bf16.h"

// GCC 12 reports its own AVX-512 intrinsic headers (_mm512_undefined_* inside them) as using uninitialised values
// once inlined here: a known false positive (GCC bug 105593); the warnings are off for this file only.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "core/error.h"
#include "core/profile.h"
#include "ops/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace zaya::cpu {

namespace {

inline float widen(uint16_t h) {
    uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

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
    __m256 s[R];
    for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_ps();
    for (; i + 8 <= I; i += 8) {
        __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i *>(w + i));
        __m256 wf = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
        for (int r = 0; r < R; ++r) s[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + i), wf, s[r]);
    }
    for (int r = 0; r < R; ++r) {
        __m128 q = _mm_add_ps(_mm256_castps256_ps128(s[r]), _mm256_extractf128_ps(s[r], 1));
        q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        q = _mm_add_ss(q, _mm_movehdup_ps(q));
        acc[r] += _mm_cvtss_f32(q);
    }
#endif
    for (; i < I; ++i)
        for (int r = 0; r < R; ++r) acc[r] += x[r * ldx + i] * widen(w[i]);
}

// Rows of W in blocks, columns in chunks: a chunk of the R input rows (R × kCols floats, 32 KB for 8 rows) stays in
// L1 while a block of weight rows passes over it; without the chunks, 8 input rows of 2048 columns (64 KB) were
// re-read from L2 for every weight row and capped a pass at ~60 GFLOP/s. Every weight is still read once.
template <int R>
void dot_block(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t I, int64_t O) {
    // Unchunked when the R rows fit L1 anyway (decode, R = 1): chunks break the weights' sequential stream, and that
    // measured 30 % slower for one row.
    constexpr int64_t kRowBlock = 32, kL1Floats = 8192;
    const int64_t kCols = int64_t(R) * I <= kL1Floats ? I : std::max<int64_t>(32, kL1Floats / R / 32 * 32);
#pragma omp parallel for schedule(static)
    for (int64_t o0 = 0; o0 < O; o0 += kRowBlock) {
        const int64_t o1 = std::min(O, o0 + kRowBlock);
        float acc[kRowBlock][R] = {};
        for (int64_t c = 0; c < I; c += kCols) {
            const int64_t n = std::min(kCols, I - c);
            for (int64_t o = o0; o < o1; ++o) dot_rows<R>(acc[o - o0], x + c, I, n, W + o * I + c);
        }
        for (int64_t o = o0; o < o1; ++o)
            for (int r = 0; r < R; ++r) y[r * ldy + o] = acc[o - o0][r] + (b ? b[o] : 0.0f);
    }
}

constexpr int64_t kPass = 8; // rows per pass (4 measured slower: 188 vs 142 ms for 8 rows of the LM head)
// Few rows: each pass of up to kPass rows reads every weight row once and uses it for all of them.
void linear_bf16_dot(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                     int64_t O) {
    for (int64_t n = 0; n < N; n += kPass) {
        float *yp = y + n * ldy;
        const float *xp = x + n * I;
        switch (std::min<int64_t>(kPass, N - n)) {
        case 1: dot_block<1>(yp, ldy, xp, W, b, I, O); break;
        case 2: dot_block<2>(yp, ldy, xp, W, b, I, O); break;
        case 3: dot_block<3>(yp, ldy, xp, W, b, I, O); break;
        case 4: dot_block<4>(yp, ldy, xp, W, b, I, O); break;
        case 5: dot_block<5>(yp, ldy, xp, W, b, I, O); break;
        case 6: dot_block<6>(yp, ldy, xp, W, b, I, O); break;
        case 7: dot_block<7>(yp, ldy, xp, W, b, I, O); break;
        default: dot_block<8>(yp, ldy, xp, W, b, I, O); break;
        }
    }
}

// Many rows: widen kPanel weight rows at a time into fp32 and multiply them with the GEMM. The widening costs
// O·I per call, shared by all N rows.
void linear_bf16_panels(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N,
                        int64_t I, int64_t O) {
    constexpr int64_t kPanel = 256;
    thread_local std::vector<float> panel; // grows once to kPanel·I; reused by every later call
    panel.resize(size_t(std::min(kPanel, O) * I));
    for (int64_t o0 = 0; o0 < O; o0 += kPanel) {
        const int64_t rows = std::min(kPanel, O - o0);
        float *p = panel.data();
        const uint16_t *src = W + o0 * I;
#pragma omp parallel for schedule(static)
        for (int64_t k = 0; k < rows * I; ++k) p[k] = widen(src[k]);
        gemm(false, true, N, rows, I, 1.0f, x, I, p, I, 0.0f, y + o0, ldy);
    }
    if (!b) return;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) y[n * ldy + o] += b[o];
}

} // namespace

void linear_bf16_with(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                      int64_t O, int64_t dot_max_rows) {
    ZAYA_PROFILE("linear_bf16");
    if (N <= 0 || O <= 0) return;
    if (N <= dot_max_rows) linear_bf16_dot(y, ldy, x, W, b, N, I, O);
    else linear_bf16_panels(y, ldy, x, W, b, N, I, O);
}

void linear_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                 int64_t O) {
    linear_bf16_with(y, ldy, x, W, b, N, I, O, kBf16DotMaxRows);
}

void gather_rows_bf16(float *dst, const uint16_t *table, const int32_t *ids, int64_t N, int64_t D) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const uint16_t *row = table + int64_t(ids[n]) * D;
        for (int64_t d = 0; d < D; ++d) dst[n * D + d] = widen(row[d]);
    }
}

} // namespace zaya::cpu
