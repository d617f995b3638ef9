// The softmax of a bf16 KV cache's attention (ops/cpu/attention.h), in powers of two, so that its probabilities,
// rounded to bf16, do not depend on the maxima a path happens to subtract (a prompt chunk's running maximum over key
// blocks, a decoding row's per key split): scores t are in log2 units, a row's maximum is an integer M = ⌊max t⌋, and
// P = 2^(t − M) is computed as p·2^(⌊t⌋ − M) with p = 2^(t − ⌊t⌋) ∈ [1, 2). Everything before the final power of two
// depends on t alone, so two maxima give results exactly a power of two apart — rounded to bf16 alike — and rescaling
// by 2^(M − M′) is exact. Below 2^−126, 0 (no subnormals). Scores are clamped to ±2^21 (the range of the rounding
// trick below; attention scores are O(10)). Branch-free: the loops that call these vectorise.
#pragma once
#include "core/fastmath.h"

#include <bit>
#include <cstdint>

namespace zaya::cpu::pow2 {

constexpr float kLog2e = 1.44269504088896341f, kLn2 = 0.693147180559945309f, kScoreClamp = 2097152.0f;

inline float clamp_score(float t) { return t < -kScoreClamp ? -kScoreClamp : (t > kScoreClamp ? kScoreClamp : t); }

inline float floor_of(float t) { // for |t| < 2^22: round to an integer by adding 1.5·2^23, then down
    const float r = (t + 12582912.0f) - 12582912.0f;
    return r > t ? r - 1.0f : r;
}

inline float max_of_scores(float m) { return floor_of(clamp_score(m)); } // M from the scores' largest

inline float pow2_int(float e) { // 2^e for an integer e ≤ 0: 0 below −126 (and for −∞)
    // (Clamped above too: a vectorised loop evaluates it for masked-out keys, whose e may be positive.)
    e = e < -127.0f ? -127.0f : (e > 0.0f ? 0.0f : e);
    return std::bit_cast<float>((int32_t(e) + 127) << 23); // exponent field 0 at e = −127: +0
}

inline float exp2_below(float t, float M) { // 2^(t − M) for an integer M ≥ ⌊t⌋
    const float tc = clamp_score(t), fl = floor_of(tc);
    return fast_exp((tc - fl) * kLn2) * pow2_int(fl - M);
}

inline float round_bf16(float p) { // to bf16 and back, nearest even (p finite, as probabilities are)
    const uint32_t b = std::bit_cast<uint32_t>(p);
    return std::bit_cast<float>((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
}

// One row of scores t[len] (log2 units) in place: M = ⌊max⌋, then each P = 2^(t − M) summed into sum and left
// rounded to bf16 (as a float) to weigh the values.
inline void softmax_row(float *t, int64_t len, float &M, float &sum) {
    float m = -kScoreClamp;
#pragma omp simd reduction(max : m)
    for (int64_t i = 0; i < len; ++i) m = t[i] > m ? t[i] : m;
    M = max_of_scores(m);
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) {
        const float p = exp2_below(t[i], M);
        s += p;
        t[i] = round_bf16(p);
    }
    sum = s;
}

} // namespace zaya::cpu::pow2
