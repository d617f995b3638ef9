// The CPU emulation behind include/*.h (tests/cuda_emu): device memory is host memory, a kernel launch runs each
// block in turn, its threads as fibers (threads.h), and cuBLASLt is a naive column-major GEMM.
#include "cublasLt.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <dlfcn.h>
#include <fcntl.h>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unistd.h>
#include <utility>
#include <vector>

thread_local dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace {

// The emulated device's size: ZAYA_EMU_DEVICE_BYTES if set (an allocation past it fails as cudaMalloc does when the
// GPU is full), else 16 GiB. What is allocated is counted, for cudaMemGetInfo.
size_t device_bytes() {
    static const size_t bytes = [] {
        const char *v = std::getenv("ZAYA_EMU_DEVICE_BYTES");
        return v && *v ? size_t(std::strtoull(v, nullptr, 10)) : size_t(1) << 34;
    }();
    return bytes;
}
struct Allocated {
    std::mutex mu;
    std::map<void *, size_t> sizes;
    size_t bytes = 0;
};
Allocated &allocated() {
    static auto *a = new Allocated; // never destroyed: static device buffers are freed at exit, in any order
    return *a;
}

cudaError_t last_error = cudaSuccess;
cudaError_t record(cudaError_t e) {
    if (e != cudaSuccess) last_error = e;
    return e;
}

// What CUDA allows on sm_90: 48 KiB of dynamic shared memory by default, up to 227 KiB when a kernel opts in.
constexpr int kDefaultShared = 48 << 10, kMaxShared = 227 << 10;
std::mutex attr_mutex;
std::map<const void *, int> max_dynamic_shared;

// ZAYA_EMU_LAUNCH_LOG=FILE: each distinct launch shape (kernel, threads per block, dynamic shared memory, the
// kernel's opted-in dynamic shared memory) is appended to FILE at exit, the kernel named by its executable and offset
// in it. tests/cuda_emu/check_launches.py holds these against the registers and shared memory the sm_90 cubins
// declare: a block too large for its registers fails on the GPU ("too many resources requested for launch") and
// nowhere here.
struct LaunchShape {
    std::string exe;
    uintptr_t offset;
    uint64_t threads;
    size_t shared;
    int opted_in; // cudaFuncAttributeMaxDynamicSharedMemorySize, -1 if never set
    auto operator<=>(const LaunchShape &) const = default;
};
struct LaunchLog {
    std::mutex mutex;
    std::set<LaunchShape> shapes;
    ~LaunchLog() {
        const char *path = std::getenv("ZAYA_EMU_LAUNCH_LOG");
        if (!path || !*path || shapes.empty()) return;
        // One write(2) with O_APPEND: test processes running at once (scripts/cuda_emulate.sh) share the file, and a
        // stdio stream would flush its lines in 4 KiB pieces that another process's could split.
        std::string text;
        char line[4096];
        for (const LaunchShape &s : shapes) {
            std::snprintf(line, sizeof line, "%s\t%#zx\t%llu\t%zu\t%d\n", s.exe.c_str(), size_t(s.offset),
                          static_cast<unsigned long long>(s.threads), s.shared, s.opted_in);
            text += line;
        }
        const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
        if (fd < 0 || write(fd, text.data(), text.size()) != ssize_t(text.size()))
            std::fprintf(stderr, "emu: cannot append the launch log to %s\n", path);
        if (fd >= 0) close(fd);
    }
    void note(const void *kernel, uint64_t threads, size_t shared, int opted_in) {
        static const bool on = std::getenv("ZAYA_EMU_LAUNCH_LOG") != nullptr;
        Dl_info info{};
        if (!on || !dladdr(kernel, &info) || !info.dli_fname) return;
        std::lock_guard lock(mutex);
        const uintptr_t offset = reinterpret_cast<uintptr_t>(kernel) - reinterpret_cast<uintptr_t>(info.dli_fbase);
        shapes.insert({info.dli_fname, offset, threads, shared, opted_in});
    }
} launch_log;

// Memory a block has of its own (its shared memory, the emulator's per-thread slots): allocated for each block and
// freed after it, untracked by TSan, so that to TSan each block's is new memory (an allocation resets what TSan knows
// of the addresses) and two blocks using the same addresses are not a race.
struct BlockBytes {
    std::byte *p = nullptr;
    BlockBytes() = default;
    explicit BlockBytes(size_t bytes) : p(static_cast<std::byte *>(std::malloc(bytes + !bytes))) {
        if (!p) std::abort();
        std::memset(p, 0xFF, bytes); // NaN bytes: as uninitialised as the GPU's
    }
    BlockBytes(BlockBytes &&o) noexcept : p(std::exchange(o.p, nullptr)) {}
    BlockBytes &operator=(BlockBytes &&o) noexcept {
        std::swap(p, o.p);
        return *this;
    }
    ~BlockBytes() { std::free(p); }
};

// The state of the block that is running: its barriers, its shared memory (the `extern __shared__` buffer and the
// static `__shared__` variables) and the slots the emulated warp collectives exchange through.
struct BlockState {
    bool waited = false; // a thread of this block called grid_dependency_wait() (untracked: no order from it)
    void *wait_for = nullptr; // what grid_dependency_wait acquires: the end of the kernel a dependent launch overlaps
    std::unique_ptr<emu::Barrier> block;
    std::vector<std::unique_ptr<emu::Barrier>> warps;
    BlockBytes shuffle;   // one float per thread for __shfl_xor_sync
    BlockBytes fragments; // six words per thread: an mma's a and b registers
    BlockBytes rows;      // one pointer per thread: ldmatrix's row addresses
    BlockBytes shared;
    size_t shared_bytes = 0;
    std::vector<std::pair<const void *, BlockBytes>> statics; // each static __shared__ variable reached, by its key
};
BlockState *current = nullptr; // (written untracked only: the threads of a launch the host has not waited for read it)

struct AsyncCopy {
    void *dst;
    const void *src; // null: 16 zero bytes
};
// What a CUDA thread has of its own besides its registers: its index in the block (threadIdx, linear) and its cp.async
// copies. `self` is the running thread's: the launcher points it at a fiber's as it switches to it.
struct CudaThread {
    unsigned linear_tid = 0;
    dim3 thread_idx;
    std::vector<AsyncCopy> cp_open;                // not yet committed
    std::vector<std::vector<AsyncCopy>> cp_groups; // committed, not yet waited for (oldest first)
};
thread_local CudaThread *self = nullptr;

// How TSan sees the stream (README.md, "Launches and the host"): launch i's threads release ends[i % 2] as they
// finish, and nothing else tells the host they have: the host acquires the ends where it waits for the kernels (a
// synchronous copy or memset, a free, a synchronize, cuBLASLt's GEMM, which runs here on the host), and a launch
// acquires its predecessor's predecessor's. A launch's threads acquire what the host did before it and the previous
// launch's end as they start, or, in a launch made with programmatic dependent launch, that end only at
// grid_dependency_wait: what a block does before its wait is unordered with the kernel before, which it overlaps on
// the GPU. A graph's first launch overlaps nothing (the graph follows the stream's earlier work).
struct StreamOrder {
    char ends[2] = {};
    uint64_t launches = 0;
    bool graph_start = false;
};
StreamOrder stream_order;

void host_waits_for_kernels() {
    for (char &e : stream_order.ends) emu::acquire(&e);
}

// One launch's state: everything its threads read of the launcher's (with a copy of the kernel's arguments in
// `body`). On the heap, not on the launcher's stack: under TSan the host goes on without having waited for the
// launch to end, and its later use of its stack must not meet the threads' reads. Allocated, written and freed
// untracked (new memory to TSan).
struct GridRun {
    dim3 grid, block;
    uint64_t threads = 0, blocks = 0, b = 0; // b: the block running (of the run's order)
    bool dependent = false, unwaited = false; // unwaited: a block of a dependent launch never waited
    std::function<void()> body;
    BlockState state;
    std::vector<CudaThread> cuda_threads;
    std::unique_ptr<emu::Barrier> between_blocks;
    std::function<void(unsigned)> run_block, run_blocks_in_turn, switch_to;
    char begun = 0; // TSan: what the host did before the launch

    // Block b of the run is block b of the grid, or with ZAYA_EMU_BLOCK_ORDER=reverse the last first: a kernel whose
    // blocks read each other's writes without waiting for them (a race on the GPU, where blocks run in any order)
    // then reads them unwritten (the tests poison their outputs).
    dim3 block_idx() const {
        static const bool reverse = [] {
            const char *e = std::getenv("ZAYA_EMU_BLOCK_ORDER");
            return e && std::string_view(e) == "reverse";
        }();
        const uint64_t i = reverse ? blocks - 1 - b : b;
        return dim3(unsigned(i % grid.x), unsigned(i / grid.x % grid.y), unsigned(i / grid.x / grid.y));
    }
    // Block b's barriers, shared memory (exactly sized: ASan sees any overrun) and slots, new.
    void prepare() {
        emu::Untracked u;
        state.block = std::make_unique<emu::Barrier>(std::ptrdiff_t(threads));
        state.warps.clear();
        for (uint64_t w = 0; w < (threads + 31) / 32; ++w)
            state.warps.push_back(
                std::make_unique<emu::Barrier>(std::ptrdiff_t(std::min<uint64_t>(32, threads - 32 * w))));
        state.shared = BlockBytes(state.shared_bytes);
        state.statics.clear();
        state.shuffle = BlockBytes(threads * sizeof(float));
        state.fragments = BlockBytes(threads * 6 * sizeof(uint32_t));
        state.rows = BlockBytes(threads * sizeof(void *));
    }
    void block_done() {
        emu::Untracked u;
        if (dependent && !state.waited) unwaited = true;
        state.waited = false;
    }
};

// Graph capture (one at a time): the stream being captured and what it recorded so far.
cudaStream_t capturing = nullptr;
std::vector<std::function<void()>> captured;

} // namespace

// A stream runs no kernel of its own (every launch runs at once), but it holds host work queued on it
// (emu::enqueue_host_work) until something waits for it.
struct CUstream_st {
    bool nonblocking = false;                     // cudaStreamNonBlocking: not ordered with the legacy stream
    std::deque<std::function<void()>> host_work; // queued, not yet run
    uint64_t waited = 0;                          // the launches an event it waited for follows (cudaStreamWaitEvent)
};

namespace {
std::vector<cudaStream_t> streams_with_work; // in the order their first pending work was queued
std::set<cudaStream_t> live_streams;         // created and not destroyed (an event may outlive its stream)
uint64_t launches = 0;                       // kernels and graphs launched so far (on any stream)

void run_host_work(cudaStream_t s) {
    if (!live_streams.contains(s)) return; // the legacy stream (null), or one destroyed since
    while (!s->host_work.empty()) {
        std::function<void()> w = std::move(s->host_work.front());
        s->host_work.pop_front();
        w();
    }
    std::erase(streams_with_work, s);
}
// What the legacy stream's next operation waits for: the work of every blocking stream (CUDA orders them).
void run_blocking_streams_work() {
    for (cudaStream_t s : std::vector<cudaStream_t>(streams_with_work))
        if (!s->nonblocking) run_host_work(s);
}
void run_all_host_work() {
    for (cudaStream_t s : std::vector<cudaStream_t>(streams_with_work)) run_host_work(s);
}
} // namespace
struct CUgraph_st {
    std::vector<std::function<void()>> work;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> work;
};

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *device) {
    *device = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : record(cudaErrorInvalidValue); }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int) {
    std::memset(prop, 0, sizeof(*prop));
    std::snprintf(prop->name, sizeof(prop->name), "CPU emulation");
    prop->totalGlobalMem = device_bytes();
    prop->major = 9;
    return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int *value, cudaDeviceAttr attr, int) {
    if (attr != cudaDevAttrComputeCapabilityMajor) return record(cudaErrorInvalidValue);
    *value = 9;
    return cudaSuccess;
}
cudaError_t cudaMalloc(void **p, size_t bytes) {
    Allocated &a = allocated();
    const std::lock_guard lock(a.mu);
    *p = nullptr;
    if (bytes > device_bytes() - a.bytes) return record(cudaErrorMemoryAllocation);
    *p = std::malloc(bytes);
    if (!*p) return record(cudaErrorMemoryAllocation);
    std::memset(*p, 0xA5, bytes); // cudaMalloc'd memory is garbage, never zero: make it so here too
    a.sizes[*p] = bytes;
    a.bytes += bytes;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    host_waits_for_kernels();
    run_all_host_work(); // (cudaFree waits for the device)
    Allocated &a = allocated();
    const std::lock_guard lock(a.mu);
    if (auto it = a.sizes.find(p); it != a.sizes.end()) a.bytes -= it->second, a.sizes.erase(it);
    std::free(p);
    return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    Allocated &a = allocated();
    const std::lock_guard lock(a.mu);
    *free_bytes = device_bytes() - a.bytes, *total_bytes = device_bytes();
    return cudaSuccess;
}
// Synchronous copies and memsets are not allowed while a capture is open (CUDA's global and thread-local modes).
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind) {
    if (capturing) return record(cudaErrorStreamCaptureUnsupported);
    host_waits_for_kernels();
    run_blocking_streams_work(); // a legacy-stream copy follows the blocking streams' work
    std::memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemset(void *dst, int value, size_t bytes) {
    if (capturing) return record(cudaErrorStreamCaptureUnsupported);
    host_waits_for_kernels();
    run_blocking_streams_work();
    std::memset(dst, value, bytes);
    return cudaSuccess;
}
struct CUevent_st {
    std::chrono::steady_clock::time_point at;
    bool recorded = false;
    cudaStream_t stream = nullptr; // where it was recorded
    uint64_t launches = 0;         // the launches made before it was
};
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new CUevent_st{};
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (capturing) return record(cudaErrorStreamCaptureUnsupported); // (a captured record would be a graph node)
    e->at = std::chrono::steady_clock::now(), e->recorded = true, e->stream = s, e->launches = launches;
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!start->recorded || !end->recorded) return record(cudaErrorInvalidValue); // CUDA: cudaErrorInvalidResourceHandle
    *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
    return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
    *s = new CUstream_st{};
    live_streams.insert(*s);
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    run_host_work(s); // (CUDA lets queued work finish)
    live_streams.erase(s);
    delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    host_waits_for_kernels();
    if (s) run_host_work(s);
    else run_blocking_streams_work();
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    if (flags & ~unsigned(cudaStreamNonBlocking)) return record(cudaErrorInvalidValue);
    if (const cudaError_t r = cudaStreamCreate(s); r != cudaSuccess) return r;
    (*s)->nonblocking = flags & cudaStreamNonBlocking;
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags) {
    if (flags & ~unsigned(cudaEventDisableTiming)) return record(cudaErrorInvalidValue);
    return cudaEventCreate(e);
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
    if (!e || flags) return record(cudaErrorInvalidValue);
    if (capturing) return record(cudaErrorStreamCaptureUnsupported); // (captured, it would be a graph dependency)
    run_host_work(e->stream); // what the event follows has run before what the waiting stream queues next
    if (s && e->recorded) s->waited = std::max(s->waited, e->launches);
    return cudaSuccess;
}
// A stream with queued host work is busy the first time it is asked (the work then runs): a caller that polls must
// poll again.
cudaError_t cudaStreamQuery(cudaStream_t s) {
    host_waits_for_kernels();
    if (s && !s->host_work.empty()) {
        run_host_work(s);
        return cudaErrorNotReady; // (not an error CUDA records)
    }
    if (!s) run_blocking_streams_work();
    return cudaSuccess;
}
cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (!s || capturing) return record(cudaErrorStreamCaptureUnsupported); // the legacy stream cannot be captured
    capturing = s;
    captured.clear();
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = nullptr;
    if (s != capturing) return record(cudaErrorInvalidValue);
    capturing = nullptr;
    *g = new CUgraph_st{std::move(captured)};
    captured.clear();
    return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = new CUgraphExec_st{g->work};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    if (capturing) return record(cudaErrorStreamCaptureUnsupported);
    stream_order.graph_start = true;
    ++launches;
    for (auto &w : e->work) w();
    return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t g, cudaGraphNode_t *nodes, size_t *count) {
    if (nodes) return record(cudaErrorInvalidValue);
    *count = g->work.size();
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    host_waits_for_kernels(); // (the arguments its launches' threads read go with it)
    delete e;
    return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g; // (its recorded launches never run: an instantiated graph runs its own copies)
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
    host_waits_for_kernels();
    run_all_host_work();
    return cudaSuccess;
}
cudaError_t cudaGetLastError() {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureImplicit: return "operation would make the legacy stream wait on a capture";
    }
    return "unknown error";
}

namespace emu {

cudaError_t set_max_dynamic_shared(const void *kernel, int bytes) {
    if (bytes < 0 || bytes > kMaxShared) return record(cudaErrorInvalidValue);
    std::lock_guard lock(attr_mutex);
    max_dynamic_shared[kernel] = bytes;
    return cudaSuccess;
}

void *dynamic_shared() { return current->shared.p; }

void *block_shared(const void *key, size_t bytes, size_t align) {
    Untracked u; // the first thread to reach the declaration allocates and poisons; TSan is not to see that as its own
    if (align > 16) {
        std::fprintf(stderr, "emu: a __shared__ variable aligned to %zu bytes (16 at most here)\n", align);
        std::abort();
    }
    for (auto &[k, bytes_of] : current->statics)
        if (k == key) return bytes_of.p;
    current->statics.emplace_back(key, BlockBytes(bytes));
    return current->statics.back().second.p;
}

void grid_dependency_wait() {
    void *end;
    {
        Untracked u;
        current->waited = true;
        end = current->wait_for;
    }
    if (end) acquire(end); // the kernel before has ended: its writes happen before what follows
}

bool device_range(const void *p, size_t bytes) {
    Allocated &a = allocated();
    const std::lock_guard lock(a.mu);
    auto it = a.sizes.upper_bound(const_cast<void *>(p)); // the first allocation past p; p's is the one before
    if (it == a.sizes.begin()) return false;
    --it;
    const auto *base = static_cast<const char *>(it->first), *at = static_cast<const char *>(p);
    return at >= base && size_t(at - base) <= it->second && bytes <= it->second - size_t(at - base);
}

void enqueue_host_work(cudaStream_t s, std::function<void()> work) {
    if (!s) {
        run_blocking_streams_work();
        work();
        return;
    }
    // Here every kernel has run before the work does; on a GPU, work on a non-blocking stream is ordered after no
    // kernel unless the stream waits for an event recorded after it. So it must, after the latest launch: else the
    // work could read what a kernel has not yet written (the case the late running above cannot show).
    if (s->nonblocking && s->waited < launches) {
        std::fprintf(stderr, "emu: host work queued on a non-blocking stream that waits for no event recorded after "
                             "the latest kernel launch (it could run before that kernel on a GPU)\n");
        std::abort();
    }
    if (s->host_work.empty()) streams_with_work.push_back(s);
    s->host_work.push_back(std::move(work));
}

bool capture_launch(cudaStream_t s, std::function<void()> replay) {
    if (!capturing) {
        if (!s) run_blocking_streams_work(); // a legacy-stream launch follows the blocking streams' work
        ++launches;
        return false;
    }
    if (s != capturing) { // a launch on the legacy stream (or another) from inside a capture
        std::fprintf(stderr, "emu: a kernel launched outside the stream being captured\n");
        record(cudaErrorStreamCaptureImplicit);
        return true; // not run: the capture has failed
    }
    captured.push_back(std::move(replay));
    return true;
}

void run_grid(const void *kernel, dim3 grid, dim3 block, size_t shared_bytes, bool dependent,
              const std::function<void()> &body) {
    const uint64_t threads = uint64_t(block.x) * block.y * block.z;
    const uint64_t blocks = uint64_t(grid.x) * grid.y * grid.z;
    int allowed = kDefaultShared, opted_in = -1;
    {
        std::lock_guard lock(attr_mutex);
        if (auto it = max_dynamic_shared.find(kernel); it != max_dynamic_shared.end()) {
            opted_in = it->second;
            allowed = std::max(allowed, it->second);
        }
    }
    if (threads == 0 || threads > 1024 || block.z > 64 || blocks == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
        grid.z > 65535) {
        std::fprintf(stderr, "emu: bad launch configuration grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x, grid.y,
                     grid.z, block.x, block.y, block.z);
        record(cudaErrorInvalidConfiguration);
        return;
    }
    if (shared_bytes > size_t(allowed)) {
        std::fprintf(stderr, "emu: %zu bytes of dynamic shared memory, %d allowed\n", shared_bytes, allowed);
        record(cudaErrorInvalidValue);
        return;
    }
    launch_log.note(kernel, threads, shared_bytes, opted_in);
    // The launch's place in the stream's order (StreamOrder above).
    StreamOrder &stream = stream_order;
    const uint64_t launch = stream.launches++;
    char *end = &stream.ends[launch % 2], *previous_end = &stream.ends[(launch + 1) % 2];
    const bool first_of_graph = std::exchange(stream.graph_start, false);
    const bool overlaps = dependent && !first_of_graph;
    acquire(end); // (the slot's last launch, the one before the previous, has ended before this one begins)
    GridRun *run;
    {
        Untracked u; // (new memory to TSan, written unrecorded: the launch's threads read it)
        run = new GridRun;
        run->grid = grid, run->block = block, run->threads = threads, run->blocks = blocks;
        run->dependent = dependent;
        run->body = body;
        run->state.shared_bytes = shared_bytes;
        run->state.wait_for = overlaps ? previous_end : nullptr;
        run->cuda_threads.resize(threads);
        for (unsigned t = 0; t < threads; ++t) {
            run->cuda_threads[t].linear_tid = t;
            run->cuda_threads[t].thread_idx =
                dim3(unsigned(t % block.x), unsigned(t / block.x % block.y), unsigned(t / block.x / block.y));
        }
        GridRun *g = run;
        // One block's run of thread t: nothing left in flight from the block before (its cp.async lists new), and an
        // exited thread no longer holds up its block's barriers (as on the GPU).
        run->run_block = [g](unsigned t) {
            {
                Untracked u;
                g->cuda_threads[t].cp_groups = {};
                g->cuda_threads[t].cp_open = {};
            }
            g->body();
            g->state.warps[t / 32]->arrive_and_drop();
            g->state.block->arrive_and_drop();
        };
        // Without TSan: the launch as one run, the threads going from block to block at a barrier (one fiber and
        // stack per thread of the block, not per block of the grid: faster).
        run->between_blocks = std::make_unique<Barrier>(std::ptrdiff_t(threads), [g] {
            g->block_done();
            if (++g->b < g->blocks) g->prepare();
        });
        run->run_blocks_in_turn = [g](unsigned t) {
            while (g->b < g->blocks) {
                {
                    Untracked u; // (the thread that completed the last block goes on without a switch)
                    blockIdx = g->block_idx();
                }
                g->run_block(t);
                g->between_blocks->arrive_and_wait();
            }
        };
        // The thread-locals every fiber shares, set for the one about to run.
        run->switch_to = [g](unsigned t) {
            Untracked u;
            self = &g->cuda_threads[t];
            threadIdx = self->thread_idx;
            blockIdx = g->block_idx();
            blockDim = g->block;
            gridDim = g->grid;
        };
        current = &run->state;
    }
    // Every thread of the launch follows what the host did before it (`begun`) and, unless the launch overlaps the
    // kernel before it, that kernel (`previous_end`); each releases `end` as it returns.
    release(&run->begun);
    Order order{&run->begun, overlaps ? nullptr : previous_end, end};
    if (blocks_apart()) {
        // Under TSan each block is a run of its own, block (x, y, z) of launch i on pool (i + x + y + z) mod 2
        // (threads.h): neighbouring blocks, and a block and the same block of the next launch, are different
        // contexts, ordered with each other only by the kernel's own atomics and the stream's order, so TSan sees two
        // blocks touching one address as the race it is on the GPU (README.md, "Races between blocks"). What the
        // launcher does between blocks goes unrecorded: it has not waited for them.
        reserve_threads(0, kPools, unsigned(threads));
        Untracked u;
        for (; run->b < blocks; ++run->b) {
            run->prepare();
            const dim3 at = run->block_idx();
            order.pool = unsigned((launch + at.x + at.y + at.z) % kPools);
            run_threads(unsigned(threads), run->run_block, run->switch_to, order);
            run->block_done();
        }
    } else {
        run->prepare();
        run_threads(unsigned(threads), run->run_blocks_in_turn, run->switch_to, order);
    }
    bool unwaited;
    {
        Untracked u; // (the launch's threads may still be running, to TSan: the host has not waited for them)
        unwaited = run->unwaited;
        self = nullptr;
        current = nullptr;
        delete run;
    }
    if (unwaited) {
        std::fprintf(stderr, "emu: a block of a kernel launched with programmatic dependent launch did not wait for "
                             "the kernel before it (await_previous_kernel)\n");
        record(cudaErrorInvalidValue);
    }
}

} // namespace emu

void __syncthreads() { current->block->arrive_and_wait(); }

float __shfl_xor_sync(unsigned, float v, int lane_mask) {
    auto &warp = *current->warps[self->linear_tid / 32];
    float *slots = reinterpret_cast<float *>(current->shuffle.p);
    slots[self->linear_tid] = v;
    warp.arrive_and_wait();
    const float other = slots[self->linear_tid ^ unsigned(lane_mask)];
    warp.arrive_and_wait(); // every lane has read before any lane writes its slot again
    return other;
}

namespace emu {
void warp_sync() { current->warps[self->linear_tid / 32]->arrive_and_wait(); }
unsigned lane_id() { return self->linear_tid % 32; }

namespace {
[[noreturn]] void device_fault(const char *what, const void *p) {
    std::fprintf(stderr, "emu: %s (address %p, thread %u of block (%u,%u,%u))\n", what, p, self->linear_tid, blockIdx.x,
                 blockIdx.y, blockIdx.z);
    std::abort();
}
uint16_t half_of(uint32_t word, unsigned which) { return uint16_t(which ? word >> 16 : word & 0xFFFFu); }
float bf16_value(uint16_t bits) { return __bfloat162float(__nv_bfloat16{bits}); }
} // namespace

// Fragment layouts as the PTX ISA gives them for m16n8k16 (g = lane / 4, t = lane % 4): a0..a3 hold A[g][2t..2t+1],
// A[g+8][2t..], A[g][2t+8..], A[g+8][2t+8..]; b0, b1 hold B[2t..2t+1][g], B[2t+8..][g]; c/d hold C[g][2t..2t+1],
// C[g+8][2t..].
void mma_bf16_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
    auto &warp = *current->warps[self->linear_tid / 32];
    uint32_t *slots = reinterpret_cast<uint32_t *>(current->fragments.p) + self->linear_tid / 32 * 32 * 6;
    const unsigned lane = self->linear_tid % 32;
    for (int i = 0; i < 4; ++i) slots[lane * 6 + unsigned(i)] = a[i];
    slots[lane * 6 + 4] = b[0], slots[lane * 6 + 5] = b[1];
    warp.arrive_and_wait();
    auto A = [&](unsigned r, unsigned k) {
        const unsigned reg = (k >= 8 ? 2u : 0u) + (r >= 8 ? 1u : 0u);
        return bf16_value(half_of(slots[((r % 8) * 4 + (k % 8) / 2) * 6 + reg], k % 2));
    };
    auto B = [&](unsigned k, unsigned n) {
        return bf16_value(half_of(slots[(n * 4 + (k % 8) / 2) * 6 + 4 + (k >= 8 ? 1u : 0u)], k % 2));
    };
    const unsigned g = lane / 4, t = lane % 4;
    for (unsigned e = 0; e < 4; ++e) {
        const unsigned r = g + (e >= 2 ? 8u : 0u), c = 2 * t + e % 2;
        float sum = 0.0f;
        for (unsigned k = 0; k < 16; ++k) sum += A(r, k) * B(k, c);
        d[e] += sum;
    }
    warp.arrive_and_wait(); // every lane has read before any lane writes its slots again
}

// ldmatrix .x4: lanes 8i … 8i+7 give the rows of matrix i; lane l receives in r[i] matrix i's row l/4, columns
// 2(l%4) and 2(l%4)+1 — or with .trans, rows 2(l%4) and 2(l%4)+1 of column l/4.
void ldmatrix_x4(uint32_t r[4], const void *row, bool trans) {
    if ((reinterpret_cast<uintptr_t>(row) & 15) != 0) device_fault("ldmatrix row address not 16-byte aligned", row);
    auto &warp = *current->warps[self->linear_tid / 32];
    const void **rows = reinterpret_cast<const void **>(current->rows.p) + self->linear_tid / 32 * 32;
    const unsigned lane = self->linear_tid % 32;
    rows[lane] = row;
    warp.arrive_and_wait();
    for (unsigned i = 0; i < 4; ++i) {
        uint16_t lo, hi;
        if (trans) {
            const auto *r0 = static_cast<const uint16_t *>(rows[i * 8 + 2 * (lane % 4)]);
            const auto *r1 = static_cast<const uint16_t *>(rows[i * 8 + 2 * (lane % 4) + 1]);
            lo = r0[lane / 4], hi = r1[lane / 4];
        } else {
            const auto *src = static_cast<const uint16_t *>(rows[i * 8 + lane / 4]);
            lo = src[2 * (lane % 4)], hi = src[2 * (lane % 4) + 1];
        }
        r[i] = uint32_t(lo) | uint32_t(hi) << 16;
    }
    warp.arrive_and_wait();
}

void cp_async_16(void *dst, const void *src, bool fill) {
    if ((reinterpret_cast<uintptr_t>(dst) & 15) != 0) device_fault("cp.async destination not 16-byte aligned", dst);
    if (fill && (reinterpret_cast<uintptr_t>(src) & 15) != 0)
        device_fault("cp.async source not 16-byte aligned", src);
    Untracked u; // (the lists are the emulator's: a thread's, but kept in a slot each block's thread t reuses)
    self->cp_open.push_back({dst, fill ? src : nullptr});
}

void cp_async_commit() {
    Untracked u;
    self->cp_groups.push_back(std::move(self->cp_open));
    self->cp_open.clear();
}

void cp_async_wait(int groups_left) {
    for (;;) {
        std::vector<AsyncCopy> group;
        {
            Untracked u;
            if (self->cp_groups.size() <= size_t(std::max(groups_left, 0))) return;
            group = std::move(self->cp_groups.front());
            self->cp_groups.erase(self->cp_groups.begin());
        }
        for (const AsyncCopy &c : group) { // the copies themselves are the thread's reads and writes
            if (c.src) std::memcpy(c.dst, c.src, 16);
            else std::memset(c.dst, 0, 16);
        }
        Untracked u;
        group = {};
    }
}
} // namespace emu

int atomicAdd(int *p, int v) { return std::atomic_ref<int>(*p).fetch_add(v); }
unsigned atomicAdd(unsigned *p, unsigned v) { return std::atomic_ref<unsigned>(*p).fetch_add(v); }

// ---- cuBLASLt ----

struct EmuLtHandle {};
struct EmuLtDesc {
    cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
};
struct EmuLtLayout {
    cudaDataType_t type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch = 1;
    int64_t stride = 0; // elements between a batch's matrices
};
struct EmuLtPref {
    uint32_t align[4] = {256, 256, 256, 256}; // A, B, C, D: cuBLASLt's defaults
};

const char *cublasLtGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "unknown cuBLAS status";
}
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
    static EmuLtHandle the_handle;
    *h = &the_handle;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t compute, cudaDataType_t scale) {
    if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    *d = new EmuLtDesc;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t bytes) {
    if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    int32_t v;
    std::memcpy(&v, buf, 4);
    if (v != CUBLAS_OP_N && v != CUBLAS_OP_T) return CUBLAS_STATUS_INVALID_VALUE;
    (attr == CUBLASLT_MATMUL_DESC_TRANSA ? d->trans_a : d->trans_b) = cublasOperation_t(v);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
    delete d;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
    *l = new EmuLtLayout{type, rows, cols, ld};
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t bytes) {
    if (attr == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT && bytes == sizeof(int32_t)) {
        std::memcpy(&l->batch, buf, bytes);
        return l->batch >= 1 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    }
    if (attr == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET && bytes == sizeof(int64_t)) {
        std::memcpy(&l->stride, buf, bytes);
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
    delete l;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
    *p = new EmuLtPref;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t bytes) {
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES)
        return bytes == 8 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
    if (bytes != 4) return CUBLAS_STATUS_INVALID_VALUE;
    std::memcpy(&p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], buf, 4);
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
    delete p;
    return CUBLAS_STATUS_SUCCESS;
}

namespace {

// op(A) is m×k, op(B) k×n, C and D m×n (column-major, as stored: rows × cols with ld ≥ rows).
bool shapes_agree(const EmuLtDesc &d, const EmuLtLayout &a, const EmuLtLayout &b, const EmuLtLayout &c,
                  const EmuLtLayout &dl) {
    const uint64_t m = c.rows, n = c.cols;
    const uint64_t a_m = d.trans_a == CUBLAS_OP_N ? a.rows : a.cols, k = d.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
    const uint64_t b_k = d.trans_b == CUBLAS_OP_N ? b.rows : b.cols, b_n = d.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
    // C and D: fp32, or bf16 with bf16 operands (the combinations cuBLASLt has for 32F compute), one type.
    const bool types = a.type == b.type && c.type == dl.type &&
                       (c.type == CUDA_R_32F || (c.type == CUDA_R_16BF && a.type == CUDA_R_16BF));
    const bool ok = a_m == m && b_k == k && b_n == n && dl.rows == m && dl.cols == n && types && a.ld >= int64_t(a.rows) &&
                    b.ld >= int64_t(b.rows) && c.ld >= int64_t(c.rows) && dl.ld >= int64_t(dl.rows) &&
                    a.batch == c.batch && b.batch == c.batch && dl.batch == c.batch;
    if (!ok)
        std::fprintf(stderr,
                     "emu cuBLASLt: shapes disagree: op %d %d, A %lux%lu ld %ld, B %lux%lu ld %ld, C %lux%lu ld %ld\n",
                     d.trans_a, d.trans_b, a.rows, a.cols, a.ld, b.rows, b.cols, b.ld, c.rows, c.cols, c.ld);
    return ok;
}

double element(const void *p, cudaDataType_t type, uint64_t i) {
    if (type == CUDA_R_32F) return double(static_cast<const float *>(p)[i]);
    return double(__bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]));
}

bool aligned(const void *p, uint64_t align) { return reinterpret_cast<uintptr_t>(p) % align == 0; }

} // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              cublasLtMatrixLayout_t dl, cublasLtMatmulPreference_t p, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int *found) {
    if (requested <= 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (!shapes_agree(*d, *a, *b, *c, *dl)) return CUBLAS_STATUS_INVALID_VALUE;
    results[0] = {};
    for (int i = 0; i < 4; ++i) results[0].algo.data[i] = p->align[i]; // the algorithm needs this alignment
    results[0].state = CUBLAS_STATUS_SUCCESS;
    *found = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t a, const void *B, cublasLtMatrixLayout_t b, const void *beta,
                              const void *C, cublasLtMatrixLayout_t c, void *D, cublasLtMatrixLayout_t dl,
                              const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t) {
    if (!shapes_agree(*d, *a, *b, *c, *dl)) return CUBLAS_STATUS_INVALID_VALUE;
    host_waits_for_kernels(); // (the GEMM runs here, on the host)
    if (algo && (!aligned(A, algo->data[0]) || !aligned(B, algo->data[1]) || !aligned(C, algo->data[2]) ||
                 !aligned(D, algo->data[3]))) {
        std::fprintf(stderr, "emu cuBLASLt: an operand is less aligned than the heuristic query promised\n");
        return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    const double al = *static_cast<const float *>(alpha), be = *static_cast<const float *>(beta);
    const uint64_t m = c->rows, n = c->cols, k = d->trans_a == CUBLAS_OP_N ? a->cols : a->rows;
    const size_t a_size = a->type == CUDA_R_32F ? 4 : 2;
    std::vector<float> out(m * n);
    for (int32_t t = 0; t < c->batch; ++t) { // a strided batch: matrix t at t·stride elements of each operand
        const void *At = static_cast<const char *>(A) + size_t(t * a->stride) * a_size;
        const void *Bt = static_cast<const char *>(B) + size_t(t * b->stride) * a_size;
        const size_t cd_size = c->type == CUDA_R_32F ? 4 : 2;
        const void *Ct = static_cast<const char *>(C) + size_t(t * c->stride) * cd_size;
        void *Dt = static_cast<char *>(D) + size_t(t * dl->stride) * cd_size;
        for (uint64_t j = 0; j < n; ++j)
            for (uint64_t i = 0; i < m; ++i) {
                double acc = 0;
                for (uint64_t p = 0; p < k; ++p) {
                    const uint64_t ai = d->trans_a == CUBLAS_OP_N ? i + p * a->ld : p + i * a->ld;
                    const uint64_t bi = d->trans_b == CUBLAS_OP_N ? p + j * b->ld : j + p * b->ld;
                    acc += element(At, a->type, ai) * element(Bt, b->type, bi);
                }
                // beta = 0: C is not read (BLAS convention), so NaN there does not leak into D.
                const double cij = be == 0 ? 0.0 : be * element(Ct, c->type, i + j * c->ld);
                out[i + j * m] = float(al * acc + cij);
            }
        // (All of D after all of C is read: C may be D.) A bf16 D is the fp32 result rounded, as the epilogue does.
        for (uint64_t j = 0; j < n; ++j)
            for (uint64_t i = 0; i < m; ++i) {
                const uint64_t at = i + j * dl->ld;
                if (dl->type == CUDA_R_32F) static_cast<float *>(Dt)[at] = out[i + j * m];
                else static_cast<__nv_bfloat16 *>(Dt)[at] = __float2bfloat16_rn(out[i + j * m]);
            }
    }
    return CUBLAS_STATUS_SUCCESS;
}
