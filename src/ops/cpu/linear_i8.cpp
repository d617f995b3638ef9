#include "ops/cpu/linear_i8.h"

#include "core/dtype.h"
#include "core/profile.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/weight_stream.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace zaya::cpu {

namespace {

// One row's groups: q and scales from w[I].
void quantize_row(int8_t *q, float *scales, const float *w, int64_t I) {
    for (int64_t g = 0; g * kI8Group < I; ++g) {
        const int64_t c0 = g * kI8Group, c1 = std::min(I, c0 + kI8Group);
        float amax = 0;
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(w[c]));
        const float s = amax / 127.0f, inv = amax > 0 ? 127.0f / amax : 0.0f;
        scales[g] = s;
        for (int64_t c = c0; c < c1; ++c)
            q[c] = int8_t(std::clamp(std::nearbyint(w[c] * inv), -127.0f, 127.0f));
    }
}

// acc[r] += Σ_i x[r][i]·s(i)·q[i], i < n, for R rows of x (row stride ldx) against one row piece q[n] whose first
// column starts a group (its scales sc[]). Each 16 weights are widened and scaled once, then used by every row.
template <int R>
inline void dot_rows(float *acc, const float *x, int64_t ldx, int64_t n, const int8_t *q, const float *sc) {
    int64_t i = 0;
#if defined(__AVX512F__)
    if constexpr (R == 1) {
        // One row (decoding): each group's 64 products summed unscaled in two chains, then scaled once — 4 fewer
        // multiplies per group, which is where a single row's time goes (the weights arrive faster than they widen).
        __m512 s = _mm512_setzero_ps();
        for (; i + kI8Group <= n; i += kI8Group) {
            auto widen16 = [&](int64_t k) {
                return _mm512_cvtepi32_ps(
                    _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(q + i + k))));
            };
            __m512 a = _mm512_mul_ps(_mm512_loadu_ps(x + i), widen16(0));
            __m512 b = _mm512_mul_ps(_mm512_loadu_ps(x + i + 16), widen16(16));
            a = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 32), widen16(32), a);
            b = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 48), widen16(48), b);
            s = _mm512_fmadd_ps(_mm512_add_ps(a, b), _mm512_set1_ps(sc[i / kI8Group]), s);
        }
        acc[0] += _mm512_reduce_add_ps(s);
    }
    // Two accumulators per row, as the bf16 kernel: one FMA chain would cap the stream.
    __m512 s[R], t[R];
    for (int r = 0; r < R; ++r) s[r] = t[r] = _mm512_setzero_ps();
    for (; i + 32 <= n; i += 32) { // a group is 64 columns: both halves share its scale
        const __m512 scale = _mm512_set1_ps(sc[i / kI8Group]);
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + i));
        const __m128i qlo = _mm256_castsi256_si128(h), qhi = _mm256_extracti128_si256(h, 1);
        const __m512 lo = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(qlo)), scale);
        const __m512 hi = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(qhi)), scale);
        for (int r = 0; r < R; ++r) {
            s[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i), lo, s[r]);
            t[r] = _mm512_fmadd_ps(_mm512_loadu_ps(x + r * ldx + i + 16), hi, t[r]);
        }
    }
    for (int r = 0; r < R; ++r) acc[r] += _mm512_reduce_add_ps(_mm512_add_ps(s[r], t[r]));
#elif defined(__AVX2__)
    __m256 s[R];
    for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
        const __m256 scale = _mm256_set1_ps(sc[i / kI8Group]);
        const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(q + i));
        const __m256 wf = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h)), scale);
        for (int r = 0; r < R; ++r) s[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + r * ldx + i), wf, s[r]);
    }
    for (int r = 0; r < R; ++r) acc[r] += hsum(s[r]);
#endif
    for (; i < n; ++i) {
        const float w = sc[i / kI8Group] * float(q[i]);
        for (int r = 0; r < R; ++r) acc[r] += x[r * ldx + i] * w;
    }
}

// int8 rows for weight_stream. Column chunks start on a group, so a chunk's first scale is its group's.
struct I8Rows {
    const int8_t *q;
    const float *scales;
    int64_t I, G;
    static constexpr int64_t kColAlign = kI8Group;
    template <int R> void dot(float *acc, const float *x, int64_t ldx, int64_t o, int64_t c, int64_t n) const {
        dot_rows<R>(acc, x, ldx, n, q + o * I + c, scales + o * G + c / kI8Group);
    }
    void widen(float *dst, int64_t o0, int64_t rows) const {
#pragma omp parallel for schedule(static)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < I; ++c)
                dst[r * I + c] = scales[(o0 + r) * G + c / kI8Group] * float(q[(o0 + r) * I + c]);
    }
};

} // namespace

void quantize_i8(int8_t *q, float *scales, const float *w, int64_t O, int64_t I) {
    const int64_t G = i8_groups(I);
#pragma omp parallel for schedule(static)
    for (int64_t o = 0; o < O; ++o) quantize_row(q + o * I, scales + o * G, w + o * I, I);
}

void quantize_i8_from_bf16(int8_t *q, float *scales, const uint16_t *w, int64_t O, int64_t I) {
    const int64_t G = i8_groups(I);
#pragma omp parallel
    {
        std::vector<float> row(static_cast<size_t>(I));
#pragma omp for schedule(static)
        for (int64_t o = 0; o < O; ++o) {
            for (int64_t c = 0; c < I; ++c) row[size_t(c)] = bf16_to_f32(w[o * I + c]);
            quantize_row(q + o * I, scales + o * G, row.data(), I);
        }
    }
}

void linear_i8_with(float *y, int64_t ldy, const float *x, const int8_t *q, const float *scales, const float *b,
                    int64_t N, int64_t I, int64_t O, int64_t dot_max_rows) {
    ZAYA_PROFILE("linear_i8");
    weight_stream::linear(y, ldy, x, I8Rows{q, scales, I, i8_groups(I)}, b, N, I, O, dot_max_rows);
}

void linear_i8(float *y, int64_t ldy, const float *x, const int8_t *q, const float *scales, const float *b, int64_t N,
               int64_t I, int64_t O) {
    linear_i8_with(y, ldy, x, q, scales, b, N, I, O, kI8DotMaxRows);
}

void gather_rows_i8(float *dst, const int8_t *q, const float *scales, const int32_t *ids, int64_t N, int64_t D) {
    const int64_t G = i8_groups(D);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const int64_t row = ids[n];
        for (int64_t d = 0; d < D; ++d) dst[n * D + d] = scales[row * G + d / kI8Group] * float(q[row * D + d]);
    }
}

} // namespace zaya::cpu
