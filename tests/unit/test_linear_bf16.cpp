// bf16-weight linear layers: both paths (streaming dot passes; the GEMM) at both activation precisions equal a double
// reference of the widened weights and the activations as the precision takes them (fp32, or rounded to bf16), for
// sizes that exercise every remainder loop and the dot path's column chunks.
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/linear_bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace zaya {
namespace {

void check_both_paths(cpu::MatmulPrecision precision) {
    Rng rng(5, 0);
    for (int64_t I : {7, 16, 45, 64, 300, 1100}) {
        for (int64_t O : {1, 3, 300}) {
            if (I == 1100 && O == 300) continue; // the chunks are I's; a few output rows test them
            std::vector<uint16_t> W(size_t(O * I));
            std::vector<float> Wf(W.size()), b(static_cast<size_t>(O));
            for (size_t k = 0; k < W.size(); ++k) {
                W[k] = f32_to_bf16(float(rng.normal()));
                Wf[k] = bf16_to_f32(W[k]);
            }
            for (auto &v : b) v = float(rng.normal());
            for (int64_t N : {1, 2, 3, 5, 8, 9, 17, 40, 41}) {
                std::vector<float> x(size_t(N * I)), xt(x.size()); // xt: x as the precision takes it
                for (auto &v : x) v = float(rng.normal());
                for (size_t k = 0; k < x.size(); ++k)
                    xt[k] = precision == cpu::MatmulPrecision::BF16 ? bf16_to_f32(f32_to_bf16(x[k])) : x[k];
                const int64_t ldy = O + 3; // a strided output: the rest of each row must stay untouched
                std::vector<float> y(size_t(N * ldy), -7.0f);
                // Both paths on every size (dot passes of 8 rows; the GEMM), alternating by N (2 rows: the dot
                // path, whose AVX2 kernel keeps a different number of accumulators for 1, 2 and ≥ 4 rows).
                const int64_t dot_max = N % 2 || N == 2 ? 1000 : 0;
                cpu::linear_bf16_with(y.data(), ldy, x.data(), W.data(), b.data(), N, I, O, dot_max, precision);
                for (int64_t n = 0; n < N; ++n) {
                    for (int64_t o = 0; o < O; ++o) {
                        double ref = b[size_t(o)];
                        for (int64_t i = 0; i < I; ++i) ref += double(xt[size_t(n * I + i)]) * Wf[size_t(o * I + i)];
                        ASSERT_NEAR(y[size_t(n * ldy + o)], ref, 1e-4 * std::sqrt(double(I)))
                            << cpu::matmul_precision_name(precision) << " I " << I << " O " << O << " N " << N
                            << " row " << n << " col " << o;
                    }
                    for (int64_t o = O; o < ldy; ++o) ASSERT_EQ(y[size_t(n * ldy + o)], -7.0f);
                }
            }
        }
    }
}

TEST(LinearBf16, MatchesReferenceOnBothPathsWithFp32Activations) { check_both_paths(cpu::MatmulPrecision::F32); }

// The tolerance is far below what rounding the activations moves a sum by (~2⁻⁹ of each product), so this also
// fails if either path leaves them unrounded.
TEST(LinearBf16, MatchesReferenceOnBothPathsWithBf16Activations) { check_both_paths(cpu::MatmulPrecision::BF16); }

// linear_bf16's own choice of path, at each precision, computes what either forced path computes; the precisions
// differ.
TEST(LinearBf16, DefaultPathsMatchForcedOnesAndThePrecisionsDiffer) {
    Rng rng(6, 0);
    const int64_t I = 96, O = 40;
    std::vector<uint16_t> W(size_t(O * I));
    for (auto &v : W) v = f32_to_bf16(float(rng.normal()));
    for (int64_t N : {1, 100}) { // the dot path and the GEMM
        std::vector<float> x(size_t(N * I)), y(size_t(N * O)), y32(y.size()), y16(y.size());
        for (auto &v : x) v = float(rng.normal());
        for (auto p : {cpu::MatmulPrecision::F32, cpu::MatmulPrecision::BF16}) {
            cpu::linear_bf16(y.data(), O, x.data(), W.data(), nullptr, N, I, O, p);
            cpu::linear_bf16_with((p == cpu::MatmulPrecision::F32 ? y32 : y16).data(), O, x.data(), W.data(), nullptr,
                                  N, I, O, 0, p);
            for (size_t k = 0; k < y.size(); ++k)
                ASSERT_NEAR(y[k], (p == cpu::MatmulPrecision::F32 ? y32 : y16)[k], 1e-4) << "N " << N << " " << k;
        }
        double moved = 0;
        for (size_t k = 0; k < y.size(); ++k) moved = std::max(moved, double(std::fabs(y32[k] - y16[k])));
        EXPECT_GT(moved, 1e-3) << "N " << N; // the precisions differ: bf16 rounds the activations
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
