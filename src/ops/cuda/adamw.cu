// Fused AdamW: one read of param, grad and both moments, one write of each — the formula of optim/adamw.h, with
// the same scalars (formed in double on the host, rounded once to fp32).
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/ops.h"

#include <cmath>

namespace zaya::cuda {

namespace {

struct AdamWScalars {
    float decay, lerp_coef, b2, one_minus_b2, neg_step_size, bc2_sqrt, eps;
    bool w1_small;
};

__global__ void adamw_kernel(float *param, const float *grad, float *m_, float *v_, int64_t n, AdamWScalars s) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = grad[i], m0 = m_[i];
    const float m = fmaf(s.lerp_coef, g - m0, s.w1_small ? m0 : g);
    const float v = v_[i] * s.b2 + s.one_minus_b2 * g * g;
    m_[i] = m;
    v_[i] = v;
    const float denom = sqrtf(v) / s.bc2_sqrt + s.eps;
    param[i] = param[i] * s.decay + s.neg_step_size * (m / denom);
}

} // namespace

void adamw_update(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, int64_t n, double lr,
                  double weight_decay, double beta1, double beta2, double eps, int64_t step) {
    if (step < 1) fail("adamw: step must be >= 1, got {}", step);
    if (n == 0) return;
    const double bc1 = 1.0 - std::pow(beta1, double(step)), bc2 = 1.0 - std::pow(beta2, double(step));
    const float w1 = float(1.0 - beta1);
    AdamWScalars s{};
    s.decay = float(1.0 - lr * weight_decay);
    s.w1_small = std::fabs(w1) < 0.5f;
    s.lerp_coef = s.w1_small ? w1 : w1 - 1.0f;
    s.b2 = float(beta2);
    s.one_minus_b2 = float(1.0 - beta2);
    s.neg_step_size = float(-(lr / bc1));
    s.bc2_sqrt = float(std::sqrt(bc2));
    s.eps = float(eps);
    adamw_kernel<<<blocks_for(n, 256), 256>>>(param, grad, exp_avg, exp_avg_sq, n, s);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
