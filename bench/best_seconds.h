// The CPU benchmarks' timer (bench/bench_*.cpp): the best of `reps` timed calls of f, after one untimed warm-up; and
// their list options' reader.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <vector>

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

// "1,8,64" as {1, 8, 64} (a benchmark's list option; what is not a number reads as 0, which its caller refuses).
inline std::vector<int64_t> int_list(const char *text) {
    std::vector<int64_t> out;
    for (const char *p = text; *p;) {
        out.push_back(std::atoll(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
    }
    return out;
}

} // namespace zaya::bench
