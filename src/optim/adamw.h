// AdamW, elementwise on ranges of flat buffers, step for step as torch.optim.AdamW (torch 2.15, the
// single-tensor path of torch/optim/adam.py with decoupled_weight_decay=True, amsgrad=False):
//
//   t ← t + 1
//   p ← p·(1 − lr·λ)                          (only when λ ≠ 0; before the moment updates)
//   m ← lerp(m, g, 1−β1)                       = β1·m + (1−β1)·g
//   v ← v·β2 + (1−β2)·g·g
//   bc1 = 1 − β1^t,  bc2 = 1 − β2^t            (double, as Python floats)
//   p ← p − (lr/bc1) · m / (√v / √bc2 + ε)     (ε added *after* the bias correction of √v)
//
// The caller owns m and v (the same range of its state buffers), so ZeRO-1 sharding is a matter of which ranges
// a rank passes in. Vectorised; OpenMP across the range when it is large.
#pragma once
#include "core/real.h"

#include <cstddef>
#include <cstdint>

namespace zaya {

struct AdamWHyper {
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
};

// One AdamW step on n elements; `step` is the step number after incrementing (1 on the first step).
void adamw_update(real *param, const real *grad, real *exp_avg, real *exp_avg_sq, size_t n, double lr,
                  double weight_decay, const AdamWHyper &hyper, int64_t step);

} // namespace zaya
