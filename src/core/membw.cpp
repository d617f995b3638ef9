#include "core/membw.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

namespace zaya {

double measure_read_bandwidth(size_t bytes, int reps) {
    const auto s = read_bandwidth_samples(bytes, reps);
    return *std::max_element(s.begin(), s.end());
}

std::vector<double> read_bandwidth_samples(size_t bytes, int reps) {
    const size_t n = bytes / sizeof(float);
    std::unique_ptr<float[]> owner(new float[n]);
    float *buf = owner.get(); // a raw pointer: through unique_ptr::operator[] GCC vectorised the sum with gathers
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; ++i) buf[i] = float(i & 7); // first touch by the threads that will read
    std::vector<double> samples;
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
        samples.push_back(double(n * sizeof(float)) / dt);
    }
    (void)sink;
    return samples;
}

std::vector<double> read_bandwidth_samples(const std::vector<MemRegion> &regions, int reps) {
    size_t total = 0;
    for (const MemRegion &r : regions) total += r.bytes;
    std::vector<double> samples;
    volatile uint32_t sink = 0;
    for (int rep = 0; rep < reps; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        uint32_t x = 0;
        for (const MemRegion &r : regions) {
            const auto *p = static_cast<const uint8_t *>(r.data);
            const size_t words = r.bytes / 4;
            // 32-bit adds over the bytes as they are (memcpy-free: unaligned loads are fine on x86 SIMD).
#pragma omp parallel for simd schedule(static) reduction(+ : x)
            for (size_t i = 0; i < words; ++i) {
                uint32_t w;
                std::memcpy(&w, p + 4 * i, 4);
                x += w;
            }
        }
        const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        sink = sink + x;
        samples.push_back(double(total) / dt);
    }
    (void)sink;
    return samples;
}

} // namespace zaya
