// Linear layer in PyTorch layout: y = x·Wᵀ + b.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// y[N,O] = x[N,I] · W[O,I]ᵀ + b[O] (b may be null)
void linear_forward(real *y, const real *x, const real *W, const real *b, int64_t N, int64_t I, int64_t O);

} // namespace zaya::cpu
