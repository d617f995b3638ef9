// Global gradient-norm clipping as torch.nn.utils.clip_grad_norm_ (torch 2.15, norm_type 2):
//
//   total = ‖(‖g_1‖, …, ‖g_k‖)‖₂ = √Σ g²  over every trainable parameter's gradient
//   coef  = min(1, max_norm / (total + 1e-6))       (1e-6 added to the norm, then clamped at 1)
//   g    ← g · coef
//
// Differences, on purpose: Σg² is accumulated in double in a fixed order (layout order, fixed chunks), where torch
// takes fp32 per-tensor norms; and a non-finite norm leaves the gradients untouched (torch would multiply them by
// NaN) so the caller can skip the step. The padding between views and non-trainable views (balancing_biases) are
// not part of the norm and are never scaled.
#pragma once
#include "core/real.h"
#include "model/params.h"
#include "ops/backend.h"

namespace zaya {

// Σ g² over the trainable views of one process's gradients (in the backend's memory); data parallel ranks holding
// their own parts use GradSumSquares (optim/grad_norm.h), as Optimizer::grad_norm does.
double grad_sum_squares(const ParamLayout &layout, const real *grads, Backend &backend = cpu_backend());

// min(1, max_norm / (total_norm + 1e-6)); 1 when total_norm is not finite.
double clip_coefficient(double total_norm, double max_norm);

// Multiplies the trainable views of `grads` by `coef` (no-op for coef == 1).
void scale_grads(const ParamLayout &layout, real *grads, double coef, Backend &backend = cpu_backend());

// Computes the global norm, clips in place, returns the norm before clipping (as clip_grad_norm_ does).
double clip_grad_norm(const ParamLayout &layout, real *grads, double max_norm);

} // namespace zaya
