#include "train/signals.h"

#include <cstdlib>
#include <ctime>
#include <pthread.h>

namespace zaya {

StopSignals::StopSignals() {
    sigemptyset(&set_);
    // SIGUSR1 too: mpirun forwards it to every rank, whereas it turns SIGTERM into killing the job.
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGUSR1}) sigaddset(&set_, s);
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
}

StopSignals::~StopSignals() {
    stop_ = true;
    waiter_.join();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

} // namespace zaya
