// bf16-weight linear layers: both paths (streaming dot passes, widened panels + GEMM) equal an fp32
// reference computed with the widened weights, for sizes that exercise every remainder loop.
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/linear_bf16.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zaya {
namespace {

TEST(LinearBf16, MatchesFp32ReferenceOnBothPaths) {
    Rng rng(5, 0);
    for (int64_t I : {7, 16, 45, 64, 300}) {
        for (int64_t O : {1, 3, 300}) {
            std::vector<uint16_t> W(size_t(O * I));
            std::vector<float> Wf(W.size()), b(static_cast<size_t>(O));
            for (size_t k = 0; k < W.size(); ++k) {
                W[k] = f32_to_bf16(float(rng.normal()));
                Wf[k] = bf16_to_f32(W[k]);
            }
            for (auto &v : b) v = float(rng.normal());
            for (int64_t N : {1, 2, 3, 5, 8, 9, 17, 40, 41}) {
                std::vector<float> x(size_t(N * I));
                for (auto &v : x) v = float(rng.normal());
                const int64_t ldy = O + 3; // a strided output: the rest of each row must stay untouched
                std::vector<float> y(size_t(N * ldy), -7.0f);
                // Both paths on every size (dot passes of 8 rows; panels + GEMM), alternating by N (2 rows: the
                // dot path, whose AVX2 kernel keeps a different number of accumulators for 1, 2 and ≥ 4 rows).
                const int64_t dot_max = N % 2 || N == 2 ? 1000 : 0;
                cpu::linear_bf16_with(y.data(), ldy, x.data(), W.data(), b.data(), N, I, O, dot_max);
                for (int64_t n = 0; n < N; ++n) {
                    for (int64_t o = 0; o < O; ++o) {
                        double ref = b[size_t(o)];
                        for (int64_t i = 0; i < I; ++i) ref += double(x[size_t(n * I + i)]) * Wf[size_t(o * I + i)];
                        ASSERT_NEAR(y[size_t(n * ldy + o)], ref, 1e-4 * std::sqrt(double(I)))
                            << "I " << I << " O " << O << " N " << N << " row " << n << " col " << o;
                    }
                    for (int64_t o = O; o < ldy; ++o) ASSERT_EQ(y[size_t(n * ldy + o)], -7.0f);
                }
            }
        }
    }
}

TEST(LinearBf16, GatherRowsWidensExactly) {
    std::vector<uint16_t> table = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), f32_to_bf16(0.25f), f32_to_bf16(3.0f)};
    std::vector<int32_t> ids = {1, 0, 1};
    std::vector<float> out(6);
    cpu::gather_rows_bf16(out.data(), table.data(), ids.data(), 3, 2);
    EXPECT_EQ(out, (std::vector<float>{0.25f, 3.0f, 1.5f, -2.0f, 0.25f, 3.0f}));
}

} // namespace
} // namespace zaya
