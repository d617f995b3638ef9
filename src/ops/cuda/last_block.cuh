// "The last block to finish does the rest": a kernel whose blocks each write part of a result (a linear's outputs,
// a split of attention's keys) and a short step that needs all of it (the row's RMSNorm, the splits' combine) run
// as one kernel, not two. In a decode step at batch 1 the kernels are short and a kernel boundary costs about as
// much as the step after it, so this removes the boundary. Each block counts itself in when its part is written;
// the block that brings the count to the group's size sees every other block's writes and goes on.
#pragma once
#include "ops/cuda/check.cuh"

namespace zaya::cuda {

// Called once by every thread of every block of a group of `blocks` blocks (sharing `counter`), after its writes
// of the group's parts. True in every thread of the one block that arrives last, false in all others. That block
// resets the counter to 0, so the next launch (a graph replay) finds it as the first did: counters start zeroed
// once, when allocated, and every launch leaves them so. Reads of the other blocks' parts must bypass L1 (load_l2),
// which is not coherent between SMs.
__device__ __forceinline__ bool arrive_last(unsigned *counter, unsigned blocks) {
    __shared__ bool last;
    __threadfence(); // this thread's writes are visible device-wide before its block is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == blocks - 1;
        if (last) *counter = 0; // every block has arrived: none reads it again in this launch
    }
    __syncthreads();
    if (last) __threadfence(); // order the counter's read before this block's reads of the parts
    return last;
}

// A load from L2 (ld.global.cg): another block's write, seen after arrive_last.
template <class T> __device__ __forceinline__ T load_l2(const T *p) { return __ldcg(p); }

} // namespace zaya::cuda
