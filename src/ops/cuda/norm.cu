// RMSNorm forward and backward: one block per row, warp-shuffle reductions in fp32.
#include "ops/cuda/check.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/ops.h"

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

__global__ void rmsnorm_forward_kernel(float *y, float *rstd, const float *x, const float *w, int64_t D, float eps) {
    await_previous_kernel();
    const float *xr = x + blockIdx.x * D;
    float ss = 0;
    for (int64_t i = threadIdx.x; i < D; i += kThreads) ss += xr[i] * xr[i];
    const float r = rsqrtf(block_sum(ss) / float(D) + eps);
    if (rstd && threadIdx.x == 0) rstd[blockIdx.x] = r;
    float *yr = y + blockIdx.x * D;
    for (int64_t i = threadIdx.x; i < D; i += kThreads) yr[i] = w[i] * (xr[i] * r);
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

// dw partial sums: block (column tile, row chunk) sums its rows in order.
constexpr int kRowsPerChunk = 64;
__global__ void rmsnorm_dw_partial_kernel(float *partial, const float *dy, const float *x, const float *rstd,
                                          int64_t N, int64_t D) {
    const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (col >= D) return;
    const int64_t r0 = int64_t(blockIdx.y) * kRowsPerChunk, r1 = min(r0 + kRowsPerChunk, N);
    float acc = 0;
    for (int64_t n = r0; n < r1; ++n) acc += dy[n * D + col] * x[n * D + col] * rstd[n];
    partial[int64_t(blockIdx.y) * D + col] = acc;
}

__global__ void sum_rows_into_kernel(float *dst, const float *partial, int64_t rows, int64_t D) {
    const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (col >= D) return;
    float acc = 0;
    for (int64_t r = 0; r < rows; ++r) acc += partial[r * D + col];
    dst[col] += acc;
}

} // namespace

void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D, float eps) {
    if (N == 0) return;
    launch_kernel(rmsnorm_forward_kernel, unsigned(N), kThreads, 0, y, rstd, x, w, D, eps);
}

void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd,
                      int64_t N, int64_t D, bool accumulate_dx) {
    if (N == 0) return;
    rmsnorm_backward_dx_kernel<<<unsigned(N), kThreads, 0, launch_stream()>>>(dx, dy, x, w, rstd, D, accumulate_dx);
    ZAYA_CUDA_LAUNCHED();
    const int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
    DeviceArray<float> partial(size_t(chunks * D));
    rmsnorm_dw_partial_kernel<<<dim3(blocks_for(D, kThreads), unsigned(chunks)), kThreads, 0, launch_stream()>>>(
        partial.data(), dy, x, rstd, N, D);
    ZAYA_CUDA_LAUNCHED();
    sum_rows_into_kernel<<<blocks_for(D, kThreads), kThreads, 0, launch_stream()>>>(dw, partial.data(), chunks, D);
    ZAYA_CUDA_LAUNCHED();
    synchronize(); // `partial` is freed on return
}

} // namespace zaya::cuda
