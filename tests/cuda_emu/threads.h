// How the emulator runs a block's CUDA threads (tests/cuda_emu/README.md). Under ThreadSanitizer each is an OS
// thread, so TSan sees the races a missing __syncthreads leaves between them. Otherwise each is a fiber on the
// launching thread, and a barrier switches to the next fiber instead of putting hundreds of OS threads to sleep and
// waking them through the kernel: with threads, the emulated tests spent twice as long in the kernel's scheduler as
// in the kernels themselves.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#if defined(__SANITIZE_THREAD__)
#define ZAYA_EMU_OS_THREADS 1
#include <barrier>
#else
#define ZAYA_EMU_OS_THREADS 0
#endif

namespace emu {

// A barrier among some of a block's threads, as std::barrier: arrive_and_wait, and arrive_and_drop (an exited thread
// no longer holds up the barrier, as on the GPU); on_completion runs when a phase completes, before any thread goes
// on. Not movable (the fibers and the OS threads wait on it in place).
class Barrier {
  public:
    explicit Barrier(std::ptrdiff_t count, std::function<void()> on_completion = {});
    Barrier(const Barrier &) = delete;
    Barrier &operator=(const Barrier &) = delete;
    void arrive_and_wait();
    void arrive_and_drop();

  private:
    std::function<void()> on_completion_;
#if ZAYA_EMU_OS_THREADS
    struct Completion {
        Barrier *self;
        void operator()() noexcept {
            if (self->on_completion_) self->on_completion_();
        }
    };
    std::barrier<Completion> barrier_;
#else
    void complete();
    std::ptrdiff_t expected_, arrived_ = 0;
    uint64_t phase_ = 0;
#endif
};

// Runs worker(t) for t < n as n threads running at once; returns when every one has returned. With fibers,
// switch_state(t) is called as thread t is switched onto the launching OS thread and again as it is switched off, to
// exchange the thread-locals it sees (threadIdx, ...) with the ones saved for it; a call where every thread that has
// not returned waits at a barrier no other can complete (a __syncthreads some threads never reach: a hang on the
// GPU) aborts, saying so.
void run_threads(unsigned n, const std::function<void(unsigned)> &worker,
                 const std::function<void(unsigned)> &switch_state);

} // namespace emu
