// RMSNorm (spec A.2): y = w ⊙ x·rsqrt(mean(x²) + eps), statistics in fp32.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// y[N,D], rstd[N] (saved for backward; may be null), x[N,D], w[D]
void rmsnorm_forward(real *y, real *rstd, const real *x, const real *w, int64_t N, int64_t D, real eps);

// dx[N,D] = (or +=) rstd·(w⊙dy − x̂·mean(w⊙dy⊙x̂)) with x̂ = x·rstd;  dw[D] += Σ_n dy⊙x̂
void rmsnorm_backward(real *dx, real *dw, const real *dy, const real *x, const real *w, const real *rstd, int64_t N,
                      int64_t D, bool accumulate_dx);

} // namespace zaya::cpu
