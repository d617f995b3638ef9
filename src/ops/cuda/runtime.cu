#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/launch.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

namespace zaya::cuda {

void fail_cuda(int code, const char *what, const char *expr, const char *file, int line) {
    fail("CUDA error {} ({}) in {} at {}:{}", code, what, expr, file, line);
}

bool device_available(std::string *why) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) *why = fmt::format("no usable CUDA device: {}", cudaGetErrorString(e));
        cudaGetLastError(); // clear the sticky error
        return false;
    }
    if (n == 0) {
        if (why) *why = "no CUDA device";
        return false;
    }
    return true;
}

std::string device_description() {
    int dev = 0;
    ZAYA_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp p{};
    ZAYA_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
    return fmt::format("{} (sm_{}{}, {:.1f} GiB)", p.name, p.major, p.minor, double(p.totalGlobalMem) / (1 << 30));
}

namespace {
// What device_alloc handed out and not yet freed (pointer → bytes), and the most it held at once.
struct Allocations {
    std::mutex mu;
    std::unordered_map<void *, size_t> sizes;
    size_t in_use = 0, peak = 0;
};
Allocations &allocations() {
    static Allocations *a = new Allocations; // never destroyed: static DeviceArrays free into it at exit
    return *a;
}
double gib(size_t bytes) { return double(bytes) / double(size_t(1) << 30); }
} // namespace

void *device_alloc(size_t bytes) {
    void *p = nullptr;
    if (bytes == 0) return nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
        cudaGetLastError(); // an allocation failure is not sticky: clear it before asking the device
        size_t free_b = 0, total_b = 0;
        const bool known = cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
        const size_t held = device_memory().in_use;
        fail("cannot allocate {:.1f} MiB on the GPU ({}): zaya holds {:.2f} GiB{}; a smaller --micro-batch or "
             "--seq needs less (zaya info MODEL --train --device cuda plans it)",
             double(bytes) / (1 << 20), cudaGetErrorString(e), gib(held),
             known ? fmt::format(", the device has {:.2f} GiB free of {:.2f} GiB", gib(free_b), gib(total_b))
                   : std::string());
    }
    Allocations &a = allocations();
    const std::lock_guard lock(a.mu);
    a.sizes[p] = bytes;
    a.in_use += bytes;
    a.peak = std::max(a.peak, a.in_use);
    return p;
}

void device_free(void *p) {
    if (!p) return;
    { // forgotten before it is freed: once freed, another thread's cudaMalloc may return the same address
        Allocations &a = allocations();
        const std::lock_guard lock(a.mu);
        if (auto it = a.sizes.find(p); it != a.sizes.end()) a.in_use -= it->second, a.sizes.erase(it);
    }
    cudaFree(p); // never throws: called from destructors
}

DeviceMemory device_memory() {
    Allocations &a = allocations();
    const std::lock_guard lock(a.mu);
    return {a.in_use, a.peak};
}

void copy_to_device(void *dst, const void *src, size_t bytes) {
    ZAYA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void *dst, const void *src, size_t bytes) {
    ZAYA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void copy_on_device(void *dst, const void *src, size_t bytes) {
    ZAYA_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}

void fill_bytes(void *dst, int byte, size_t bytes) { ZAYA_CUDA_CHECK(cudaMemset(dst, byte, bytes)); }

void synchronize() { ZAYA_CUDA_CHECK(cudaDeviceSynchronize()); }

EventTimeline::~EventTimeline() {
    for (void *e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
}

int64_t EventTimeline::record() {
    if (used_ == events_.size()) {
        cudaEvent_t e = nullptr;
        ZAYA_CUDA_CHECK(cudaEventCreate(&e));
        events_.push_back(e);
    }
    ZAYA_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_[used_]), launch_stream()));
    return int64_t(used_++);
}

double EventTimeline::seconds(int64_t from, int64_t to) const {
    float ms = 0;
    ZAYA_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events_[size_t(from)]),
                                         static_cast<cudaEvent_t>(events_[size_t(to)])));
    return double(ms) / 1e3;
}

void *device_scratch(Scratch use, size_t bytes) {
    static DeviceArray<char> buffers[size_t(Scratch::Count)];
    DeviceArray<char> &b = buffers[size_t(use)];
    if (b.size() < bytes) { // the old one freed first (nothing in flight uses it across calls, and cudaFree waits
        b = {};             // for the device): growing never holds both
        b = DeviceArray<char>(bytes);
    }
    return b.data();
}

namespace {
thread_local bool dependent_launch_allowed = true; // DependentLaunchScope's switch
} // namespace

bool dependent_launch_enabled() {
    static const bool supported = [] {
        if (const char *v = std::getenv("ZAYA_CUDA_PDL"); v && std::strcmp(v, "0") == 0) return false;
        int dev = 0, major = 0;
        if (cudaGetDevice(&dev) != cudaSuccess ||
            cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return major >= 9;
    }();
    return supported && dependent_launch_allowed;
}
DependentLaunchScope::DependentLaunchScope(bool on) : prev_(dependent_launch_allowed) { dependent_launch_allowed = on; }
DependentLaunchScope::~DependentLaunchScope() { dependent_launch_allowed = prev_; }

namespace {
thread_local void *current_launch_stream = nullptr;
} // namespace

void *launch_stream_handle() { return current_launch_stream; }
LaunchStreamScope::LaunchStreamScope(void *stream) : prev_(current_launch_stream) { current_launch_stream = stream; }
LaunchStreamScope::~LaunchStreamScope() { current_launch_stream = prev_; }

Graph::~Graph() { // never throws: the handles are released, errors ignored
    if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    if (graph_) cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
    if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

void Graph::begin_capture() {
    if (exec_ || graph_) fail("Graph::capture: this graph was captured already");
    if (!stream_) {
        cudaStream_t s = nullptr;
        ZAYA_CUDA_CHECK(cudaStreamCreate(&s));
        stream_ = s;
    }
    // Thread-local mode: an unsafe call (a synchronous copy) from this thread fails the capture, others are free.
    ZAYA_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream_), cudaStreamCaptureModeThreadLocal));
}

void Graph::end_capture() {
    cudaGraph_t g = nullptr;
    ZAYA_CUDA_CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &g));
    graph_ = g;
    cudaGraphExec_t e = nullptr;
    ZAYA_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    exec_ = e;
}

void Graph::abandon_capture() noexcept {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(static_cast<cudaStream_t>(stream_), &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError(); // clear what the failed capture left
}

size_t Graph::nodes() const {
    if (!graph_) return 0;
    size_t n = 0;
    ZAYA_CUDA_CHECK(cudaGraphGetNodes(static_cast<cudaGraph_t>(graph_), nullptr, &n));
    return n;
}

void Graph::launch() {
    if (!exec_) fail("Graph::launch: nothing captured");
    ZAYA_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(stream_)));
}

} // namespace zaya::cuda
