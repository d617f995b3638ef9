// Error checks for .cu files: every runtime call and every kernel launch goes through one of these.
#pragma once
#include "ops/cuda/runtime.h"

#include <cuda_runtime.h>

// `expr` returns a status of one of CUDA's libraries; anything but `ok` throws, with `message(status)`.
#define ZAYA_STATUS_CHECK(expr, ok, message)                                                                   \
    do {                                                                                                       \
        const auto zaya_st_ = (expr);                                                                          \
        if (zaya_st_ != (ok)) ::zaya::cuda::fail_cuda(int(zaya_st_), message(zaya_st_), #expr, __FILE__, __LINE__); \
    } while (0)

#define ZAYA_CUDA_CHECK(expr) ZAYA_STATUS_CHECK(expr, cudaSuccess, cudaGetErrorString)

// After a <<<...>>> launch: launch-configuration errors now, execution errors at the next synchronisation.
#define ZAYA_CUDA_LAUNCHED() ZAYA_CUDA_CHECK(cudaGetLastError())

namespace zaya::cuda {
inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }
inline cudaStream_t launch_stream() { return static_cast<cudaStream_t>(launch_stream_handle()); }

// Kernels whose dynamic shared memory may pass the default 48 KiB must say so before launch.
template <class Kernel> void allow_shared_bytes(Kernel kernel, size_t bytes) {
    ZAYA_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
}
} // namespace zaya::cuda
