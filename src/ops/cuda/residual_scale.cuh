// The learned residual scaling's arithmetic (spec A.6), shared by the training's kernels and the decode step's fused
// tail: one element of the block output y and the residual stream r, column i of the four [D] parameters.
#pragma once
#include "ops/cuda/check.cuh"

#include <cstdint>

namespace zaya::cuda {

// (y + hs_bias)·hs_scale + (r + res_bias)·res_scale
__device__ inline float residual_scaled(float y, float r, const float *hs_scale, const float *hs_bias,
                                        const float *res_scale, const float *res_bias, int64_t i) {
    return (y + hs_bias[i]) * hs_scale[i] + (r + res_bias[i]) * res_scale[i];
}

} // namespace zaya::cuda
