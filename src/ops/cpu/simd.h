// <immintrin.h> for the hand-written AVX-512 / AVX2 kernels (linear_bf16.cpp, linear_i8.cpp), and their shared bits.
//
// GCC 12 reports its own AVX-512 intrinsic headers (_mm512_undefined_* inside them) as using uninitialised values
// once inlined: a known false positive (GCC bug 105593). Including this turns those two warnings off for the rest of
// the file that includes it, and only there: include it from .cpp files only.
#pragma once
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

namespace zaya::cpu {
#if defined(__AVX2__)
// The sum of a vector's 8 floats.
inline float hsum(__m256 v) {
    __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    q = _mm_add_ps(q, _mm_movehl_ps(q, q));
    q = _mm_add_ss(q, _mm_movehdup_ps(q));
    return _mm_cvtss_f32(q);
}
#endif
} // namespace zaya::cpu
