// Newton–Schulz in bf16, as torch and the CPU (muon.h): X stays bf16, each step runs three cuBLASLt bf16 GEMMs
// whose epilogues combine the fp32 product with the bf16 operand it is added to and round once to bf16
// (A = bf16(X·Xᵀ), P = bf16(c·A·A + b·A), X' = bf16(P·X + a·X)) — the roundings of the CPU's fp32 product then
// bf16 combination, with no fp32 product written and read back. The norm is a deterministic two-pass reduction in double (fixed chunks, then the chunks in order),
// applied on the device (no host round trip).
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/muon.h"
#include "ops/cuda/ops.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <utility>

namespace zaya::cuda {

namespace {

constexpr int kNormThreads = 1024;
constexpr int kThreads = 256;

// Round to nearest even, a NaN stays a NaN (as core/dtype.h's f32_to_bf16 and ops.h's to_bf16).
__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// The norms' sums of squares: block (chunk c, matrix b) sums bf16(x_b)² over its kNormChunk elements in double (a
// strided partial per thread, then a fixed tree) into partial[b·chunks + c]; then one thread per matrix adds its
// chunks in order. One block per matrix had a layer's 16 expert matrices (8 MB each at the 1b preset) read by 16
// SMs; the order of every addition still depends on the shapes alone, so the norm is deterministic.
constexpr int64_t kNormChunk = NewtonSchulzBf16::kNormChunk;
static_assert(kNormChunk % kNormThreads == 0);

__global__ void __launch_bounds__(kNormThreads)
    norm_partials_kernel(double *partial, const float *x, int64_t n, int64_t chunks) {
    __shared__ double red[kNormThreads];
    const int tid = int(threadIdx.x);
    const int64_t b = blockIdx.y, c = blockIdx.x, begin = c * kNormChunk;
    const int64_t end = begin + kNormChunk < n ? begin + kNormChunk : n;
    x += b * n;
    double acc = 0.0;
    for (int64_t i = begin + tid; i < end; i += kNormThreads) {
        const double v = double(round_bf16(x[i]));
        acc += v * v;
    }
    red[tid] = acc;
    __syncthreads();
    for (int half = kNormThreads / 2; half > 0; half /= 2) {
        if (tid < half) red[tid] += red[tid + half];
        __syncthreads();
    }
    if (tid == 0) partial[b * chunks + c] = red[0];
}

// norm[b] = max(bf16(√Σ_c partial[b, c]), bf16(eps)). The max is std::max's (a NaN norm stays NaN), as the CPU.
__global__ void norm_finish_kernel(float *norm, const double *partial, int64_t chunks, int64_t count, float eps) {
    const int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b >= count) return;
    double s = 0.0;
    for (int64_t c = 0; c < chunks; ++c) s += partial[b * chunks + c];
    const float nrm = round_bf16(float(sqrt(s))), lo = round_bf16(eps);
    norm[b] = nrm < lo ? lo : nrm;
}

// X = bf16(bf16(x) / norm of its matrix) — a division, as torch's div_ (muon.cpp); matrices of n elements.
__global__ void normalise_kernel(__nv_bfloat16 *X, const float *x, const float *norm, int64_t n, int64_t total) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < total) X[i] = __float2bfloat16_rn(round_bf16(x[i]) / norm[i / n]);
}

__global__ void to_f32_kernel(float *x, const __nv_bfloat16 *X, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __bfloat162float(X[i]);
}

__nv_bfloat16 *bf(uint16_t *p) { return reinterpret_cast<__nv_bfloat16 *>(p); }

} // namespace

NewtonSchulzBf16::NewtonSchulzBf16(size_t max_numel, int64_t max_min_dim, int64_t max_count)
    : max_numel_(max_numel), max_min_dim_(max_min_dim), max_count_(max_count), norm_(size_t(max_count)),
      norm_partials_((max_numel + size_t(kNormChunk) - 1) / size_t(kNormChunk) * size_t(max_count)),
      x16_{DeviceArray<uint16_t>(max_numel * size_t(max_count)), DeviceArray<uint16_t>(max_numel * size_t(max_count))},
      gram16_(size_t(max_min_dim) * size_t(max_min_dim) * size_t(max_count)), poly16_(gram16_.size()) {}

void NewtonSchulzBf16::run(float *x, int64_t rows, int64_t cols, const NewtonSchulzParams &p, int64_t count) {
    if (rows <= 0 || cols <= 0 || size_t(rows) * size_t(cols) > max_numel_ || std::min(rows, cols) > max_min_dim_ ||
        count < 1 || count > max_count_ || count > 65535)
        fail("newton_schulz: {} matrices {}x{} do not fit the workspace ({} of {} elements, Gram side {})", count,
             rows, cols, max_count_, max_numel_, max_min_dim_);
    const int64_t n = rows * cols;
    uint16_t *X = x16_[0].data(), *Xn = x16_[1].data(), *A = gram16_.data(), *P = poly16_.data();
    const int64_t chunks = (n + kNormChunk - 1) / kNormChunk;
    norm_partials_kernel<<<dim3(unsigned(chunks), unsigned(count)), kNormThreads>>>(norm_partials_.data(), x, n,
                                                                                    chunks);
    ZAYA_CUDA_LAUNCHED();
    norm_finish_kernel<<<blocks_for(count, kThreads), kThreads>>>(norm_.data(), norm_partials_.data(), chunks, count,
                                                                  p.eps);
    ZAYA_CUDA_LAUNCHED();
    normalise_kernel<<<blocks_for(count * n, kThreads), kThreads>>>(bf(X), x, norm_.data(), n, count * n);
    ZAYA_CUDA_LAUNCHED();

    const bool tall = rows > cols;        // iterate on Xᵀ, multiplying from the right instead of transposing
    const int64_t k = tall ? cols : rows; // side of the Gram matrix
    const int64_t kk = k * k;
    for (int s = 0; s < p.steps; ++s) {
        // A = bf16(X·Xᵀ) (wide) or bf16(Xᵀ·X) (tall), [k,k].
        if (tall) gemm_bf16_batched(true, false, k, k, rows, 1.0f, X, cols, n, X, cols, n, 0.0f, A, A, k, kk, count);
        else gemm_bf16_batched(false, true, k, k, cols, 1.0f, X, cols, n, X, cols, n, 0.0f, A, A, k, kk, count);
        // P = bf16(c·(A·A) + b·A).
        gemm_bf16_batched(false, false, k, k, k, p.c, A, k, kk, A, k, kk, p.b, A, P, k, kk, count);
        // X' = bf16(P·X + a·X) (wide) or bf16(X·Pᵀ + a·X) (tall): into the other buffer, as X is also an operand.
        if (tall) gemm_bf16_batched(false, true, rows, cols, cols, 1.0f, X, cols, n, P, cols, kk, p.a, X, Xn, cols, n,
                                    count);
        else gemm_bf16_batched(false, false, rows, cols, rows, 1.0f, P, rows, kk, X, cols, n, p.a, X, Xn, cols, n,
                               count);
        std::swap(X, Xn);
    }
    to_f32_kernel<<<blocks_for(count * n, kThreads), kThreads>>>(x, bf(X), count * n);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
