// Graceful stop: while a StopSignals is alive, SIGINT, SIGTERM and SIGHUP only set a flag that the training loop
// checks after each step (it then writes a checkpoint and exits). A second signal of the same kind acts as usual
// (the handler is one-shot), so a stuck run can still be interrupted.
#pragma once

namespace zaya {

class StopSignals {
  public:
    StopSignals();  // installs the handlers
    ~StopSignals(); // restores the previous ones
    StopSignals(const StopSignals &) = delete;
    StopSignals &operator=(const StopSignals &) = delete;

    int received() const; // the first signal received, 0 if none
};

} // namespace zaya
