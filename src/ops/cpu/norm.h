// RMSNorm (spec A.2): y = w ⊙ x·rsqrt(mean(x²) + eps), statistics in fp32.
#pragma once
#include <cstdint>

namespace zaya::cpu {

// y[N,D], rstd[N] (saved for backward; may be null), x[N,D], w[D]
void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D, float eps);

} // namespace zaya::cpu
