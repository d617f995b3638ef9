// Small elementwise ops of the ZAYA1 block: embedding with input scale/bias, residual scaling, GELU, SwiGLU.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// out[N,D] = (table[tokens[n]] + bias) ⊙ scale                                    (spec A.1)
void embedding_forward(real *out, const int32_t *tokens, const real *table, const real *bias, const real *scale,
                       int64_t N, int64_t D);

// out[N,D] = (x + hs_bias) ⊙ hs_scale + (res + res_bias) ⊙ res_scale; out may alias res (spec A.2)
void residual_scale_forward(real *out, const real *x, const real *res, const real *hs_scale, const real *hs_bias,
                            const real *res_scale, const real *res_bias, int64_t N, int64_t D);

// y[n] = x·Φ(x), exact erf form (nn.GELU()); in place allowed
void gelu_forward(real *y, const real *x, int64_t n);

// a[N,I] = silu(h[:, :I]) ⊙ h[:, I:], h[N,2I] (gate first, then up: spec A.5)
void swiglu_forward(real *a, const real *h, int64_t N, int64_t I);

} // namespace zaya::cpu
