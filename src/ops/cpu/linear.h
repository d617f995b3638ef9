// Linear layer in PyTorch layout: y = x·Wᵀ + b.
#pragma once
#include <cstdint>

namespace zaya::cpu {

// y[N,O] = x[N,I] · W[O,I]ᵀ + b[O] (b may be null)
void linear_forward(float *y, const float *x, const float *W, const float *b, int64_t N, int64_t I, int64_t O);

} // namespace zaya::cpu
