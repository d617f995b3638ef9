// Helpers shared by the CUDA op tests: the skipping fixture, random inputs, device upload/download with poisoned
// outputs (NaN bytes, so an unwritten element fails), and the relative error measure.
#pragma once
#include "core/rng.h"
#include "ops/cuda/runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace zaya::test {

// Every test of a CUDA op derives from this: without a usable device it skips and says why.
class CudaOps : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string why;
        if (!cuda::device_available(&why)) GTEST_SKIP() << "CUDA tests skipped: " << why;
    }
};

inline std::vector<float> random_vec(size_t n, uint64_t seed, double scale = 1.0, double mean = 0.0) {
    Rng rng(seed, n);
    std::vector<float> v(n);
    for (auto &x : v) x = float(mean + scale * rng.normal());
    return v;
}

// A device copy of host data, and a poisoned device output of n floats.
template <class T> cuda::DeviceArray<T> upload(const std::vector<T> &h) {
    cuda::DeviceArray<T> d(h.size());
    cuda::copy_to_device(d.data(), h.data(), h.size() * sizeof(T));
    return d;
}
inline cuda::DeviceArray<float> poisoned(size_t n) {
    cuda::DeviceArray<float> d(n);
    cuda::fill_bytes(d.data(), 0xFF, n * sizeof(float));
    return d;
}
template <class T> std::vector<T> download(const cuda::DeviceArray<T> &d) {
    cuda::synchronize();
    std::vector<T> h(d.size());
    cuda::copy_to_host(h.data(), d.data(), h.size() * sizeof(T));
    return h;
}

// Max relative error against the reference, relative to max |ref| (NaN counts as infinite).
inline double rel_err(const std::vector<float> &got, const std::vector<float> &ref) {
    double m = 1e-30, e = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        m = std::max(m, double(std::fabs(ref[i])));
        const double d = std::fabs(double(got[i]) - double(ref[i]));
        e = std::isfinite(got[i]) ? std::max(e, d) : INFINITY;
    }
    return e / m;
}

// The first n elements of v (outputs of which only a prefix is defined).
inline std::vector<float> head(const std::vector<float> &v, size_t n) { return {v.begin(), v.begin() + long(n)}; }

constexpr double kFp32Tol = 1e-5; // fp32 ops: only summation order differs
constexpr double kBf16Tol = 1e-2; // bf16 inputs to both sides; accumulation order differs over K

} // namespace zaya::test
