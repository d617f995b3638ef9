// The emulator itself (tests/cuda_emu): CUDA's execution model as the kernels rely on it — threads that exchange
// data through shared memory at barriers, their own thread and block indices after every switch, warp shuffles,
// threads that exit early, cp.async landing only at its wait, host work queued on streams — and a barrier some
// threads never reach reported as the hang it would be on the GPU. Kernels are written as plain functions and
// launched through emu::launch, which is what to_cpp.py turns `kernel<<<grid, block, shared>>>(args)` into. This
// file goes through to_cpp.py too (its static shared declarations become emu::block_shared).
//
// Under TSan (zaya_cuda_emu_tests_tsan) these tests must run without a report; the EmulatorRaces ones (disabled: run
// by tests/cuda_emu/expect_races.sh) must each be reported as a data race — what the emulator exists to catch.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

constexpr unsigned kBlock = 256;

// out[block, t] = in[block, kBlock - 1 - t], then again through shared memory: out2 = out reversed back.
void reverse_kernel(float *out, float *out2, const float *in) {
    __shared__ float s[kBlock];
    const unsigned t = threadIdx.x, base = blockIdx.x * kBlock;
    s[t] = in[base + t];
    __syncthreads();
    const float v = s[kBlock - 1 - t];
    out[base + t] = v;
    __syncthreads(); // every thread has read before any writes again
    s[t] = v;
    __syncthreads();
    out2[base + t] = s[kBlock - 1 - t];
}

TEST(Emulator, ThreadsExchangeThroughSharedMemoryAtBarriers) {
    const unsigned blocks = 3, n = blocks * kBlock;
    std::vector<float> in(n), out(n, -1.0f), out2(n, -1.0f);
    for (unsigned i = 0; i < n; ++i) in[i] = float(i);
    emu::launch(reverse_kernel, dim3(blocks), dim3(kBlock))(out.data(), out2.data(), in.data());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess); // (as CUDA needs before the host reads a kernel's output)
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned b = 0; b < blocks; ++b)
        for (unsigned t = 0; t < kBlock; ++t) {
            EXPECT_EQ(out[b * kBlock + t], in[b * kBlock + kBlock - 1 - t]) << "block " << b << " thread " << t;
            EXPECT_EQ(out2[b * kBlock + t], in[b * kBlock + t]) << "block " << b << " thread " << t;
        }
}

// A static shared variable: each block finds it poisoned (NaN), whatever the block before left there, and only
// once per block: thread 0 writes before the other threads reach the declaration, and they see that write.
// seen[block, t] = what thread t read before the block's first barrier and after it.
void stale_shared_kernel(float *seen) {
    const unsigned t = threadIdx.x, base = 2 * blockIdx.x * 32;
    if (t > 0) __syncthreads(); // thread 0 declares and writes first
    __shared__ float s[2];
    if (t == 0) {
        seen[base] = s[0]; // the block's first look: poisoned
        s[0] = float(blockIdx.x) + 1.0f;
        __syncthreads();
    }
    seen[base + 32 + t] = s[0]; // every thread: thread 0's write (its declaration did not poison again)
    if (t == 0) s[1] = 7.0f;    // what the next block must not see
}

TEST(Emulator, StaticSharedMemoryIsPoisonedOncePerBlock) {
    const unsigned blocks = 3;
    std::vector<float> seen(2 * 32 * blocks, -1.0f);
    emu::launch(stale_shared_kernel, dim3(blocks), dim3(32))(seen.data());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned b = 0; b < blocks; ++b) {
        EXPECT_TRUE(std::isnan(seen[2 * 32 * b])) << "block " << b << " found " << seen[2 * 32 * b];
        for (unsigned t = 0; t < 32; ++t) EXPECT_EQ(seen[2 * 32 * b + 32 + t], float(b) + 1.0f) << b << " " << t;
    }
}

// Each thread notes its indices, waits at barriers and a shuffle (other threads run meanwhile), and notes them
// again: ids[slot] = the linear thread and block ids seen before and after.
void indices_kernel(unsigned *ids) {
    const unsigned before_t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned before_b = blockIdx.x + gridDim.x * blockIdx.y;
    __syncthreads();
    (void)__shfl_xor_sync(0xffffffffu, float(before_t), 1);
    __syncthreads();
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
    const unsigned slot = (before_b * blockDim.x * blockDim.y * blockDim.z + before_t) * 4;
    ids[slot] = before_t, ids[slot + 1] = t, ids[slot + 2] = before_b, ids[slot + 3] = b;
}

TEST(Emulator, EachThreadKeepsItsIndicesAcrossSwitches) {
    const dim3 block(8, 4, 2), grid(3, 2);
    const unsigned threads = 64, blocks = 6;
    std::vector<unsigned> ids(threads * blocks * 4, ~0u);
    emu::launch(indices_kernel, grid, block)(ids.data());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned b = 0; b < blocks; ++b)
        for (unsigned t = 0; t < threads; ++t) {
            const unsigned *s = &ids[(b * threads + t) * 4];
            EXPECT_EQ(s[0], t);
            EXPECT_EQ(s[1], t) << "thread " << t << " of block " << b << " saw another thread's threadIdx";
            EXPECT_EQ(s[2], b);
            EXPECT_EQ(s[3], b) << "thread " << t << " of block " << b << " saw another blockIdx";
        }
}

// A butterfly sum over each warp: every lane ends with its warp's sum (96 threads: three warps).
void warp_sum_kernel(float *out, const float *in) {
    const unsigned t = threadIdx.x;
    float v = in[t];
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    out[t] = v;
}

TEST(Emulator, WarpShufflesExchangeWithinEachWarp) {
    std::vector<float> in(96), out(96, -1.0f);
    for (unsigned i = 0; i < 96; ++i) in[i] = float(i * i % 17);
    emu::launch(warp_sum_kernel, dim3(1), dim3(96))(out.data(), in.data());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned w = 0; w < 3; ++w) {
        float sum = 0.0f;
        for (unsigned l = 0; l < 32; ++l) sum += in[w * 32 + l];
        for (unsigned l = 0; l < 32; ++l) EXPECT_EQ(out[w * 32 + l], sum) << "warp " << w << " lane " << l;
    }
}

// Threads ≥ live return at once; the rest still meet at two barriers (exited threads no longer count, as on the GPU).
void early_exit_kernel(float *out, unsigned live) {
    __shared__ float s[kBlock];
    const unsigned t = threadIdx.x;
    if (t >= live) return;
    s[t] = float(t);
    __syncthreads();
    const float v = s[live - 1 - t];
    __syncthreads();
    out[blockIdx.x * kBlock + t] = v;
}

TEST(Emulator, ThreadsThatExitNoLongerHoldUpBarriers) {
    const unsigned live = 100, blocks = 2;
    std::vector<float> out(blocks * kBlock, -1.0f);
    emu::launch(early_exit_kernel, dim3(blocks), dim3(kBlock))(out.data(), live);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned b = 0; b < blocks; ++b)
        for (unsigned t = 0; t < kBlock; ++t)
            EXPECT_EQ(out[b * kBlock + t], t < live ? float(live - 1 - t) : -1.0f) << b << " " << t;
}

// cp.async: 16 bytes land in shared memory only at the wait that covers their group; before it, the poison.
void cp_async_kernel(float *before, float *after, const float *src) {
    auto *dst = static_cast<float *>(emu::dynamic_shared());
    const unsigned t = threadIdx.x;
    emu::cp_async_16(dst + 4 * t, src + 4 * t, true);
    emu::cp_async_commit();
    before[t] = dst[4 * t];
    emu::cp_async_wait(0);
    after[t] = dst[4 * t];
}

TEST(Emulator, CpAsyncLandsOnlyAtItsWait) {
    alignas(16) float src[4 * 32];
    for (int i = 0; i < 4 * 32; ++i) src[i] = float(i + 1);
    std::vector<float> before(32, 0.0f), after(32, 0.0f);
    emu::launch(cp_async_kernel, dim3(1), dim3(32), sizeof src)(before.data(), after.data(), src);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    for (unsigned t = 0; t < 32; ++t) {
        EXPECT_TRUE(std::isnan(before[t])) << "thread " << t << " read its copy before waiting: " << before[t];
        EXPECT_EQ(after[t], src[4 * t]);
    }
}

// Each block writes its part, then counts itself in (a fence and an atomic add, as ops/cuda/last_block.cuh does); the
// block that arrives last adds the parts up. Not a race: each block's count orders its writes before the reads of
// the block whose count comes after it.
void count_in_kernel(float *parts, unsigned *counter, float *sum) {
    __shared__ bool last;
    if (threadIdx.x == 0) parts[blockIdx.x] = float(blockIdx.x + 1);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == gridDim.x - 1;
        if (last) *counter = 0;
    }
    __syncthreads();
    if (last && threadIdx.x == 0) {
        float total = 0.0f;
        for (unsigned b = 0; b < gridDim.x; ++b) total += __ldcg(parts + b);
        *sum = total;
    }
}

TEST(Emulator, BlocksThatCountThemselvesInSeeEachOthersWrites) {
    const unsigned blocks = 9;
    std::vector<float> parts(blocks, -1.0f);
    unsigned counter = 0;
    float sum = -1.0f;
    emu::launch(count_in_kernel, dim3(blocks), dim3(32))(parts.data(), &counter, &sum);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(sum, float(blocks * (blocks + 1) / 2));
    EXPECT_EQ(counter, 0u);
}

// x[i] = i, then with programmatic dependent launch y[i] = 2 x[i], reading x after the wait for the kernel that
// wrote it (wait_first) or before it: a race on the GPU, where a dependent kernel's blocks start while the kernel
// before still runs.
void produce_kernel(float *x) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    x[i] = float(i);
}
void consume_kernel(float *y, const float *x, bool wait_first) {
    const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (wait_first) emu::grid_dependency_wait();
    const float v = x[i];
    if (!wait_first) emu::grid_dependency_wait();
    y[i] = 2.0f * v;
}

void produce_then_consume(bool wait_first) {
    const unsigned blocks = 3, threads = 32, n = blocks * threads;
    std::vector<float> x(n, -1.0f), y(n, -1.0f);
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    emu::launch(produce_kernel, dim3(blocks), dim3(threads), 0, stream)(x.data());
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(blocks), cfg.blockDim = dim3(threads), cfg.stream = stream;
    cfg.attrs = attr, cfg.numAttrs = 1;
    ASSERT_EQ(cudaLaunchKernelEx(&cfg, consume_kernel, y.data(), static_cast<const float *>(x.data()), wait_first),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    for (unsigned i = 0; i < n; ++i) EXPECT_EQ(y[i], 2.0f * float(i)) << i; // here, as launches run one after another
}

TEST(Emulator, ADependentLaunchReadsThePreviousKernelsWritesAfterItsWait) { produce_then_consume(true); }

// Host work queued on a stream (the NCCL stand-in's collectives) runs as late as CUDA allows: a non-blocking stream's
// when it is queried (busy the first time) or synchronised, never because the legacy stream copies or launches; a
// blocking stream's before the legacy stream's next operation as well; the legacy stream's at once.
TEST(Emulator, HostWorkQueuedOnAStreamRunsWhenWaitedFor) {
    cudaStream_t nonblocking = nullptr, blocking = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
    cudaEvent_t now = nullptr; // the non-blocking stream waits for every launch so far (none here)
    ASSERT_EQ(cudaEventCreate(&now), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(now, nullptr), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(nonblocking, now, 0), cudaSuccess);
    std::vector<int> ran;
    float *d = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&d), sizeof(float)), cudaSuccess);
    const float one = 1.0f;
    emu::enqueue_host_work(nonblocking, [&] { ran.push_back(1); });
    emu::enqueue_host_work(blocking, [&] { ran.push_back(2); });
    emu::enqueue_host_work(nonblocking, [&] { ran.push_back(3); });
    EXPECT_TRUE(ran.empty());
    ASSERT_EQ(cudaMemcpy(d, &one, sizeof one, cudaMemcpyHostToDevice), cudaSuccess); // the legacy stream
    EXPECT_EQ(ran, (std::vector<int>{2}));
    EXPECT_EQ(cudaStreamQuery(nonblocking), cudaErrorNotReady);
    EXPECT_EQ(ran, (std::vector<int>{2, 1, 3}));
    EXPECT_EQ(cudaStreamQuery(nonblocking), cudaSuccess);
    emu::enqueue_host_work(nullptr, [&] { ran.push_back(4); });
    EXPECT_EQ(ran, (std::vector<int>{2, 1, 3, 4}));
    emu::enqueue_host_work(nonblocking, [&] { ran.push_back(5); });
    ASSERT_EQ(cudaStreamSynchronize(nonblocking), cudaSuccess);
    EXPECT_EQ(ran, (std::vector<int>{2, 1, 3, 4, 5}));
    EXPECT_EQ(cudaGetLastError(), cudaSuccess); // a busy stream is not an error
    ASSERT_EQ(cudaFree(d), cudaSuccess);
    ASSERT_EQ(cudaEventDestroy(now), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(nonblocking), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
}

// The races the emulator is to report under TSan (tests/cuda_emu/expect_races.sh runs each and requires a report):
// two blocks adding to one element without an atomic (a lost update on the GPU), a block reading what another
// block of the launch writes, a dependent launch reading the previous kernel's output before its wait, and two
// blocks writing the same elements, each by the thread of the same index.
void add_one_kernel(float *sum) {
    if (threadIdx.x == 0) *sum += 1.0f;
}
TEST(EmulatorRaces, DISABLED_BlocksAddingToOneElement) {
    float sum = 0.0f;
    emu::launch(add_one_kernel, dim3(2), dim3(32))(&sum);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(sum, 2.0f); // here, as blocks run one after another; on the GPU 1 or 2
}

void neighbour_kernel(float *x, float *y) {
    if (threadIdx.x != 0) return;
    if (blockIdx.x == 0) x[0] = 1.0f;
    else y[0] = x[0];
}
TEST(EmulatorRaces, DISABLED_ABlockReadingAnotherBlocksWrite) {
    float x = 0.0f, y = -1.0f;
    emu::launch(neighbour_kernel, dim3(2), dim3(32))(&x, &y);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(EmulatorRaces, DISABLED_ADependentLaunchReadingBeforeItsWait) { produce_then_consume(false); }

// Each thread writes its element of row blockIdx.x, forgetting blockIdx.y: the blocks of a column (4 apart in launch
// order) write the same elements, each thread the one its counterpart writes.
void column_kernel(float *out) { out[blockIdx.x * blockDim.x + threadIdx.x] = float(blockIdx.y); }
TEST(EmulatorRaces, DISABLED_BlocksOfAColumnWritingOneRow) {
    std::vector<float> out(4 * 32, -1.0f);
    emu::launch(column_kernel, dim3(4, 2), dim3(32))(out.data());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// Half a warp shuffles while the other half waits at __syncthreads: neither can complete — a hang on the GPU.
void divergent_barrier_kernel(float *out) {
    const unsigned t = threadIdx.x;
    if (t < 16) out[t] = __shfl_xor_sync(0xffffffffu, float(t), 1);
    else __syncthreads();
}

TEST(EmulatorDeathTest, ABarrierSomeThreadsNeverReachIsReportedAsADeadlock) {
    std::vector<float> out(32);
    EXPECT_DEATH(emu::launch(divergent_barrier_kernel, dim3(1), dim3(32))(out.data()), "deadlock");
}

// Host work on a non-blocking stream that waits for no event recorded after a kernel: on a GPU it could overtake
// the kernel (whose output it may read), so the emulator refuses it; after the event, it is queued.
TEST(EmulatorDeathTest, WorkOnANonBlockingStreamMustFollowTheLatestKernel) {
    std::vector<float> in(kBlock, 1.0f), out(kBlock), out2(kBlock);
    cudaStream_t s = nullptr;
    cudaEvent_t e = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e, nullptr), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(s, e, 0), cudaSuccess);
    emu::launch(reverse_kernel, dim3(1), dim3(kBlock))(out.data(), out2.data(), in.data()); // after the event
    EXPECT_DEATH(emu::enqueue_host_work(s, [] {}), "non-blocking stream");
    ASSERT_EQ(cudaEventRecord(e, nullptr), cudaSuccess);
    ASSERT_EQ(cudaStreamWaitEvent(s, e, 0), cudaSuccess);
    bool ran = false;
    emu::enqueue_host_work(s, [&] { ran = true; });
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(ran);
    ASSERT_EQ(cudaEventDestroy(e), cudaSuccess);
    ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
}

} // namespace
