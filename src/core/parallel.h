// FirstError — carries an exception out of an OpenMP region.
// An exception may not leave a parallel region: the OpenMP runtime calls std::terminate, and the user sees
// "terminate called..." instead of zaya's one-line error (a CPU without a bf16 GEMM once aborted every training run
// this way, from inside Muon's per-matrix loop). A region whose body can fail runs it through run(); the first
// exception is kept, later iterations still run (an OpenMP loop cannot be left early), and rethrow() after the
// region throws it on the calling thread.
#pragma once
#include <cstddef>
#include <exception>
#include <mutex>

namespace zaya {

// Elementwise loops are memory-bound; below this many elements a thread team costs more than it saves.
inline constexpr size_t kParallelMin = size_t(1) << 15;

class FirstError {
public:
    template <class F>
    void run(F &&body) noexcept {
        try {
            body();
        } catch (...) {
            std::lock_guard lock(mutex_);
            if (!first_) first_ = std::current_exception();
        }
    }
    void rethrow() const {
        if (first_) std::rethrow_exception(first_);
    }

private:
    std::mutex mutex_;
    std::exception_ptr first_;
};

} // namespace zaya
