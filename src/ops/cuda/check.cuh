// Error checks for .cu files: every runtime call and every kernel launch goes through one of these.
#pragma once
#include "ops/cuda/runtime.h"

#include <cuda_runtime.h>

#define ZAYA_CUDA_CHECK(expr)                                                                                  \
    do {                                                                                                       \
        const cudaError_t zaya_err_ = (expr);                                                                  \
        if (zaya_err_ != cudaSuccess)                                                                          \
            ::zaya::cuda::fail_cuda(int(zaya_err_), cudaGetErrorString(zaya_err_), #expr, __FILE__, __LINE__); \
    } while (0)

// After a <<<...>>> launch: launch-configuration errors now, execution errors at the next synchronisation.
#define ZAYA_CUDA_LAUNCHED() ZAYA_CUDA_CHECK(cudaGetLastError())

namespace zaya::cuda {
inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }
} // namespace zaya::cuda
