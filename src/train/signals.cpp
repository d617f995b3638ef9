#include "train/signals.h"

#include <cstdlib>
#include <ctime>
#include <iterator>
#include <pthread.h>

namespace zaya {

namespace {
// The waiter's thread, for forward_to_waiter (one StopSignals at a time).
pthread_t g_waiter;

// Threads that a library starts before main() never blocked the signals (OpenBLAS's pthread build starts its pool
// as it is loaded), so the kernel may deliver one there, and its default action ends the process at once: no
// checkpoint, no orderly stop. On such a thread — the only kind that can run this — the signal is only passed on
// to the waiter, which has it blocked and takes it with sigtimedwait.
void forward_to_waiter(int sig) { pthread_kill(g_waiter, sig); }
} // namespace

StopSignals::StopSignals() {
    sigemptyset(&set_);
    // SIGUSR1 too: mpirun forwards it to every rank, whereas it turns SIGTERM into killing the job.
    for (int s : kSignals) sigaddset(&set_, s);
    pthread_sigmask(SIG_BLOCK, &set_, &previous_);
    waiter_ = std::thread([this] {
        const timespec tick{0, 100'000'000}; // wake up every 100 ms to see whether we are done
        while (!stop_.load()) {
            const int sig = sigtimedwait(&set_, nullptr, &tick);
            if (sig <= 0 || ignore_.load()) continue;
            int expected = 0;
            if (!received_.compare_exchange_strong(expected, sig)) std::_Exit(128 + sig); // the second one
        }
    });
    g_waiter = waiter_.native_handle();
    struct sigaction sa {};
    sa.sa_handler = forward_to_waiter;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &previous_actions_[i]);
}

StopSignals::~StopSignals() {
    for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &previous_actions_[i], nullptr);
    stop_ = true;
    waiter_.join();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

} // namespace zaya
