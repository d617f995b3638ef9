// The CUDA backend's host side: device discovery, device memory, copies, error checks. Plain C++ (no CUDA headers),
// so code compiled by the host compiler can use it. Every CUDA and cuBLAS call is checked; a failure throws
// zaya::Error naming the call, the file and line, and CUDA's message.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zaya::cuda {

// True if a CUDA device can be used; otherwise `why` (if given) says what is missing (no driver, no device, ...).
bool device_available(std::string *why = nullptr);
std::string device_description(); // "NVIDIA H200 (sm_90, 139.8 GiB)"

// cuBLASLt's workspace for split-K and similar algorithms: 32 MiB, NVIDIA's recommendation for Hopper.
constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

void *device_alloc(size_t bytes); // throws on failure, naming the size, what zaya holds and what the device has free
void device_free(void *p);
// The device memory zaya's allocations (device_alloc) hold now and held at most so far. Not counted: the CUDA
// context, cuBLASLt's and NCCL's own allocations.
struct DeviceMemory {
    size_t in_use = 0, peak = 0;
};
DeviceMemory device_memory();
void copy_to_device(void *dst, const void *src, size_t bytes);
void copy_to_host(void *dst, const void *src, size_t bytes);
void copy_on_device(void *dst, const void *src, size_t bytes); // device to device, in stream order
void fill_bytes(void *dst, int byte, size_t bytes); // e.g. 0xFF poisons fp32 outputs with NaNs
void synchronize(); // waits for the default stream; surfaces asynchronous kernel errors

// Temporary device space of the ops that need some (chunked LM head, sums of squares, fused norm backward,
// attention backward): one buffer per use, grown to the largest request and then reused, so a training step allocates
// nothing after its first. The ops run from one host thread (the default stream), as these buffers assume.
enum class Scratch {
    LmHeadLogits,
    LmHeadLosses,
    LmHeadBf16, // the bf16 copies of the LM head's GEMM operands
    SumSquares,
    AttentionRowDots,     // the attention backward's softmax row dots D
    AttentionBf16,        // the flash attention kernels' bf16 copies of q, k, v (and dout)
    NormResidualPartials, // rmsnorm_residual_backward's per-block parameter-gradient sums
    CcaTempRows,          // cca_qk_backward's per-token key-temperature gradients
    CcaConvBf16,          // the grouped conv's im2col rows in bf16 (and the backward's dout copy, dcols, dW)
    ColumnSums,           // column_sum_add's per-chunk partial sums (column_sum.cuh), the conv weight gradient's too
    MoeGroupCounts,       // moe_group_tokens' per-chunk expert counts and bases
    MoeBf16,              // the tensor-core experts' bf16 rows (gathered inputs, SwiGLU outputs, their gradients)
    EmbeddingIndex,       // embedding_backward's radix sort of the rows by token id (keys, orders, offsets)
    Count
};
void *device_scratch(Scratch use, size_t bytes);
// Consecutive pieces of the scratch for `use` with the given sizes in bytes, each starting 256-byte aligned (one
// device_scratch covering them all): an op's several temporaries.
// pieces_bytes: the bytes scratch_pieces takes for them (a memory plan's figure: train/memory.cpp).
constexpr size_t piece_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }
template <size_t K> constexpr size_t pieces_bytes(const std::array<size_t, K> &bytes) {
    size_t total = 0;
    for (size_t b : bytes) total += piece_bytes(b);
    return total;
}
template <size_t K> std::array<unsigned char *, K> scratch_pieces(Scratch use, const std::array<size_t, K> &bytes) {
    std::array<size_t, K> at{};
    size_t total = 0;
    for (size_t i = 0; i < K; ++i) at[i] = total, total += piece_bytes(bytes[i]);
    auto *base = static_cast<unsigned char *>(device_scratch(use, total));
    std::array<unsigned char *, K> pieces{};
    for (size_t i = 0; i < K; ++i) pieces[i] = base + at[i];
    return pieces;
}

// The stream kernels launch on: the legacy default stream (null), unless a LaunchStreamScope sets another — as a
// CUDA graph capture needs (graph capture cannot record the legacy stream). Per host thread. Kernels of the ops the
// decode step uses (norm, residual_norm, elementwise, cca, cca_conv, cca_fused's forward chain, block, moe_router,
// router_fused, decode) launch
// on it; the others still launch on the default stream.
void *launch_stream_handle(); // a cudaStream_t

// Programmatic dependent launch of the decode step's kernels (ops/cuda/launch.cuh): used where the device supports
// it (sm_90+), unless ZAYA_CUDA_PDL=0, or on this thread a DependentLaunchScope(false) is open.
bool dependent_launch_enabled();
class DependentLaunchScope {
  public:
    explicit DependentLaunchScope(bool on);
    ~DependentLaunchScope();
    DependentLaunchScope(const DependentLaunchScope &) = delete;
    DependentLaunchScope &operator=(const DependentLaunchScope &) = delete;

  private:
    bool prev_;
};
class LaunchStreamScope {
  public:
    explicit LaunchStreamScope(void *stream);
    ~LaunchStreamScope();
    LaunchStreamScope(const LaunchStreamScope &) = delete;
    LaunchStreamScope &operator=(const LaunchStreamScope &) = delete;

  private:
    void *prev_;
};

// A CUDA graph: the kernels that `work` launches, captured once on a stream of the graph's own (a blocking stream,
// so it stays ordered with the synchronous copies on the legacy stream before and after a launch), then replayed
// by launch() with one call instead of one launch per kernel. `work` may launch kernels only: a synchronous copy,
// memset or allocation in it fails the capture.
class Graph {
  public:
    Graph() = default;
    ~Graph();
    Graph(const Graph &) = delete;
    Graph &operator=(const Graph &) = delete;
    template <class F> void capture(F &&work) {
        begin_capture();
        try {
            LaunchStreamScope scope(stream_);
            work();
        } catch (...) {
            abandon_capture();
            throw;
        }
        end_capture();
    }
    bool ready() const { return exec_ != nullptr; }
    void launch();        // asynchronous, like a kernel launch
    size_t nodes() const; // the captured graph's nodes (kernels), 0 before capture

  private:
    void begin_capture();
    void end_capture();
    void abandon_capture() noexcept;
    void *stream_ = nullptr, *graph_ = nullptr, *exec_ = nullptr;
};

// Marks in the default stream's order of work (Backend::phase on the GPU): record() records an event there and
// returns its index; seconds(a, b), once the device has passed both, the time between them; clear() keeps the
// events for reuse (a step's marks are created once, then recycled).
class EventTimeline {
  public:
    EventTimeline() = default;
    ~EventTimeline();
    EventTimeline(const EventTimeline &) = delete;
    EventTimeline &operator=(const EventTimeline &) = delete;
    int64_t record();
    double seconds(int64_t from, int64_t to) const;
    void clear() { used_ = 0; }

  private:
    std::vector<void *> events_; // cudaEvent_t
    size_t used_ = 0;
};

// Owned device memory of n elements of T.
template <class T> class DeviceArray {
  public:
    DeviceArray() = default;
    explicit DeviceArray(size_t n) : p_(static_cast<T *>(device_alloc(n * sizeof(T)))), n_(n) {}
    ~DeviceArray() { device_free(p_); }
    DeviceArray(DeviceArray &&o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
    DeviceArray &operator=(DeviceArray &&o) noexcept {
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        return *this;
    }
    DeviceArray(const DeviceArray &) = delete;
    DeviceArray &operator=(const DeviceArray &) = delete;
    T *data() const { return p_; }
    size_t size() const { return n_; }

  private:
    T *p_ = nullptr;
    size_t n_ = 0;
};

// Internal: throws zaya::Error for a failed CUDA runtime call (used by the ZAYA_CUDA_CHECK macro in .cu files).
[[noreturn]] void fail_cuda(int code, const char *what, const char *expr, const char *file, int line);

} // namespace zaya::cuda
