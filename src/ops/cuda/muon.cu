// Newton–Schulz on bf16 GEMMs: per step three bf16 roundings (X, A, P) feed three cuBLASLt GEMMs; the norm is a
// deterministic one-block reduction in double, applied on the device (no host round trip).
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/muon.h"
#include "ops/cuda/ops.h"

#include <algorithm>
#include <utility>

namespace zaya::cuda {

namespace {

constexpr int kNormThreads = 1024;

// norm[0] = max(√Σx², eps): one block, each thread a strided partial sum in double, then a fixed tree.
__global__ void __launch_bounds__(kNormThreads)
    frobenius_norm_kernel(float *norm, const float *x, int64_t n, float eps) {
    __shared__ double partial[kNormThreads];
    const int tid = int(threadIdx.x);
    double acc = 0.0;
    for (int64_t i = tid; i < n; i += kNormThreads) acc += double(x[i]) * double(x[i]);
    partial[tid] = acc;
    __syncthreads();
    for (int half = kNormThreads / 2; half > 0; half /= 2) {
        if (tid < half) partial[tid] += partial[tid + half];
        __syncthreads();
    }
    if (tid == 0) norm[0] = fmaxf(float(sqrt(partial[0])), eps);
}

// x[i] /= norm[0] — a division, as torch's div_ (muon.cpp).
__global__ void divide_by_kernel(float *x, const float *norm, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] /= norm[0];
}

} // namespace

NewtonSchulzBf16::NewtonSchulzBf16(size_t max_numel, int64_t max_min_dim)
    : max_numel_(max_numel), max_min_dim_(max_min_dim), y_(max_numel),
      gram_(size_t(max_min_dim) * size_t(max_min_dim)), poly_(gram_.size()), norm_(1), x16_(max_numel),
      gram16_(gram_.size()), poly16_(gram_.size()) {}

void NewtonSchulzBf16::run(float *x, int64_t rows, int64_t cols, const NewtonSchulzParams &p) {
    if (rows <= 0 || cols <= 0 || size_t(rows) * size_t(cols) > max_numel_ || std::min(rows, cols) > max_min_dim_)
        fail("newton_schulz: matrix {}x{} does not fit the workspace ({} elements, Gram side {})", rows, cols,
             max_numel_, max_min_dim_);
    const int64_t n = rows * cols;
    frobenius_norm_kernel<<<1, kNormThreads>>>(norm_.data(), x, n, p.eps);
    ZAYA_CUDA_LAUNCHED();
    divide_by_kernel<<<blocks_for(n, 256), 256>>>(x, norm_.data(), n);
    ZAYA_CUDA_LAUNCHED();

    const bool tall = rows > cols;        // iterate on Xᵀ, multiplying from the right instead of transposing
    const int64_t k = tall ? cols : rows; // side of the Gram matrix
    float *cur = x, *next = y_.data(), *A = gram_.data(), *P = poly_.data();
    uint16_t *X16 = x16_.data(), *A16 = gram16_.data(), *P16 = poly16_.data();
    for (int s = 0; s < p.steps; ++s) {
        to_bf16(X16, cur, n);
        // A = X·Xᵀ (wide) or Xᵀ·X (tall), [k,k].
        if (tall) gemm_bf16(true, false, k, k, rows, 1.0f, X16, cols, X16, cols, 0.0f, A, k);
        else gemm_bf16(false, true, k, k, cols, 1.0f, X16, cols, X16, cols, 0.0f, A, k);
        // P = b·A + c·A·A: P starts as the fp32 A, the GEMM adds c·A·A from bf16 A.
        to_bf16(A16, A, k * k);
        copy_on_device(P, A, size_t(k * k) * sizeof(float));
        gemm_bf16(false, false, k, k, k, p.c, A16, k, A16, k, p.b, P, k);
        // next = a·X + P·X (wide) or a·X + X·Pᵀ (tall): next starts as the fp32 X.
        to_bf16(P16, P, k * k);
        copy_on_device(next, cur, size_t(n) * sizeof(float));
        if (tall) gemm_bf16(false, true, rows, cols, cols, 1.0f, X16, cols, P16, cols, p.a, next, cols);
        else gemm_bf16(false, false, rows, cols, rows, 1.0f, P16, rows, X16, cols, p.a, next, cols);
        std::swap(cur, next);
    }
    if (cur != x) copy_on_device(x, cur, size_t(n) * sizeof(float)); // an odd number of steps ends in y_
}

} // namespace zaya::cuda
