// Helpers shared by the CUDA op tests: the skipping fixture, random inputs, device upload/download with poisoned
// outputs (NaN bytes, so an unwritten element fails), and the relative error measure.
#pragma once
#include "core/rng.h"
#include "ops/cuda/runtime.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
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

// Attention outputs [rows·heads, hd] over a cache of element T against the CPU's. fp32: within kFp32Tol. bf16: its
// probabilities are rounded to bf16, and a score whose last bits differ (the order of the sums) can send one across a
// rounding boundary now and then, moving its (row, head)'s output by up to 2^−8 of that probability's weight — so all
// but one (row, head) in 20 within kFp32Tol, every one within 4e-3 (not rounding P at all is ~1e-3 off everywhere).
template <class T>
inline void expect_attention_close(const std::vector<float> &got, const std::vector<float> &ref, int64_t hd,
                                   const std::string &ctx) {
    if constexpr (std::is_same_v<T, float>) {
        EXPECT_LT(rel_err(got, ref), kFp32Tol) << ctx;
    } else {
        EXPECT_LT(rel_err(got, ref), 4e-3) << ctx;
        const int64_t outputs = int64_t(ref.size()) / hd;
        int64_t off = 0;
        for (int64_t o = 0; o < outputs; ++o) {
            const std::vector<float> g(got.begin() + o * hd, got.begin() + (o + 1) * hd);
            off += rel_err(g, std::vector<float>(ref.begin() + o * hd, ref.begin() + (o + 1) * hd)) >= kFp32Tol;
        }
        EXPECT_LE(off, std::max<int64_t>(1, outputs / 20)) << ctx << ": (row, head) outputs beyond " << kFp32Tol;
    }
}

} // namespace zaya::test
