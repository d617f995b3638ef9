// The CPU benchmarks' timer (bench/bench_*.cpp): the best of `reps` timed calls of f, after one untimed warm-up.
#pragma once
#include <algorithm>
#include <chrono>
#include <functional>

namespace zaya::bench {

inline double best_seconds(int reps, const std::function<void()> &f) {
    f();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

} // namespace zaya::bench
