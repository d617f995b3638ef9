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

// Backward of embedding_forward. dtable rows of `skip_token` (the padding id, as nn.Embedding(padding_idx))
// receive nothing from the lookup; pass −1 to update every row. dtable/dbias/dscale accumulate.
void embedding_backward(real *dtable, real *dbias, real *dscale, const real *dout, const int32_t *tokens,
                        const real *table, const real *bias, const real *scale, int64_t N, int64_t D,
                        int32_t skip_token);

// Backward of residual_scale_forward: dx, dres written (=) unless accumulate_dres (dres +=); parameter grads +=.
void residual_scale_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias, real *d_res_scale,
                             real *d_res_bias, const real *dout, const real *x, const real *res, const real *hs_scale,
                             const real *hs_bias, const real *res_scale, const real *res_bias, int64_t N, int64_t D,
                             bool accumulate_dres);

// dx = dy · (Φ(x) + x·φ(x)); in place allowed (dx may alias dy)
void gelu_backward(real *dx, const real *dy, const real *x, int64_t n);

// dh[N,2I] from da[N,I] and the saved h = gate‖up
void swiglu_backward(real *dh, const real *da, const real *h, int64_t N, int64_t I);

} // namespace zaya::cpu
