// CPU stand-in for the CUDA runtime and device built-ins, for tests/cuda_emu only (see README.md there): kernels
// run as real threads — one std::thread per CUDA thread, one block at a time — so __syncthreads is a barrier,
// shared memory is shared, and ASan/TSan see every out-of-bounds access and every missing barrier.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One block runs at a time, so a function-static array is exactly that block's shared memory.
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
extern thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorNoDevice = 100,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureImplicit = 906,
};
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
using cudaStream_t = struct CUstream_st *;
using cudaGraph_t = struct CUgraph_st *;
using cudaGraphExec_t = struct CUgraphExec_st *;
enum cudaStreamCaptureMode {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2
};
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void *dst, int value, size_t bytes);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
const char *cudaGetErrorString(cudaError_t e);
// Streams run nothing of their own (every launch runs at once, in order); a capture records the launches made on
// its stream, with their arguments by value, and a graph launch replays them in order (see README.md).
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
using cudaGraphNode_t = struct CUgraphNode_st *;
// The recorded launches count as the graph's nodes (nodes itself must be null: only the count is emulated).
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *count);

namespace emu {
cudaError_t set_max_dynamic_shared(const void *kernel, int bytes);
// Runs body() as every thread of every block of the grid (checks the launch configuration as CUDA does first).
void run_grid(const void *kernel, dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()> &body);
void *dynamic_shared(); // this block's `extern __shared__` buffer, poisoned (NaN bytes) before each block
// Graph capture: true if a launch on `s` is to be recorded rather than run (it records it); a launch on another
// stream while a capture is open is an error, as the real capture treats the legacy stream.
bool capture_launch(cudaStream_t s, std::function<void()> replay);

// kernel<<<grid, block, shared>>>(args) is rewritten to emu::launch(kernel, grid, block, shared)(args).
template <class Kernel> struct Launch {
    Kernel *kernel;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    template <class... Args> void operator()(const Args &...args) const {
        Kernel *k = kernel;
        const dim3 g = grid, b = block;
        const size_t sh = shared;
        auto run = [=] { run_grid(reinterpret_cast<const void *>(k), g, b, sh, [&] { k(args...); }); };
        if (!capture_launch(stream, run)) run();
    }
};
template <class Kernel>
Launch<Kernel> launch(Kernel *kernel, dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = nullptr) {
    return {kernel, grid, block, shared, stream};
}
} // namespace emu

template <class Kernel> cudaError_t cudaFuncSetAttribute(Kernel *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    return emu::set_max_dynamic_shared(reinterpret_cast<const void *>(kernel), value);
}

// Device built-ins.
void __syncthreads();
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
int atomicAdd(int *p, int v);
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T> T min(T a, T b) { return b < a ? b : a; }
template <class T> T max(T a, T b) { return a < b ? b : a; }

// 16-byte vector types (the decode kernels' weight loads) and the bit cast that widens bf16.
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct alignas(16) float4 {
    float x, y, z, w;
};
inline float __uint_as_float(unsigned u) {
    float f;
    __builtin_memcpy(&f, &u, sizeof f);
    return f;
}
