#include "ops/cpu/attention_rows.h"

#include "core/dtype.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/softmax_natural.h"
#include "ops/cpu/softmax_pow2.h"

#include <array>

namespace zaya::cpu {

#if defined(__AVX512F__) && !defined(ZAYA_DOUBLE)
namespace {

constexpr int64_t kHeads = 4, kMaxHeadDim = 512, kChunk = 64; // kChunk: the output dims one pass over the values adds

// The four heads' sums of their 16 lanes each, in lanes 0, 4, 8 and 12: halves, then quarters, added in one vector.
inline __m512 sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 a01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    const __m512 a23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    // 128-bit block g: head g's four partial sums of four lanes each
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(a01, a23, 0x88), _mm512_shuffle_f32x4(a01, a23, 0xDD));
    s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(1, 0, 3, 2)));
}

// 64 consecutive cache values as four vectors of 16 floats (bf16 widened exactly).
inline void load64(__m512 *f, const float *p) {
    for (int u = 0; u < 4; ++u) f[u] = _mm512_loadu_ps(p + 16 * u);
}
inline void load64(__m512 *f, const uint16_t *p) {
    for (int u = 0; u < 2; ++u) {
        const __m512i h = _mm512_loadu_si512(p + 32 * u);
        f[2 * u] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
        f[2 * u + 1] =
            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
    }
}

// sc[g·len + t] = alpha·(q_g · k_t) for the four heads, each key row read once for them. fp32: FMAs (the queries
// read from L1 as memory operands: 32 registers would not hold them); bf16: vdpbf16ps, 32 pairs at a time, on the
// queries' bf16 bits (they are bf16 values).
void scores4(float *sc, int64_t len, const float *q, const float *k, int64_t ldk, int64_t t0, int64_t hd,
             float alpha) {
    for (int64_t t = 0; t < len; ++t) {
        const float *kr = k + (t0 + t) * ldk;
        __m512 a[kHeads] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t d = 0; d < hd; d += 16) {
            const __m512 kv = _mm512_loadu_ps(kr + d);
            for (int64_t g = 0; g < kHeads; ++g) a[g] = _mm512_fmadd_ps(_mm512_loadu_ps(q + g * hd + d), kv, a[g]);
        }
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, sum4(a[0], a[1], a[2], a[3]));
        for (int64_t g = 0; g < kHeads; ++g) sc[g * len + t] = lanes[4 * g] * alpha;
    }
}
#if defined(__AVX512BF16__)
inline __m512bh load_bh(const uint16_t *p) {
    const __m512i x = _mm512_loadu_si512(p);
    return reinterpret_cast<const __m512bh &>(x);
}
void scores4(float *sc, int64_t len, const float *q, const uint16_t *k, int64_t ldk, int64_t t0, int64_t hd,
             float alpha) {
    std::array<uint16_t, kHeads * kMaxHeadDim> q16;
    for (int64_t i = 0; i < kHeads * hd; ++i) q16[size_t(i)] = f32_to_bf16(q[i]);
    for (int64_t t = 0; t < len; ++t) {
        const uint16_t *kr = k + (t0 + t) * ldk;
        __m512 a[kHeads] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
        for (int64_t d = 0; d < hd; d += 32) {
            const __m512bh kv = load_bh(kr + d);
            for (int64_t g = 0; g < kHeads; ++g) a[g] = _mm512_dpbf16_ps(a[g], load_bh(q16.data() + g * hd + d), kv);
        }
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, sum4(a[0], a[1], a[2], a[3]));
        for (int64_t g = 0; g < kHeads; ++g) sc[g * len + t] = lanes[4 * g] * alpha;
    }
}
#endif

// One head's row of scores in place → the values' weights, its maximum m and Σ P. fp32: the natural softmax
// (softmax_natural.h); bf16: the power-of-two one, P rounded (softmax_pow2.h).
void softmax_row(const float *, float *t, int64_t len, float &m, float &sum) { natural_softmax_row(t, len, m, sum); }
void softmax_row(const uint16_t *, float *t, int64_t len, float &m, float &sum) { pow2::softmax_row(t, len, m, sum); }

template <class KV>
bool item(float *part, int64_t stride, const float *q, const KV *k, const KV *v, int64_t ldk, int64_t t0, int64_t t1,
          int64_t G, int64_t hd, float alpha, std::vector<float> &scores) {
    if (G != kHeads || hd % kChunk != 0 || hd > kMaxHeadDim) return false;
    const int64_t len = t1 - t0;
    scores.resize(size_t(kHeads * len));
    float *const sc = scores.data();
    scores4(sc, len, q, k, ldk, t0, hd, alpha);
    for (int64_t g = 0; g < kHeads; ++g) softmax_row(k, sc + g * len, len, part[g * stride], part[g * stride + 1]);
    // Σ P·v, kChunk output dims at a time: 16 accumulators, each value row loaded (widened) once for the four heads.
    for (int64_t d0 = 0; d0 < hd; d0 += kChunk) {
        __m512 acc[kHeads][4];
        for (auto &row : acc)
            for (__m512 &x : row) x = _mm512_setzero_ps();
        for (int64_t t = 0; t < len; ++t) {
            __m512 vf[4];
            load64(vf, v + (t0 + t) * ldk + d0);
            for (int64_t g = 0; g < kHeads; ++g) {
                const __m512 p = _mm512_set1_ps(sc[g * len + t]);
                for (int u = 0; u < 4; ++u) acc[g][u] = _mm512_fmadd_ps(p, vf[u], acc[g][u]);
            }
        }
        for (int64_t g = 0; g < kHeads; ++g)
            for (int u = 0; u < 4; ++u) _mm512_storeu_ps(part + g * stride + 2 + d0 + 16 * u, acc[g][u]);
    }
    return true;
}

} // namespace

bool attention_item(float *part, int64_t stride, const float *q, const float *k, const float *v, int64_t ldk,
                    int64_t t0, int64_t t1, int64_t G, int64_t hd, float alpha, std::vector<float> &scores) {
    return item(part, stride, q, k, v, ldk, t0, t1, G, hd, alpha, scores);
}
bool attention_item(float *part, int64_t stride, const float *q, const uint16_t *k, const uint16_t *v, int64_t ldk,
                    int64_t t0, int64_t t1, int64_t G, int64_t hd, float alpha, std::vector<float> &scores) {
#if defined(__AVX512BF16__)
    return item(part, stride, q, k, v, ldk, t0, t1, G, hd, alpha, scores);
#else
    (void)part, (void)stride, (void)q, (void)k, (void)v, (void)ldk, (void)t0, (void)t1, (void)G, (void)hd;
    (void)alpha, (void)scores;
    return false;
#endif
}

#else

bool attention_item(float *, int64_t, const float *, const float *, const float *, int64_t, int64_t, int64_t,
                    int64_t, int64_t, float, std::vector<float> &) {
    return false;
}
bool attention_item(float *, int64_t, const float *, const uint16_t *, const uint16_t *, int64_t, int64_t, int64_t,
                    int64_t, int64_t, float, std::vector<float> &) {
    return false;
}

#endif

} // namespace zaya::cpu
