// Small elementwise ops of the ZAYA1 block: embedding with input scale/bias, residual scaling, GELU, SwiGLU.
#pragma once
#include <cstdint>

namespace zaya::cpu {

// out[N,D] = (table[tokens[n]] + bias) ⊙ scale                                    (spec A.1)
void embedding_forward(float *out, const int32_t *tokens, const float *table, const float *bias, const float *scale,
                       int64_t N, int64_t D);

// out[N,D] = (x + hs_bias) ⊙ hs_scale + (res + res_bias) ⊙ res_scale; out may alias res (spec A.2)
void residual_scale_forward(float *out, const float *x, const float *res, const float *hs_scale, const float *hs_bias,
                            const float *res_scale, const float *res_bias, int64_t N, int64_t D);

// y[n] = x·Φ(x), exact erf form (nn.GELU()); in place allowed
void gelu_forward(float *y, const float *x, int64_t n);

// a[N,I] = silu(h[:, :I]) ⊙ h[:, I:], h[N,2I] (gate first, then up: spec A.5)
void swiglu_forward(float *a, const float *h, int64_t N, int64_t I);

} // namespace zaya::cpu
