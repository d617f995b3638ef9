// fp32-weight linear layers at inference: both paths (SGEMMs of 8 rows, one SGEMM) at both row precisions equal a
// double reference of the rows as the precision takes them, row counts with and without a last short slice.
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/linear_f32.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zaya {
namespace {

TEST(LinearF32, MatchesReferenceOnBothPathsAtBothPrecisions) {
    Rng rng(8, 0);
    for (auto precision : {cpu::MatmulPrecision::F32, cpu::MatmulPrecision::BF16}) {
        for (int64_t I : {7, 16, 45, 300, 1100}) {
            for (int64_t O : {1, 3, 70}) {
                std::vector<float> W(size_t(O * I)), b(static_cast<size_t>(O));
                for (auto &v : W) v = float(rng.normal());
                for (auto &v : b) v = float(rng.normal());
                for (int64_t N : {1, 2, 5, 8, 9, 17, 40}) {
                    std::vector<float> x(size_t(N * I));
                    for (auto &v : x) v = float(rng.normal());
                    const int64_t ldy = O + 3; // a strided output: the rest of each row must stay untouched
                    std::vector<float> y(size_t(N * ldy), -7.0f);
                    const int64_t slice_max = N % 2 || N == 2 ? 1000 : 0; // both paths, alternating by N
                    cpu::linear_f32_with(y.data(), ldy, x.data(), W.data(), b.data(), N, I, O, slice_max, precision);
                    for (int64_t n = 0; n < N; ++n) {
                        for (int64_t o = 0; o < O; ++o) {
                            double ref = b[size_t(o)];
                            for (int64_t i = 0; i < I; ++i) {
                                const float xi = x[size_t(n * I + i)];
                                ref += double(precision == cpu::MatmulPrecision::BF16 ? bf16_to_f32(f32_to_bf16(xi))
                                                                                      : xi) *
                                       W[size_t(o * I + i)];
                            }
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
}

} // namespace
} // namespace zaya
