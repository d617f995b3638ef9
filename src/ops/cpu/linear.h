// Linear layer in PyTorch layout: y = x·Wᵀ + b.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// y[N,O] = x[N,I] · W[O,I]ᵀ + b[O] (b may be null)
void linear_forward(real *y, const real *x, const real *W, const real *b, int64_t N, int64_t I, int64_t O);

// Backward of linear_forward; dy may be a strided view (row stride ldy).
// dx[N,I] = (or +=, if accumulate) dy·W;  dW[O,I] += dyᵀ·x;  db[O] += Σ_n dy  (dx, db may be null)
void linear_backward(real *dx, real *dW, real *db, const real *dy, int64_t ldy, const real *x, const real *W, int64_t N,
                     int64_t I, int64_t O, bool accumulate_dx);

} // namespace zaya::cpu
