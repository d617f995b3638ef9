#include "ops/cpu/attention_rows_bf16.h"

#include "core/dtype.h"
#include "ops/cpu/simd.h"
#include "ops/cpu/softmax_pow2.h"

#include <algorithm>
#include <array>

namespace zaya::cpu {

#if defined(__AVX512BF16__) && !defined(ZAYA_DOUBLE)
namespace {

constexpr int64_t kHeads = 4, kMaxHeadDim = 512, kChunk = 64; // kChunk: the output dims one pass over the values adds

inline __m512bh load_bh(const uint16_t *p) {
    const __m512i x = _mm512_loadu_si512(p);
    return reinterpret_cast<const __m512bh &>(x);
}

// The four heads' sums of their 16 lanes each, in lanes 0, 4, 8 and 12: halves, then quarters, added in one vector.
inline __m512 sum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    const __m512 a01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, 0x44), _mm512_shuffle_f32x4(a0, a1, 0xEE));
    const __m512 a23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, 0x44), _mm512_shuffle_f32x4(a2, a3, 0xEE));
    // 128-bit block g: head g's four partial sums of four lanes each
    __m512 s = _mm512_add_ps(_mm512_shuffle_f32x4(a01, a23, 0x88), _mm512_shuffle_f32x4(a01, a23, 0xDD));
    s = _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm512_add_ps(s, _mm512_shuffle_ps(s, s, _MM_SHUFFLE(1, 0, 3, 2)));
}

// 32 bf16 values as two vectors of 16 floats (exact).
inline void widen32(__m512 &lo, __m512 &hi, const uint16_t *p) {
    const __m512i h = _mm512_loadu_si512(p);
    lo = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
    hi = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
}

} // namespace

bool attention_item_bf16(float *part, int64_t stride, const float *q, const uint16_t *k, const uint16_t *v,
                         int64_t ldk, int64_t t0, int64_t t1, int64_t G, int64_t hd, float alpha,
                         std::vector<float> &scores) {
    if (G != kHeads || hd % kChunk != 0 || hd > kMaxHeadDim) return false;
    const int64_t len = t1 - t0;
    scores.resize(size_t(kHeads * len));
    float *const sc = scores.data();
    // Scores [G, len]: each key row read once for the four heads, 32 pairs a vdpbf16ps (the queries are bf16 values).
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
    // Per head: M, P = 2^(t − M) summed, and P rounded to bf16 in place (softmax_pow2.h).
    for (int64_t g = 0; g < kHeads; ++g) pow2::softmax_row(sc + g * len, len, part[g * stride], part[g * stride + 1]);
    // Σ bf16(P)·v, kChunk output dims at a time: 16 accumulators, each value row widened once for the four heads.
    for (int64_t d0 = 0; d0 < hd; d0 += kChunk) {
        __m512 acc[kHeads][4];
        for (auto &row : acc)
            for (__m512 &x : row) x = _mm512_setzero_ps();
        for (int64_t t = 0; t < len; ++t) {
            const uint16_t *vr = v + (t0 + t) * ldk + d0;
            __m512 vf[4];
            widen32(vf[0], vf[1], vr);
            widen32(vf[2], vf[3], vr + 32);
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

#else

bool attention_item_bf16(float *, int64_t, const float *, const uint16_t *, const uint16_t *, int64_t, int64_t,
                         int64_t, int64_t, int64_t, float, std::vector<float> &) {
    return false;
}

#endif

} // namespace zaya::cpu
