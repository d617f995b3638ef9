// RMSNorm (spec A.2): y = w ⊙ x·rsqrt(mean(x²) + eps), statistics in fp32.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// y[N,D], rstd[N] (saved for backward; may be null), x[N,D], w[D]
void rmsnorm_forward(real *y, real *rstd, const real *x, const real *w, int64_t N, int64_t D, real eps);

} // namespace zaya::cpu
