// <immintrin.h> for the hand-written AVX-512 / AVX2 kernels (linear_bf16.cpp, linear_i8.cpp).
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
