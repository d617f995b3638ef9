// Elementwise ops of the ZAYA1 block on the GPU: residual scaling, embedding, SwiGLU, GELU, bf16 conversion.
#include "ops/cuda/check.cuh"
#include "ops/cuda/ops.h"
#include "ops/cuda/residual_scale.cuh"
#include "ops/cuda/swiglu.cuh"

#include <cuda_bf16.h>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void residual_scale_kernel(float *out, const float *x, const float *res, const float *hs_scale,
                                      const float *hs_bias, const float *res_scale, const float *res_bias, int64_t n,
                                      int64_t D) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const int64_t i = k % D;
    out[k] = residual_scaled(x[k], res[k], hs_scale, hs_bias, res_scale, res_bias, i);
}

__global__ void embedding_kernel(float *out, const int32_t *tokens, const float *table, const float *bias,
                                 const float *scale, int64_t n, int64_t D) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const int64_t row = k / D, i = k % D;
    out[k] = (table[int64_t(tokens[row]) * D + i] + bias[i]) * scale[i];
}

__global__ void swiglu_forward_kernel(float *a, const float *h, int64_t n, int64_t I) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const int64_t row = k / I, i = k % I;
    a[k] = swiglu_value(h[row * 2 * I + i], h[row * 2 * I + I + i]);
}

__global__ void swiglu_backward_kernel(float *dh, const float *da, const float *h, int64_t n, int64_t I) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const int64_t row = k / I, i = k % I;
    swiglu_grads(h[row * 2 * I + i], h[row * 2 * I + I + i], da[k], dh[row * 2 * I + i], dh[row * 2 * I + I + i]);
}

__global__ void gelu_kernel(float *y, const float *x, int64_t n) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= n) return;
    y[k] = 0.5f * x[k] * (1.0f + erff(x[k] * 0.70710678118654752f));
}

__global__ void to_bf16_kernel(__nv_bfloat16 *dst, const float *src, int64_t n) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k < n) dst[k] = __float2bfloat16_rn(src[k]);
}

__global__ void to_bf16_rows_kernel(__nv_bfloat16 *dst, const float *src, int64_t cols, int64_t ld, int64_t n) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k < n) dst[k] = __float2bfloat16_rn(src[k / cols * ld + k % cols]);
}

} // namespace

void residual_scale_forward(float *out, const float *x, const float *res, const float *hs_scale, const float *hs_bias,
                            const float *res_scale, const float *res_bias, int64_t N, int64_t D) {
    if (N * D == 0) return;
    residual_scale_kernel<<<blocks_for(N * D, kThreads), kThreads, 0, launch_stream()>>>(out, x, res, hs_scale, hs_bias,
                                                                                         res_scale, res_bias, N * D, D);
    ZAYA_CUDA_LAUNCHED();
}

void embedding_forward(float *out, const int32_t *tokens, const float *table, const float *bias, const float *scale,
                       int64_t N, int64_t D) {
    if (N * D == 0) return;
    embedding_kernel<<<blocks_for(N * D, kThreads), kThreads, 0, launch_stream()>>>(out, tokens, table, bias, scale,
                                                                                    N * D, D);
    ZAYA_CUDA_LAUNCHED();
}

void swiglu_forward(float *a, const float *h, int64_t N, int64_t I) {
    if (N * I == 0) return;
    swiglu_forward_kernel<<<blocks_for(N * I, kThreads), kThreads, 0, launch_stream()>>>(a, h, N * I, I);
    ZAYA_CUDA_LAUNCHED();
}

void swiglu_backward(float *dh, const float *da, const float *h, int64_t N, int64_t I) {
    if (N * I == 0) return;
    swiglu_backward_kernel<<<blocks_for(N * I, kThreads), kThreads, 0, launch_stream()>>>(dh, da, h, N * I, I);
    ZAYA_CUDA_LAUNCHED();
}

void gelu_forward(float *y, const float *x, int64_t n) {
    if (n == 0) return;
    gelu_kernel<<<blocks_for(n, kThreads), kThreads, 0, launch_stream()>>>(y, x, n);
    ZAYA_CUDA_LAUNCHED();
}

void to_bf16_rows(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
    if (rows * cols == 0) return;
    if (ld == cols) return to_bf16(dst, src, rows * cols);
    to_bf16_rows_kernel<<<blocks_for(rows * cols, kThreads), kThreads, 0, launch_stream()>>>(
        reinterpret_cast<__nv_bfloat16 *>(dst), src, cols, ld, rows * cols);
    ZAYA_CUDA_LAUNCHED();
}

void to_bf16(uint16_t *dst, const float *src, int64_t n) {
    if (n == 0) return;
    to_bf16_kernel<<<blocks_for(n, kThreads), kThreads, 0, launch_stream()>>>(reinterpret_cast<__nv_bfloat16 *>(dst),
                                                                              src, n);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
