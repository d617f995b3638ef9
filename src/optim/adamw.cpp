#include "optim/adamw.h"

#include "core/error.h"
#include "core/parallel.h"

#include <cmath>

namespace zaya {

void adamw_update(real *param, const real *grad, real *exp_avg, real *exp_avg_sq, size_t n, double lr,
                  double weight_decay, const AdamWHyper &hyper, int64_t step) {
    if (step < 1) fail("adamw: step must be >= 1, got {}", step);
    // Scalars are formed in double and rounded once to `real`, as torch turns Python floats into opmath scalars.
    const double bc1 = 1.0 - std::pow(hyper.beta1, double(step));
    const double bc2 = 1.0 - std::pow(hyper.beta2, double(step));
    const real decay = real(1.0 - lr * weight_decay); // exactly 1 when weight_decay = 0: a no-op, as torch skips it
    // torch's CPU lerp: start + w·(end − start) for |w| < 0.5, else end + (w − 1)·(end − start), as an FMA.
    const real w1 = real(1.0 - hyper.beta1);
    const bool w1_small = std::fabs(w1) < real(0.5);
    const real lerp_coef = w1_small ? w1 : w1 - real(1);
    const real b2 = real(hyper.beta2), one_minus_b2 = real(1.0 - hyper.beta2);
    const real neg_step_size = real(-(lr / bc1));
    const real bc2_sqrt = real(std::sqrt(bc2));
    const real eps = real(hyper.eps);
    // No `simd`: with errno-setting sqrt (the project does not pass -fno-math-errno) neither GCC nor clang vectorises
    // this loop, and clang turns a failed `omp simd` into an error. The loop is memory-bound anyway.
#pragma omp parallel for if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) {
        const real g = grad[i], m0 = exp_avg[i];
        const real m = std::fma(lerp_coef, g - m0, w1_small ? m0 : g);
        const real v = exp_avg_sq[i] * b2 + one_minus_b2 * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        const real denom = std::sqrt(v) / bc2_sqrt + eps;
        param[i] = param[i] * decay + neg_step_size * (m / denom);
    }
}

} // namespace zaya
