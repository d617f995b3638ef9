// How the emulator runs a block's CUDA threads (tests/cuda_emu/README.md): each is a fiber on the launching thread,
// and a barrier switches to the next fiber. (They were OS threads: a barrier then put hundreds of them to sleep and
// woke them through the kernel, and the emulated tests spent more time in its scheduler than in the kernels.) Under
// ThreadSanitizer each fiber is a thread of its own to TSan, ordered with the others only by the barriers — as CUDA
// threads are — so a missing __syncthreads is still reported as the race it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace emu {

// A barrier among some of a block's threads, as std::barrier: arrive_and_wait, and arrive_and_drop (an exited thread
// no longer holds up the barrier, as on the GPU); on_completion runs when a phase completes, before any thread goes
// on. What a thread did before arriving happens before what any thread does after the phase completes.
class Barrier {
  public:
    explicit Barrier(std::ptrdiff_t count, std::function<void()> on_completion = {});
    Barrier(const Barrier &) = delete;
    Barrier &operator=(const Barrier &) = delete;
    void arrive_and_wait();
    void arrive_and_drop();

  private:
    void complete(char *sync);
    std::function<void()> on_completion_;
    std::ptrdiff_t expected_, arrived_ = 0;
    uint64_t phase_ = 0;
    // TSan's release/acquire addresses, one per phase parity: a thread of phase k is released before any thread
    // arrives at phase k + 2, but threads may arrive at k + 1 first, and their work must not seem ordered before it.
    char sync_[2] = {};
};

// How a run's threads are ordered with the rest of the program, for TSan: each acquires `begun` (and `after`, if
// set) when it starts and releases `ended` when it returns; run_threads itself adds no order with the launcher, so
// the caller decides what a launch's threads follow and who sees their work (tests/cuda_emu/README.md). `pool` picks
// the set of TSan contexts the threads run as: thread t of two runs on one pool is one context, in program order, so
// runs that must stay unordered with each other (two neighbouring blocks of a launch, a block and the same block of
// the next launch) take different pools. Contexts are expensive (~1 MB each, and TSan slows down with their number),
// hence two pools only.
struct Order {
    void *begun = nullptr, *after = nullptr, *ended = nullptr;
    unsigned pool = 0;
};
constexpr unsigned kPools = 2; // (see tests/cuda_emu/README.md, "Races between blocks")

// Runs worker(t) for t < n as n threads running at once (fibers; a round robin in which each runs until it waits at a
// barrier) and returns when every one has returned. switch_to(t) is called just before each switch to thread t, to
// give the thread-locals the kernels read (threadIdx, ...) thread t's values. A round in which every thread that has
// not returned waits at a barrier no other can complete (a __syncthreads some threads never reach: a hang on the GPU)
// aborts, saying so.
void run_threads(unsigned n, const std::function<void(unsigned)> &worker,
                 const std::function<void(unsigned)> &switch_to, const Order &order);

// Makes the TSan contexts (and stacks) of pools [first, first + count) for runs of up to n threads, ahead of runs
// made while the launcher ignores its own accesses (a context created then would ignore its accesses too).
void reserve_threads(unsigned first, unsigned count, unsigned n);

// TSan's release and acquire on a sync address (no-ops without TSan): what the calling thread did before
// release(a) happens before what any thread does after a later acquire(a).
void release(void *a);
void acquire(void *a);
// True under TSan, which can tell two blocks' accesses apart only if they run as different contexts: a launch
// then runs each block as a run of its own (run_threads per block), neighbours on different pools.
bool blocks_apart();

// Accesses in its scope go unrecorded by ThreadSanitizer: the emulator's own bookkeeping (the thread-locals every
// fiber shares, barrier counters), which the fibers touch with no happens-before between them by design. A no-op
// without TSan.
struct Untracked {
    Untracked();
    ~Untracked();
    Untracked(const Untracked &) = delete;
    Untracked &operator=(const Untracked &) = delete;
};

} // namespace emu
