// The NCCL communicator (dist/comm_nccl.h). Compiled with the CUDA backend; runs only where a GPU is present.
#include "core/error.h"
#include "dist/comm_nccl.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/runtime.h"

#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace zaya {

namespace {

void check_nccl(ncclResult_t r, const char *what) {
    if (r != ncclSuccess) fail("NCCL {} failed: {}", what, ncclGetErrorString(r));
}

template <class T> ncclDataType_t nccl_type();
template <> ncclDataType_t nccl_type<float>() { return ncclFloat; }
template <> ncclDataType_t nccl_type<double>() { return ncclDouble; }
template <> ncclDataType_t nccl_type<int64_t>() { return ncclInt64; }

class Nccl final : public NcclCommunicator {
  public:
    explicit Nccl(std::shared_ptr<Communicator> bootstrap) : boot_(std::move(bootstrap)) {
        std::string why;
        if (!cuda::device_available(&why)) fail("ZAYA_COMM=nccl: {}", why);
        int devices = 0;
        ZAYA_CUDA_CHECK(cudaGetDeviceCount(&devices));
        ZAYA_CUDA_CHECK(cudaSetDevice(boot_->rank() % devices));
        ncclUniqueId id{};
        static_assert(sizeof(ncclUniqueId) % sizeof(float) == 0);
        if (boot_->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
        float words[sizeof(ncclUniqueId) / sizeof(float)];
        std::memcpy(words, &id, sizeof id);
        boot_->broadcast(words, sizeof(words) / sizeof(float), 0); // bytes travel unchanged
        std::memcpy(&id, words, sizeof id);
        check_nccl(ncclCommInitRank(&comm_, boot_->size(), id, boot_->rank()), "ncclCommInitRank");
        ZAYA_CUDA_CHECK(cudaStreamCreate(&stream_));
    }
    ~Nccl() override {
        cuda::device_free(staging_);
        if (queued_) cudaEventDestroy(queued_);
        if (overlap_) cudaStreamDestroy(overlap_);
        if (stream_) cudaStreamDestroy(stream_);
        if (comm_) ncclCommDestroy(comm_);
    }

    int rank() const override { return boot_->rank(); }
    int size() const override { return boot_->size(); }
    std::string name() const override { return "nccl"; }

    void allreduce_sum(float *data, size_t n) override { host_allreduce(data, n); }
    void allreduce_sum(double *data, size_t n) override { host_allreduce(data, n); }
    void allreduce_sum(int64_t *data, size_t n) override { host_allreduce(data, n); }
    using NcclCommunicator::start_reduce_sum_device; // the Communicator's (with a backend) forward here
    using NcclCommunicator::wait_all_device;
    void start_reduce_sum_device(float *base, const std::vector<Part> &parts) override {
        if (parts.empty()) return;
        if (!overlap_) { // non-blocking: the legacy stream's kernels do not wait for it, nor it for them
            ZAYA_CUDA_CHECK(cudaStreamCreateWithFlags(&overlap_, cudaStreamNonBlocking));
            ZAYA_CUDA_CHECK(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming));
        }
        // The sums wait for what the launch stream holds now (the kernels writing them), not for what comes after.
        ZAYA_CUDA_CHECK(cudaEventRecord(queued_, static_cast<cudaStream_t>(cuda::launch_stream_handle())));
        ZAYA_CUDA_CHECK(cudaStreamWaitEvent(overlap_, queued_, 0));
        check_nccl(ncclGroupStart(), "group start"); // the bucket's parts as one launch
        for (const Part &p : parts)
            check_nccl(ncclReduce(base + p.offset, base + p.offset, p.count, ncclFloat, ncclSum, p.owner, comm_,
                                  overlap_),
                       "reduce");
        check_nccl(ncclGroupEnd(), "group end");
        overlapping_ = true;
    }
    void wait_all_device() override {
        if (!overlapping_) return;
        overlapping_ = false;
        wait(overlap_, "sums of gradient buckets"); // the host waits, so the launches after it follow the sums
    }
    // Host buffers gain nothing from overlap here (each sum is staged): started sums complete at once.
    void start_reduce_sum(float *base, const std::vector<Part> &parts) override {
        for (const Part &p : parts) {
            auto *d = static_cast<float *>(stage(base + p.offset, p.count * sizeof(float), true));
            check_nccl(ncclReduce(d, d, p.count, ncclFloat, ncclSum, p.owner, comm_, stream_), "reduce");
            if (p.owner == rank()) unstage(base + p.offset, d, p.count, "reduce");
            else wait("reduce");
        }
    }
    void progress() override {}
    void wait_all() override {}

    void broadcast(float *data, size_t n, int root) override {
        auto *d = static_cast<float *>(stage(data, n * sizeof(float), root == rank()));
        check_nccl(ncclBroadcast(d, d, n, ncclFloat, root, comm_, stream_), "broadcast");
        unstage(data, d, n, "broadcast");
    }
    void broadcast_blocks(float *base, const std::vector<Block> &blocks, int root) override {
        for (const Block &b : blocks) broadcast(base + b.offset, b.count, root);
    }
    void broadcast_blocks_device(float *base, const std::vector<Block> &blocks, int root, Backend &) override {
        check_nccl(ncclGroupStart(), "group start");
        for (const Block &b : blocks)
            check_nccl(ncclBroadcast(base + b.offset, base + b.offset, b.count, ncclFloat, root, comm_, stream_),
                       "broadcast");
        check_nccl(ncclGroupEnd(), "group end");
        wait("broadcast");
    }
    void send(const float *data, size_t n, int dest) override {
        auto *d = static_cast<float *>(stage(data, n * sizeof(float), true));
        check_nccl(ncclSend(d, n, ncclFloat, dest, comm_, stream_), "send");
        wait("send");
    }
    void recv(float *data, size_t n, int src) override {
        auto *d = static_cast<float *>(stage(data, n * sizeof(float), false));
        check_nccl(ncclRecv(d, n, ncclFloat, src, comm_, stream_), "receive");
        unstage(data, d, n, "receive");
    }
    void barrier() override {
        int64_t one = 1;
        host_allreduce(&one, 1);
    }
    void set_watchdog(double seconds) override { timeout_s_ = seconds; }
    [[noreturn]] void abort(int code) override {
        if (comm_) ncclCommAbort(comm_);
        comm_ = nullptr;
        boot_->abort(code);
        std::abort(); // not reached: abort() of the bootstrap communicator ends the process
    }

  private:
    template <class T> void host_allreduce(T *data, size_t n) {
        T *d = static_cast<T *>(stage(data, n * sizeof(T), true));
        check_nccl(ncclAllReduce(d, d, n, nccl_type<T>(), ncclSum, comm_, stream_), "allreduce");
        wait("allreduce");
        ZAYA_CUDA_CHECK(cudaMemcpy(data, d, n * sizeof(T), cudaMemcpyDeviceToHost));
    }
    // The staging buffer, grown to `bytes`; filled from `host` when `upload`.
    void *stage(const void *host, size_t bytes, bool upload) {
        if (bytes > staging_bytes_) {
            cuda::device_free(staging_); // through zaya's allocator: counted in its device memory (runtime.h)
            staging_ = nullptr;
            staging_ = cuda::device_alloc(bytes);
            staging_bytes_ = bytes;
        }
        if (upload && bytes) ZAYA_CUDA_CHECK(cudaMemcpy(staging_, host, bytes, cudaMemcpyHostToDevice));
        return staging_;
    }
    void unstage(float *host, const float *d, size_t n, const char *what) {
        wait(what);
        ZAYA_CUDA_CHECK(cudaMemcpy(host, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    }
    // Waits for the stream; past the watchdog's timeout a rank that died or hangs ends the job.
    void wait(const char *what) { wait(stream_, what); }
    void wait(cudaStream_t stream, const char *what) {
        const auto start = std::chrono::steady_clock::now();
        for (;;) {
            const cudaError_t e = cudaStreamQuery(stream);
            if (e == cudaSuccess) return;
            if (e != cudaErrorNotReady) ZAYA_CUDA_CHECK(e);
            if (timeout_s_ > 0 &&
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_s_) {
                std::fprintf(stderr, "zaya: error: rank %d: NCCL %s did not complete within %.0f s: a rank died or "
                                     "hangs; aborting the job\n", rank(), what, timeout_s_);
                abort(3);
            }
            std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
    }

    std::shared_ptr<Communicator> boot_;
    ncclComm_t comm_ = nullptr;
    cudaStream_t stream_ = nullptr;
    cudaStream_t overlap_ = nullptr; // the gradient buckets' sums (start_reduce_sum_device)
    cudaEvent_t queued_ = nullptr;   // the launch stream's work so far, which a started sum waits for
    bool overlapping_ = false;       // sums started and not yet awaited
    void *staging_ = nullptr;
    size_t staging_bytes_ = 0;
    double timeout_s_ = 0;
};

} // namespace

std::shared_ptr<NcclCommunicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap) {
    return std::make_shared<Nccl>(std::move(bootstrap));
}

} // namespace zaya
