// Sums of squares, scaling and Muon's elementwise steps (ops/cuda/optim.h).
#include "ops/cuda/check.cuh"
#include "ops/cuda/optim.h"

#include <algorithm>
#include <vector>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxChunks = 1024;
constexpr int64_t kMinChunk = int64_t(1) << 15;

// Block b sums x[b·chunk, min((b+1)·chunk, n)) in double: thread t strides by kThreads, then a fixed tree.
__global__ void __launch_bounds__(kThreads) sum_squares_kernel(double *partial, const float *x, int64_t n,
                                                               int64_t chunk) {
    __shared__ double buf[kThreads];
    const int tid = int(threadIdx.x);
    const int64_t a = int64_t(blockIdx.x) * chunk, b = a + chunk < n ? a + chunk : n;
    double s = 0.0;
    for (int64_t i = a + tid; i < b; i += kThreads) s += double(x[i]) * double(x[i]);
    buf[tid] = s;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (tid < half) buf[tid] += buf[tid + half];
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = buf[0];
}

__global__ void scale_kernel(float *x, int64_t n, float c) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= c;
}

// torch's CPU lerp(start, end, w): start + w·(end − start) for |w| < 0.5, else end + (w − 1)·(end − start).
__device__ float lerp_fma(float start, float end, float w) {
    return fabsf(w) < 0.5f ? fmaf(w, end - start, start) : fmaf(w - 1.0f, end - start, end);
}

__global__ void muon_momentum_kernel(float *momentum, float *u, const float *grad, int64_t n, float mu,
                                     bool nesterov) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float g = grad[i], m = lerp_fma(momentum[i], g, 1.0f - mu);
    momentum[i] = m;
    u[i] = nesterov ? lerp_fma(g, m, mu) : m;
}

__global__ void muon_apply_kernel(float *param, const float *u, int64_t n, float decay, float alpha) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) param[i] = fmaf(alpha, u[i], param[i] * decay);
}

} // namespace

double sum_squares(const float *x, int64_t n) {
    if (n <= 0) return 0.0;
    const int64_t chunk = std::max(kMinChunk, (n + kMaxChunks - 1) / kMaxChunks);
    const int64_t chunks = (n + chunk - 1) / chunk;
    auto *partial = static_cast<double *>(device_scratch(Scratch::SumSquares, size_t(chunks) * sizeof(double)));
    sum_squares_kernel<<<unsigned(chunks), kThreads>>>(partial, x, n, chunk);
    ZAYA_CUDA_LAUNCHED();
    std::vector<double> host(static_cast<size_t>(chunks));
    copy_to_host(host.data(), partial, host.size() * sizeof(double)); // waits for the kernel
    double s = 0.0;
    for (double p : host) s += p;
    return s;
}

void scale(float *x, int64_t n, float c) {
    if (n <= 0 || c == 1.0f) return;
    scale_kernel<<<blocks_for(n, kThreads), kThreads>>>(x, n, c);
    ZAYA_CUDA_LAUNCHED();
}

void muon_momentum(float *momentum, float *u, const float *grad, int64_t n, float mu, bool nesterov) {
    if (n <= 0) return;
    muon_momentum_kernel<<<blocks_for(n, kThreads), kThreads>>>(momentum, u, grad, n, mu, nesterov);
    ZAYA_CUDA_LAUNCHED();
}

void muon_apply(float *param, const float *u, int64_t n, float decay, float alpha) {
    if (n <= 0) return;
    muon_apply_kernel<<<blocks_for(n, kThreads), kThreads>>>(param, u, n, decay, alpha);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
