// RMSNorm forward and backward: one block per row, warp-shuffle reductions in fp32.
#include "ops/cuda/check.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/ops.h"

#include <cuda_bf16.h>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

// Sum over the block (all threads get the result).
__device__ float block_sum(float v) {
    __shared__ float partial[kThreads / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    float total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += partial[w]; // fixed order: deterministic
    __syncthreads();
    return total;
}

__global__ void rmsnorm_forward_kernel(float *y, __nv_bfloat16 *y16, float *rstd, const float *x, const float *w,
                                       int64_t D, float eps) {
    await_previous_kernel();
    const float *xr = x + blockIdx.x * D;
    float ss = 0;
    for (int64_t i = threadIdx.x; i < D; i += kThreads) ss += xr[i] * xr[i];
    const float r = rsqrtf(block_sum(ss) / float(D) + eps);
    if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
    float *yr = y + blockIdx.x * D;
    __nv_bfloat16 *y16r = y16 ? y16 + blockIdx.x * D : nullptr;
    for (int64_t i = threadIdx.x; i < D; i += kThreads) {
        const float v = w[i] * (xr[i] * r);
        yr[i] = v;
        if (y16r) y16r[i] = __float2bfloat16_rn(v);
    }
}

__global__ void rmsnorm_backward_dx_kernel(float *dx, const float *dy, const float *x, const float *w,
                                           const float *rstd, int64_t D, bool accumulate) {
    const int64_t row = blockIdx.x;
    const float *xr = x + row * D, *dyr = dy + row * D;
    const float r = rstd[row];
    float dot = 0;
    for (int64_t i = threadIdx.x; i < D; i += kThreads) dot += w[i] * dyr[i] * xr[i] * r;
    const float m = block_sum(dot) / float(D);
    float *dxr = dx + row * D;
    for (int64_t i = threadIdx.x; i < D; i += kThreads) {
        const float g = r * (w[i] * dyr[i] - xr[i] * r * m);
        dxr[i] = accumulate ? dxr[i] + g : g;
    }
}

// dw[c] += Σ_n dy[n, c]·x[n, c]·rstd[n]: column c of column_sum_add.
struct RmsnormWeightGrad {
    const float *dy, *x, *rstd;
    int64_t D;
    __device__ float operator()(int64_t n, int64_t c) const { return dy[n * D + c] * x[n * D + c] * rstd[n]; }
};

} // namespace

void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D, float eps,
                     uint16_t *y16) {
    if (N == 0) return;
    launch_kernel(rmsnorm_forward_kernel, unsigned(N), kThreads, 0, y, reinterpret_cast<__nv_bfloat16 *>(y16), rstd, x,
                  w, D, eps);
}

void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd,
                      int64_t N, int64_t D, bool accumulate_dx) {
    if (N == 0) return;
    rmsnorm_backward_dx_kernel<<<unsigned(N), kThreads, 0, launch_stream()>>>(dx, dy, x, w, rstd, D, accumulate_dx);
    ZAYA_CUDA_LAUNCHED();
    column_sum_add<float>(dw, RmsnormWeightGrad{dy, x, rstd, D}, N, D);
}

} // namespace zaya::cuda
