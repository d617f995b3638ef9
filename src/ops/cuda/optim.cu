// Sums of squares, scaling and Muon's elementwise steps (ops/cuda/optim.h).
#include "ops/cuda/check.cuh"
#include "ops/cuda/optim.h"
#include "optim/sum_squares.h"

#include <algorithm>
#include <vector>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

// One chunk of one range: elements [begin, end) of the base array.
struct Chunk {
    int64_t begin, end;
};

// Block b sums chunk b in double: thread t strides by kThreads, then a fixed tree.
__global__ void __launch_bounds__(kThreads) sum_squares_kernel(double *partial, const float *x, const Chunk *chunks) {
    __shared__ double buf[kThreads];
    const int tid = int(threadIdx.x);
    const int64_t a = chunks[blockIdx.x].begin, b = chunks[blockIdx.x].end;
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

void sum_squares_partials(double *out, const float *base, const int64_t *offsets, const int64_t *lengths,
                          int64_t count) {
    if (count == 0) return;
    // The descriptors and the partials share one scratch buffer: [count] descriptors, then [count] doubles.
    std::vector<Chunk> chunks(static_cast<size_t>(count));
    for (int64_t p = 0; p < count; ++p) chunks[size_t(p)] = {offsets[p], offsets[p] + lengths[p]};
    const size_t nc = chunks.size();
    char *scratch = static_cast<char *>(device_scratch(Scratch::SumSquares, nc * (sizeof(Chunk) + sizeof(double))));
    auto *desc = reinterpret_cast<Chunk *>(scratch);
    auto *partial = reinterpret_cast<double *>(scratch + nc * sizeof(Chunk));
    copy_to_device(desc, chunks.data(), nc * sizeof(Chunk));
    sum_squares_kernel<<<unsigned(nc), kThreads>>>(partial, base, desc);
    ZAYA_CUDA_LAUNCHED();
    copy_to_host(out, partial, nc * sizeof(double)); // waits for the kernel
}

double sum_squares(const float *x, int64_t n) {
    const int64_t chunk = int64_t(sum_squares_chunk(size_t(std::max<int64_t>(n, 0))));
    std::vector<int64_t> offsets, lengths;
    for (int64_t a = 0; a < n; a += chunk) offsets.push_back(a), lengths.push_back(std::min(chunk, n - a));
    std::vector<double> partials(offsets.size());
    sum_squares_partials(partials.data(), x, offsets.data(), lengths.data(), int64_t(offsets.size()));
    double s = 0.0;
    for (double p : partials) s += p;
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
