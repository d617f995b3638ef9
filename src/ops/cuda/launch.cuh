// Launches for the kernels of a decode step: programmatic dependent launch (PDL, sm_90+). A decode step at batch 1
// is 7 short kernels per layer; between two dependent kernels the GPU would otherwise drain the first, then
// launch the second. With PDL the next kernel's blocks are launched while the previous one still runs, wait in
// `await_previous_kernel()` until it has finished (its writes visible), and can meanwhile pull their weights into
// L2 (`prefetch_l2`): the weights are never written by a step, so reading them early is safe.
//
// Rules for a kernel launched by launch_kernel: `await_previous_kernel()` comes before its first read of anything
// an earlier kernel writes and before its first write; only prefetches of data no kernel writes may precede it.
// (Once a kernel has waited, the one after it may launch; since that one waits for this one, which waited for the
// one before, the order of the stream holds transitively.) Launched on the legacy stream (eager passes, training)
// or with ZAYA_CUDA_PDL=0, the launch is an ordinary one and the wait a no-op.
#pragma once
#include "core/error.h"
#include "ops/cuda/check.cuh"

#include <utility>

namespace zaya::cuda {

__device__ __forceinline__ void await_previous_kernel() {
#if defined(ZAYA_CUDA_EMULATION)
    ::emu::grid_dependency_wait();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Pulls [p, p + bytes) into L2, one request per 128-byte line, spread over `lanes` threads (this one is `lane`).
__device__ __forceinline__ void prefetch_l2(const void *p, int64_t bytes, int lane, int lanes) {
#if defined(__CUDA_ARCH__)
    const char *c = static_cast<const char *>(p);
    for (int64_t at = int64_t(lane) * 128; at < bytes; at += int64_t(lanes) * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c + at));
#else
    (void)p, (void)bytes, (void)lane, (void)lanes;
#endif
}

// kernel<<<grid, block, shared, launch_stream()>>>(args...), with PDL when the stream is not the legacy one (a
// decode step's graph) and dependent_launch_enabled().
template <class... Params, class... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, Args &&...args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = shared, cfg.stream = launch_stream();
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    const bool dependent = cfg.stream != nullptr && dependent_launch_enabled();
    cfg.attrs = dependent ? attr : nullptr, cfg.numAttrs = dependent ? 1 : 0;
    const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
    if (e != cudaSuccess && dependent)
        fail("a dependent kernel launch failed: {} (ZAYA_CUDA_PDL=0 launches without programmatic dependent launch)",
             cudaGetErrorString(e));
    ZAYA_CUDA_CHECK(e);
}

} // namespace zaya::cuda
