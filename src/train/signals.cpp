#include "train/signals.h"

#include <csignal>

namespace zaya {

namespace {
volatile std::sig_atomic_t g_received = 0;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[3];

void on_signal(int sig) {
    if (g_received == 0) g_received = sig;
}
} // namespace

StopSignals::StopSignals() {
    g_received = 0;
    for (int i = 0; i < 3; ++i) {
        struct sigaction sa {};
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND; // one-shot: a second signal stops the process the usual way
        sigaction(kSignals[i], &sa, &g_previous[i]);
    }
}

StopSignals::~StopSignals() {
    for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

int StopSignals::received() const { return g_received; }

} // namespace zaya
