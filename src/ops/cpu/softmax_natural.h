// The natural softmax of one row of scores, in place: P = e^(t − m), m the row's maximum, sum = Σ P — an fp32 KV
// cache's attention for a decoding row, in the generic loops and the register kernel alike (attention.cpp,
// attention_rows.cpp), with fast_exp vectorised as the prompt path's online softmax. (A bf16 cache's softmax is the
// power-of-two one, softmax_pow2.h.)
#pragma once
#include "core/fastmath.h"

#include <cstdint>
#include <limits>

namespace zaya::cpu {

template <class T> inline void natural_softmax_row(T *t, int64_t len, T &m, T &sum) {
    T mx = -std::numeric_limits<T>::infinity(), s = 0;
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < len; ++i) mx = t[i] > mx ? t[i] : mx; // std::max here stays scalar (GCC 12)
#pragma omp simd reduction(+ : s)
    for (int64_t i = 0; i < len; ++i) s += (t[i] = fast_exp(t[i] - mx));
    m = mx, sum = s;
}

} // namespace zaya::cpu
