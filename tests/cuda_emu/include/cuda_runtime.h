// CPU stand-in for the CUDA runtime and device built-ins, for tests/cuda_emu only (see README.md there): each CUDA
// thread runs as a fiber of its own (threads.h), one block at a time, so __syncthreads is a barrier, shared memory
// is shared, and ASan/TSan see every out-of-bounds access and every missing barrier.
#pragma once
// Kernels ask for emulated forms of device built-ins through this (src/ops/cuda/launch.cuh).
#define ZAYA_CUDA_EMULATION 1

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// (__shared__ is rewritten by to_cpp.py: emu::block_shared below.)
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
    cudaErrorNotReady = 600,
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
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75 };
// Launch attributes: programmatic dependent launch (PDL) only.
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 5 };
union cudaLaunchAttributeValue {
    int programmaticStreamSerializationAllowed;
};
struct cudaLaunchAttribute {
    cudaLaunchAttributeID id;
    cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
    dim3 gridDim, blockDim;
    size_t dynamicSmemBytes;
    cudaStream_t stream;
    cudaLaunchAttribute *attrs;
    unsigned numAttrs;
};
struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
};

cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaGetDevice(int *device);
cudaError_t cudaSetDevice(int device); // device 0: the one emulated device
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device);
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int device);
cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset(void *dst, int value, size_t bytes);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaGetLastError();
const char *cudaGetErrorString(cudaError_t e);
// Streams run nothing of their own (every launch runs at once, in order); a capture records the launches made on
// its stream, with their arguments by value, and a graph launch replays them in order (see README.md).
// Events: every launch has run by the time the next call returns, so an event notes the host clock when recorded.
using cudaEvent_t = struct CUevent_st *;
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaStreamCreate(cudaStream_t *s);
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
// Every launch has run by then (the host waits here), so nothing is left for a stream to wait for or to be busy with.
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaStreamQuery(cudaStream_t s);
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
// dependent: launched with programmatic dependent launch, so every block must call grid_dependency_wait() (a
// launch where one does not fails with cudaErrorInvalidValue: the kernel could read its inputs too early).
void run_grid(const void *kernel, dim3 grid, dim3 block, size_t shared_bytes, bool dependent,
              const std::function<void()> &body);
void grid_dependency_wait(); // griddepcontrol.wait: here only noted for the check above
void *dynamic_shared(); // this block's `extern __shared__` buffer, poisoned (NaN bytes) before each block
// A static `__shared__` variable of the running block, `key` naming the declaration (one per function instance):
// memory of the block's own, allocated when the block's first thread reaches the declaration, poisoned (NaN bytes,
// as uninitialised as the GPU's, not zero or another block's values) and freed after the block. to_cpp.py rewrites
// `__shared__ T a[M][N];` into `static char a_block_key_; auto &a = ::emu::block_shared<T[M][N]>(&a_block_key_);`.
void *block_shared(const void *key, size_t bytes, size_t align);
template <class T> T &block_shared(const void *key) {
    return *static_cast<T *>(block_shared(key, sizeof(T), alignof(T)));
}
// Graph capture: true if a launch on `s` is to be recorded rather than run (it records it); a launch on another
// stream while a capture is open is an error, as the real capture treats the legacy stream.
bool capture_launch(cudaStream_t s, std::function<void()> replay);
// Host work queued on stream s (the NCCL stand-in's collectives), run in order when something waits for s: a query
// (which then reports it not ready once), a synchronize of it or of the device, an event recorded on it being waited
// for, its destruction, a cudaFree; and, unless s was made with cudaStreamNonBlocking, the next operation on the
// legacy stream (a launch, a copy, a memset), which CUDA orders after the blocking streams' work. On the legacy
// stream (s null) it runs at once. So work that a GPU runs concurrently runs here as late as the program allows: a
// read of its results before a wait, or a write to its inputs before it ran, shows. Work queued on a non-blocking
// stream must follow (cudaStreamWaitEvent) an event recorded after the latest kernel launch, or the emulator aborts:
// on a GPU it could run before that kernel.
void enqueue_host_work(cudaStream_t s, std::function<void()> work);
// True if [p, p + bytes) lies inside one cudaMalloc'd allocation (the NCCL stand-in's check that a collective's
// buffers are device memory, as NCCL's must be).
bool device_range(const void *p, size_t bytes);

// kernel<<<grid, block, shared>>>(args) is rewritten to emu::launch(kernel, grid, block, shared)(args).
template <class Kernel> struct Launch {
    Kernel *kernel;
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
    bool dependent = false;
    template <class... Args> void operator()(const Args &...args) const {
        Kernel *k = kernel;
        const dim3 g = grid, b = block;
        const size_t sh = shared;
        const bool dep = dependent;
        // The arguments are copied (decayed, as a launch passes them) into the body: under TSan the host does not
        // wait for a launch to end, so the launch's threads must not read them from the host's stack.
        auto run = [=, a = std::make_tuple(args...)] {
            run_grid(reinterpret_cast<const void *>(k), g, b, sh, dep, [k, a] { std::apply(k, a); });
        };
        if (!capture_launch(stream, run)) run();
    }
};
template <class Kernel>
Launch<Kernel> launch(Kernel *kernel, dim3 grid, dim3 block, size_t shared = 0, cudaStream_t stream = nullptr) {
    return {kernel, grid, block, shared, stream};
}
} // namespace emu

// The arguments are converted to the kernel's parameter types first, as CUDA's template does.
template <class... Params, class... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t *c, void (*kernel)(Params...), Args &&...args) {
    bool dependent = false;
    for (unsigned i = 0; i < c->numAttrs; ++i)
        if (c->attrs[i].id == cudaLaunchAttributeProgrammaticStreamSerialization)
            dependent = c->attrs[i].val.programmaticStreamSerializationAllowed != 0;
    const emu::Launch<void(Params...)> l{kernel, c->gridDim, c->blockDim, c->dynamicSmemBytes, c->stream, dependent};
    [&](Params... p) { l(p...); }(std::forward<Args>(args)...);
    return cudaGetLastError();
}

template <class Kernel> cudaError_t cudaFuncSetAttribute(Kernel *kernel, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaErrorInvalidValue;
    return emu::set_max_dynamic_shared(reinterpret_cast<const void *>(kernel), value);
}

// Device built-ins.
void __syncthreads();
namespace emu {
void warp_sync(); // a barrier of the calling thread's warp
// The warp-level tensor-core instructions of src/ops/cuda/mma.cuh, as warp collectives (every lane of the warp must
// call, as on the GPU): mma.sync m16n8k16 bf16 with fp32 accumulation (d += a·b, the products summed in k order),
// ldmatrix .x4 (each lane gives one 16-byte-aligned row address in shared memory; `trans` for .trans), and
// cp.async of 16 bytes, which lands only at the cp.async.wait_group that covers its group — so a read before that
// wait sees the shared memory's poison, not the data.
void mma_bf16_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2]);
void ldmatrix_x4(uint32_t r[4], const void *row, bool trans);
void cp_async_16(void *dst, const void *src, bool fill);
void cp_async_commit();
void cp_async_wait(int groups_left);
} // namespace emu
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_sync(); }
float __shfl_xor_sync(unsigned mask, float v, int lane_mask);
int atomicAdd(int *p, int v);
unsigned atomicAdd(unsigned *p, unsigned v);
// Blocks run one after another here, so every write of an earlier block is visible: the fence and the L2 load
// (ld.global.cg, which bypasses L1) are plain.
inline void __threadfence() {}
inline float __ldcg(const float *p) { return *p; }
inline int __ldcg(const int *p) { return *p; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
template <class T> T min(T a, T b) { return b < a ? b : a; }
template <class T> T max(T a, T b) { return a < b ? b : a; }

// Vector types (the decode kernels' 16-byte weight loads, the grouped GEMMs' 8-byte stores; CUDA's alignment, so a
// misaligned vector access is UB the sanitizer reports) and the bit cast that widens bf16.
struct alignas(8) float2 {
    float x, y;
};
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
