#include "core/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace zaya {

double measure_read_bandwidth(size_t bytes, int reps) {
    const size_t n = bytes / sizeof(float);
    std::unique_ptr<float[]> owner(new float[n]);
    float *buf = owner.get(); // a raw pointer: through unique_ptr::operator[] GCC vectorised the sum with gathers
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) buf[i] = float(i & 7); // first touch by the threads that will read
    double best = 0;
    volatile float sink = 0;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        float total = 0;
        // `simd` lets the compiler keep vector partial sums (a plain float reduction is latency-bound, and an
        // integer XOR reduction measured 3× slower here): the loop is then bound by memory alone.
#pragma omp parallel for simd schedule(static) reduction(+ : total)
        for (size_t i = 0; i < n; ++i) total += buf[i];
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        sink = sink + total;
        best = std::max(best, double(n * sizeof(float)) / dt);
    }
    (void)sink;
    return best;
}

} // namespace zaya
