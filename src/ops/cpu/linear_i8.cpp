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

// acc[r] += Σ_i (sx·xq)[r][i]·(s·q)[i], i < n, for R rows of int8 activations xq (row stride ldx; scales sx, row
// stride ldsx) against one weight row piece q[n]; both pieces start on a group. Each group's products are summed
// exactly in int32 (VNNI: 64 at once), then scaled by the two groups' scales into fp32. ahead (may be null): the same
// piece of a later weight row, prefetched as this one is read (AVX-512 VNNI kernel only).
template <int R>
inline void dot_rows_q8(float *acc, const int8_t *xq, const float *sx, int64_t ldx, int64_t ldsx, int64_t n,
                        const int8_t *q, const float *sc, [[maybe_unused]] const int8_t *ahead) {
    int64_t i = 0;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    // vpdpbusd multiplies unsigned by signed bytes: |x| by w with x's sign moved onto w (|q| ≤ 127: no overflow).
    __m512 s[R];
    for (int r = 0; r < R; ++r) s[r] = _mm512_setzero_ps();
    const __m512i zero = _mm512_setzero_si512();
    for (; i + kI8Group <= n; i += kI8Group) {
        const int64_t g = i / kI8Group;
        if (ahead) _mm_prefetch(reinterpret_cast<const char *>(ahead + i), _MM_HINT_T0);
        const __m512i w = _mm512_loadu_si512(q + i);
        for (int r = 0; r < R; ++r) {
            const __m512i xv = _mm512_loadu_si512(xq + r * ldx + i);
            const __m512i ws = _mm512_mask_sub_epi8(w, _mm512_movepi8_mask(xv), zero, w);
            const __m512i d = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(xv), ws);
            s[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(sc[g] * sx[r * ldsx + g]), s[r]);
        }
    }
    for (int r = 0; r < R; ++r) acc[r] += _mm512_reduce_add_ps(s[r]);
#elif defined(__AVX2__)
    // Without VNNI (AVX2 hosts: Zen 3, Haswell to Skylake client): vpmaddubsw multiplies |x| by w with x's sign moved
    // onto it (vpsignb) and adds neighbouring products into int16 (≤ 2·127·127: no saturation), vpmaddwd adds those
    // pairs into int32; a group is two 32-byte halves, widened to int32 apart (their int16 sum could overflow).
    __m256 s[R];
    for (int r = 0; r < R; ++r) s[r] = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (; i + kI8Group <= n; i += kI8Group) {
        const int64_t g = i / kI8Group;
        const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + i));
        const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(q + i + 32));
        for (int r = 0; r < R; ++r) {
            const int8_t *xr = xq + r * ldx + i;
            const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xr));
            const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(xr + 32));
            const __m256i p0 = _mm256_maddubs_epi16(_mm256_sign_epi8(x0, x0), _mm256_sign_epi8(w0, x0));
            const __m256i p1 = _mm256_maddubs_epi16(_mm256_sign_epi8(x1, x1), _mm256_sign_epi8(w1, x1));
            const __m256i d = _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones));
            s[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(sc[g] * sx[r * ldsx + g]), s[r]);
        }
    }
    for (int r = 0; r < R; ++r) acc[r] += hsum(s[r]);
#endif
    for (; i < n;) { // the rest, a group at a time (the compiler vectorises the integer sums)
        const int64_t g = i / kI8Group, end = std::min(n, (g + 1) * kI8Group);
        for (int r = 0; r < R; ++r) {
            int32_t d = 0;
            for (int64_t k = i; k < end; ++k) d += int32_t(xq[r * ldx + k]) * int32_t(q[k]);
            acc[r] = std::fma(float(d), sc[g] * sx[r * ldsx + g], acc[r]); // explicit: as dot_rows' tail
        }
        i = end;
    }
}

// int8 rows for weight_stream. Column chunks start on a group, so a chunk's first scale is its group's. The dot
// path reads the activations' int8 copy (xq, xs: the same layout as x0, the fp32 rows weight_stream passes
// pointers into).
struct I8Rows {
    const int8_t *q;
    const float *scales;
    int64_t I, G, O;
    const float *x0 = nullptr;
    const int8_t *xq = nullptr;
    const float *xs = nullptr;
    static constexpr int64_t kColAlign = kI8Group;
    template <int R> void dot(float *acc, const float *x, int64_t ldx, int64_t o, int64_t c, int64_t n) const {
        const int64_t at = x - x0; // the first row's element c: (row, c) = (at / I, at % I) in the int8 copy too
        dot_rows_q8<R>(acc, xq + at, xs + at / I * G + c / kI8Group, ldx, G, n, q + o * I + c,
                       scales + o * G + c / kI8Group, weight_stream::chunk_ahead<R>(q, I, O, o, c));
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
    if (N <= 0 || O <= 0) return;
    const int64_t G = i8_groups(I);
    // The activations as int8, by the weights' rule; grown once, reused by every later call of this thread.
    thread_local std::vector<int8_t> xq;
    thread_local std::vector<float> xs, xdq;
    xq.resize(size_t(N * I));
    xs.resize(size_t(N * G));
    // The calling thread's buffers, which a parallel region's threads reach through these pointers (their own
    // thread_local copies are empty).
    int8_t *const aq = xq.data();
    float *const as = xs.data();
    // Threads only for many rows: one decoding row is ~1 µs of work, less than starting a parallel region.
#pragma omp parallel for schedule(static) if (N * I >= 65536)
    for (int64_t n = 0; n < N; ++n) quantize_row(aq + n * I, as + n * G, x + n * I, I);
    if (N <= dot_max_rows) {
        weight_stream::linear(y, ldy, x, I8Rows{q, scales, I, G, O, x, aq, as}, b, N, I, O, dot_max_rows);
        return;
    }
    // Many rows: the GEMM multiplies the dequantized activations by the widened weights — the same products.
    xdq.resize(size_t(N * I));
    float *const ad = xdq.data();
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < I; ++i) ad[n * I + i] = as[n * G + i / kI8Group] * float(aq[n * I + i]);
    weight_stream::linear(y, ldy, ad, I8Rows{q, scales, I, G, O}, b, N, I, O, dot_max_rows);
}

void linear_i8(float *y, int64_t ldy, const float *x, const int8_t *q, const float *scales, const float *b, int64_t N,
               int64_t I, int64_t O, bool batch_invariant) {
    linear_i8_with(y, ldy, x, q, scales, b, N, I, O, batch_invariant ? N : kI8DotMaxRows);
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
