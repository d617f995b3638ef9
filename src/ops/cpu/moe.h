// The ZAYA1 MoE pieces (spec A.4, A.5): top-1 selection with balancing biases and the skip slot, and the routed
// SwiGLU experts computed one GEMM pair per expert over tokens grouped by expert.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// probs[N,K] = softmax(logits[N,K]) in fp32; choice[n] = argmax_e(probs[n,e] + bias[e]) (lowest index wins ties);
// p_sel[n] = probs[n, choice[n]] (unbiased). K = E + 1 classes, the last being the skip slot.
void router_select_forward(real *probs, int32_t *choice, real *p_sel, const real *logits, const real *bias,
                           int64_t N, int64_t K);

// Grouping of tokens by expert: order[offsets[e] .. offsets[e+1]) lists (ascending) the tokens routed to expert e,
// for e = 0..E (E = skip slot). offsets has E+2 entries.
void moe_group_tokens(int32_t *order, int64_t *offsets, const int32_t *choice, int64_t N, int64_t E);

struct MoeShape {
    int64_t D, I, E;
    bool skip_passthrough; // skip tokens output p·x (Zyphra original) instead of 0 (transformers)
};

// out[N,D] = p_sel[n] · Down_e(silu(Gate_e x_n) ⊙ Up_e x_n) with e = choice[n].
// gate_up[E,2I,D], down[E,D,I]. Saved for backward, in grouped (sorted) row order:
// xg[N,D] gathered inputs, h[N,2I] gate/up pre-activations, a[N,I] SwiGLU output, y[N,D] unscaled expert output.
void moe_experts_forward(real *out, real *xg, real *h, real *a, real *y, const real *x, const int32_t *order,
                         const int64_t *offsets, const real *p_sel, const real *gate_up, const real *down,
                         int64_t N, const MoeShape &s);

// Backward of router_select_forward through the selected probability: dlogits[N,K] (=) from dp_sel[N].
// (The balancing bias and the argmax carry no gradient.)
void router_select_backward(real *dlogits, const real *dp_sel, const real *probs, const int32_t *choice, int64_t N,
                            int64_t K);

// Backward of moe_experts_forward. dx[N,D] written (=); dp_sel[N] written; expert weight grads +=.
// Scratch (grouped order): dy[N,D], da[N,I], dh[N,2I], dxg[N,D].
void moe_experts_backward(real *dx, real *dp_sel, real *dgate_up, real *ddown, real *dy, real *da, real *dh,
                          real *dxg, const real *dout, const int32_t *order, const int64_t *offsets,
                          const real *p_sel, const real *xg, const real *h, const real *a, const real *y,
                          const real *gate_up, const real *down, int64_t N, const MoeShape &s);

} // namespace zaya::cpu
