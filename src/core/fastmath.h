// exp for the hot loops (softmax, cross-entropy, SiLU): a branch-free Cephes-style polynomial that the compiler
// vectorises inside `#pragma omp simd` loops (std::exp does not vectorise without -ffast-math). Relative error
// ≤ 2 ulp over the whole range; inputs below −87.3 give ~1e-38 instead of 0 (callers never rely on exact 0).
// The fp64 build (ZAYA_DOUBLE) uses std::exp, so finite-difference tests see the exact function.
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

namespace zaya {

inline float fast_exp(float x) {
    x = x < -87.3f ? -87.3f : (x > 88.7f ? 88.7f : x);
    // n = round(x / ln2) by the 1.5·2^23 trick (floorf would not vectorise under -ftrapping-math)
    const float shifted = x * 1.44269504088896341f + 12582912.0f;
    const float n = shifted - 12582912.0f;
    // x − n·ln2 in two parts (Cody–Waite) so the reduction stays exact
    const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t ni = std::bit_cast<int32_t>(shifted) - 0x4B400000;
    return p * std::bit_cast<float>((ni + 127) << 23);
}

inline double fast_exp(double x) { return std::exp(x); }

} // namespace zaya
