// The ZAYA1 backward pass: the gradient of the mean next-token cross-entropy w.r.t. every trainable parameter,
// written by hand op by op (llm.c style) in the reverse order of model_forward.
#pragma once
#include "model/activations.h"
#include "model/batch.h"
#include "model/forward.h"
#include "model/params.h"
#include "ops/backend.h"

#include <functional>

namespace zaya {

// Gradient-side buffers of one backward pass, planned once for (config, tokens, sequences).
struct GradScratch {
    RealBuffer buf;
    real *d_res[2];          // [N,D] gradient of the residual stream: layer output / layer input (swapped per layer)
    real *d_res1;            // [N,D]
    real *d_x;               // [N,D] gradient of a norm output (x_norm1 or x_norm2)
    real *d_tmp;             // [N,D] gradient of attn_out / moe_out
    real *d_att;             // [N,Dq]
    real *dq, *dk, *dv;      // [N,Dq], [N,Dk], [N,Dk]
    real *d_vdel;            // [N,Dk/2]
    real *q_pre, *k_pre;     // [N,Dq], [N,Dk] pre-norm q/k, recomputed
    real *dconv, *dz, *dp;   // [N,C], [N,C], [conv p rows, C]
    real *d_rho, *d_carry;   // [N,R] router state gradient (own path; from the next layer's EDA)
    real *d_r1, *d_r2;       // [N,R]
    real *d_rlogits;         // [N,E+1]
    real *dp_sel;            // [N]
    real *dy, *da, *dh, *dxg;// [N,D], [N,I], [N,2I], [N,D]

    static GradScratch plan(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs, Backend &backend);
    static GradScratch plan(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs) {
        return plan(c, max_tokens, max_seqs, cpu_backend());
    }
    static size_t bytes_needed(const ZayaConfig &c, int64_t max_tokens, int64_t max_seqs);
};

// Requires model_forward(m, batch, acts, targets) to have just run with acts.keep_all_layers; runs on acts'
// backend, with m's parameters, `grads` and `s` in its memory (`targets` stays on the host). Overwrites
// acts.logits with the logits' gradient. Adds (+=) into `grads` (a buffer laid out by m.layout), so gradient
// accumulation over micro-batches is a matter of not zeroing between calls. `loss_scale` multiplies the loss
// being differentiated (1/micro-batches for accumulation). `layer_done(l)`, if given, is called as soon as layer
// l's parameter gradients are final (layers in reverse order; nothing later writes them): data parallel starts
// summing them over the ranks while the rest of the backward pass runs. It is not called when no token has a
// target (nothing to differentiate). Returns the LM head backward's mean loss (Backend::lm_head_backward: NaN
// where the backend took it from the forward's stored logits instead; 0 when no token has a target) — the loss of a
// model_forward run with loss_in_backward.
double model_backward(const Model &m, const Batch &batch, Activations &acts, const int32_t *targets, GradScratch &s,
                      real *grads, real loss_scale = 1, const std::function<void(int64_t)> &layer_done = {});

} // namespace zaya
