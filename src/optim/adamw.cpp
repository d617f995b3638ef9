#include "optim/adamw.h"

#include "core/error.h"

#include <cmath>

namespace zaya {

namespace {
constexpr size_t kParallelMin = size_t(1) << 15;
}

void adamw_update(real *param, const real *grad, real *exp_avg, real *exp_avg_sq, size_t n, double lr,
                  double weight_decay, const AdamWHyper &hyper, int64_t step) {
    if (step < 1) fail("adamw: step must be >= 1, got {}", step);
    // Scalars are formed in double and rounded once to `real`, as torch turns Python floats into opmath scalars.
    const double bc1 = 1.0 - std::pow(hyper.beta1, double(step));
    const double bc2 = 1.0 - std::pow(hyper.beta2, double(step));
    const real decay = real(1.0 - lr * weight_decay);
    const bool apply_decay = weight_decay != 0.0;
    const real w1 = real(1.0 - hyper.beta1); // lerp weight; (1−β1) < 0.5 for any sensible β1
    const bool w1_small = std::fabs(w1) < real(0.5);
    const real b2 = real(hyper.beta2), one_minus_b2 = real(1.0 - hyper.beta2);
    const real neg_step_size = real(-(lr / bc1));
    const real bc2_sqrt = real(std::sqrt(bc2));
    const real eps = real(hyper.eps);
#pragma omp parallel for simd if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) {
        const real g = grad[i];
        real p = param[i];
        if (apply_decay) p *= decay;
        const real m0 = exp_avg[i];
        const real m = w1_small ? std::fma(w1, g - m0, m0) : std::fma(w1 - real(1), g - m0, g);
        const real v = exp_avg_sq[i] * b2 + one_minus_b2 * g * g;
        exp_avg[i] = m;
        exp_avg_sq[i] = v;
        const real denom = std::sqrt(v) / bc2_sqrt + eps;
        param[i] = p + neg_step_size * (m / denom);
    }
}

} // namespace zaya
