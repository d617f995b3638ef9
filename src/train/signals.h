// Graceful stop: while a StopSignals is alive, SIGINT, SIGTERM, SIGHUP and SIGUSR1 (the one mpirun forwards to
// its ranks) only set a flag that the training loop
// checks after each step (it then writes a checkpoint and exits). A second signal ends the process at once
// (exit status 128 + signal), so a stuck run can still be interrupted.
//
// The signals are blocked in every thread and taken by one thread of our own with sigwait(): they are never
// delivered asynchronously into compute threads. (An asynchronous handler interrupting oneDNN's JIT kernels
// corrupted the heap in about one run in three under load — measured, not hypothetical.) Create the StopSignals
// before any other thread of ours exists: threads inherit the blocked mask from their creator. Threads that
// libraries started before main() (OpenBLAS's pool) cannot be made to block them: there a handler only passes the
// signal on to the waiting thread.
#pragma once
#include <atomic>
#include <csignal>
#include <iterator>
#include <thread>

namespace zaya {

class StopSignals {
  public:
    StopSignals();  // blocks the signals in this thread (and so in threads created later), starts the waiter
    ~StopSignals(); // stops the waiter, restores the signal mask
    StopSignals(const StopSignals &) = delete;
    StopSignals &operator=(const StopSignals &) = delete;

    int received() const { return received_.load(); } // the first signal received, 0 if none
    // From now on signals are swallowed: the process is exiting after its stop (a data-parallel launcher signals
    // the ranks still exiting when the first one is gone; that must not become the immediate second-signal exit).
    void ignore_further() { ignore_ = true; }

  private:
    static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1};
    sigset_t set_{}, previous_{};
    struct sigaction previous_actions_[std::size(kSignals)] {};
    std::atomic<int> received_{0};
    std::atomic<bool> stop_{false}, ignore_{false};
    std::thread waiter_;
};

} // namespace zaya
