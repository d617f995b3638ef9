// SwiGLU's arithmetic, shared by the elementwise kernels and the MoE experts: a = silu(g)·u and its gradients.
#pragma once
#include "ops/cuda/check.cuh"

namespace zaya::cuda {

__device__ inline float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// From da = ∂L/∂a: dg = da·u·σ(g)(1 + g(1 − σ(g))), du = da·g·σ(g).
__device__ inline void swiglu_grads(float g, float u, float da, float &dg, float &du) {
    const float sig = 1.0f / (1.0f + expf(-g));
    du = da * g * sig;
    dg = da * u * sig * (1.0f + g * (1.0f - sig));
}

} // namespace zaya::cuda
