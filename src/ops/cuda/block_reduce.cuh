// Block-wide sum and max through shared memory: a fixed tree, so results are deterministic, and no warp
// intrinsics. Every thread of the block must call them (they contain barriers) and gets the result.
#pragma once
#include "ops/cuda/check.cuh"

namespace zaya::cuda {

// kThreads: the block size, a power of two.
template <int kThreads, class Op> __device__ float block_reduce(float v, Op op) {
    static_assert((kThreads & (kThreads - 1)) == 0, "block size must be a power of two");
    __shared__ float buf[kThreads];
    const int tid = int(threadIdx.x);
    buf[tid] = v;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (tid < half) buf[tid] = op(buf[tid], buf[tid + half]);
        __syncthreads();
    }
    const float result = buf[0];
    __syncthreads(); // buf is reused by the next call
    return result;
}

struct SumOp {
    __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <int kThreads> __device__ float block_sum(float v) { return block_reduce<kThreads>(v, SumOp{}); }
template <int kThreads> __device__ float block_max(float v) { return block_reduce<kThreads>(v, MaxOp{}); }

} // namespace zaya::cuda
