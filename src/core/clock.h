// Wall time for measurements and timestamps: seconds on the monotonic clock (never jumps with the date).
#pragma once
#include <chrono>

namespace zaya {

inline double monotonic_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

} // namespace zaya
