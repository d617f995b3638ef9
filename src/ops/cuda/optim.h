// The optimizer's elementwise pieces on the GPU (optim/*.h): deterministic sums of squares for the gradient norm,
// gradient scaling for clipping, and Muon's momentum and update around NewtonSchulzBf16 (muon.h); AdamW is
// adamw_update in ops.h.
#pragma once
#include <cstdint>

namespace zaya::cuda {

// Σ x[i]² in double: fixed chunks (sum_squares_chunk of optim/sum_squares.h; one block each, a fixed tree inside),
// the chunks' partial sums added on the host in order — the same bits on every run.
double sum_squares(const float *x, int64_t n);
// out[p] (host) = Σ x² over piece p, [offsets[p], offsets[p] + lengths[p]) of base (host arrays, `count` pieces), as
// one chunk of sum_squares: one launch and one download for all of them (the gradient norm's pieces,
// optim/grad_norm.h).
void sum_squares_partials(double *out, const float *base, const int64_t *offsets, const int64_t *lengths,
                          int64_t count);

// x[n] *= c
void scale(float *x, int64_t n, float c);

// Muon's momentum and Nesterov combination (optim/muon.cpp, torch's lerp as FMAs):
//   momentum ← lerp(momentum, grad, 1−μ);  u ← nesterov ? lerp(grad, momentum, μ) : momentum
void muon_momentum(float *momentum, float *u, const float *grad, int64_t n, float mu, bool nesterov);

// Muon's update: param ← alpha·u + param·decay (decay = 1 − lr·λ, alpha = −lr·s(rows, cols)), one FMA.
void muon_apply(float *param, const float *u, int64_t n, float decay, float alpha);

} // namespace zaya::cuda
