// cpu::gemm's precisions: fp32, and bf16 operands with fp32 accumulation (MatmulPrecision::BF16, the autocast-style
// training option), against a double-precision reference of the same operands.
#include "core/dtype.h"
#include "core/error.h"
#include "core/rng.h"
#include "ops/cpu/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

namespace zaya {
namespace {

std::vector<float> random_matrix(size_t n, uint64_t seed) {
    Rng rng(seed, n);
    std::vector<float> v(n);
    for (auto &x : v) x = float(rng.normal());
    return v;
}

// C[M,N] = α·op(A)·op(B) + β·C0 in double, reading A and B through `round` (identity or bf16 rounding).
template <class Round>
std::vector<double> reference(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const std::vector<float> &A,
                              int64_t lda, const std::vector<float> &B, int64_t ldb, double beta,
                              const std::vector<float> &C0, int64_t ldc, Round round) {
    std::vector<double> C(size_t(M * ldc));
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
                s += double(round(ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)])) *
                     double(round(tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]));
            C[size_t(i * ldc + j)] = alpha * s + beta * double(C0[size_t(i * ldc + j)]);
        }
    return C;
}

double max_rel_diff(const std::vector<float> &got, const std::vector<double> &ref, int64_t M, int64_t N, int64_t ldc) {
    double d = 0, scale = 1e-30;
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            d = std::max(d, std::fabs(double(got[size_t(i * ldc + j)]) - ref[size_t(i * ldc + j)]));
            scale = std::max(scale, std::fabs(ref[size_t(i * ldc + j)]));
        }
    return d / scale;
}

TEST(Gemm, Bf16PrecisionRoundsOperandsAndAccumulatesInFp32) {
    const auto to_bf16 = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
    const auto exact = [](float x) { return x; };
    // Shapes of the model's GEMMs (transposes, strided operands, odd sizes, a row count that changes per call).
    struct Case { bool ta, tb; int64_t M, N, K; };
    const Case cases[] = {{false, true, 37, 48, 64}, {false, false, 64, 33, 17}, {true, false, 24, 40, 100},
                          {true, true, 5, 7, 9}, {false, true, 1, 96, 32}, {false, true, 300, 96, 32}};
    uint64_t seed = 1;
    for (const Case &c : cases) {
        SCOPED_TRACE(testing::Message() << c.ta << c.tb << " " << c.M << "x" << c.N << "x" << c.K);
        const int64_t lda = (c.ta ? c.M : c.K) + 3, ldb = (c.tb ? c.K : c.N) + 5, ldc = c.N + 2;
        const auto A = random_matrix(size_t((c.ta ? c.K : c.M) * lda), seed++);
        const auto B = random_matrix(size_t((c.tb ? c.N : c.K) * ldb), seed++);
        const auto C0 = random_matrix(size_t(c.M * ldc), seed++);
        for (float beta : {0.0f, 1.0f}) {
            std::vector<float> c32 = C0, c16 = C0;
            cpu::gemm(c.ta, c.tb, c.M, c.N, c.K, 0.5f, A.data(), lda, B.data(), ldb, beta, c32.data(), ldc);
            {
                const cpu::MatmulPrecisionScope bf16(cpu::MatmulPrecision::BF16);
                EXPECT_EQ(cpu::matmul_precision(), cpu::MatmulPrecision::BF16);
                cpu::gemm(c.ta, c.tb, c.M, c.N, c.K, 0.5f, A.data(), lda, B.data(), ldb, beta, c16.data(), ldc);
            }
            EXPECT_EQ(cpu::matmul_precision(), cpu::MatmulPrecision::F32); // the scope restored it
            const auto ref32 = reference(c.ta, c.tb, c.M, c.N, c.K, 0.5, A, lda, B, ldb, beta, C0, ldc, exact);
            const auto ref16 = reference(c.ta, c.tb, c.M, c.N, c.K, 0.5, A, lda, B, ldb, beta, C0, ldc, to_bf16);
            EXPECT_LE(max_rel_diff(c32, ref32, c.M, c.N, ldc), 1e-5);
            // bf16 operands, fp32 sums: as close to the rounded-operand product as fp32 accumulation allows …
            EXPECT_LE(max_rel_diff(c16, ref16, c.M, c.N, ldc), 1e-5);
            // … and as far from the exact product as bf16 operands make it (2^-8 relative per operand).
            const double off = max_rel_diff(c16, ref32, c.M, c.N, ldc);
            EXPECT_GT(off, 1e-4);
            EXPECT_LT(off, 2e-2);
            // Padding columns between rows are never written.
            for (int64_t i = 0; i < c.M; ++i)
                for (int64_t j = c.N; j < ldc; ++j) ASSERT_EQ(c16[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]);
        }
    }
}

// gemm_bf16 (oneDNN's bf16 matmul where the CPU has one) and its fallback for CPUs without (operands widened to
// fp32, an SGEMM): both the product of the bf16 operands, summed in fp32.
TEST(Gemm, Bf16NativeAndWidenedBothMatchTheRoundedOperandProduct) {
    const auto exact = [](float x) { return x; };
    struct Case { bool ta, tb; int64_t M, N, K; };
    const Case cases[] = {{false, true, 37, 48, 64}, {true, false, 24, 40, 100}, {true, true, 5, 7, 9},
                          {false, false, 300, 96, 32}};
    uint64_t seed = 50;
    for (const Case &c : cases) {
        SCOPED_TRACE(testing::Message() << c.ta << c.tb << " " << c.M << "x" << c.N << "x" << c.K);
        const int64_t lda = (c.ta ? c.M : c.K) + 3, ldb = (c.tb ? c.K : c.N) + 5, ldc = c.N + 2;
        auto A = random_matrix(size_t((c.ta ? c.K : c.M) * lda), seed++);
        auto B = random_matrix(size_t((c.tb ? c.N : c.K) * ldb), seed++);
        const auto C0 = random_matrix(size_t(c.M * ldc), seed++);
        std::vector<uint16_t> A16(A.size()), B16(B.size());
        for (size_t i = 0; i < A.size(); ++i) A16[i] = f32_to_bf16(A[i]), A[i] = bf16_to_f32(A16[i]);
        for (size_t i = 0; i < B.size(); ++i) B16[i] = f32_to_bf16(B[i]), B[i] = bf16_to_f32(B16[i]);
        // alpha ≠ 1 is applied outside oneDNN (gemm_bf16), with and without beta.
        for (auto [alpha, beta] : {std::pair{0.5f, 1.0f}, {0.5f, 0.0f}, {1.0f, 1.0f}, {1.0f, 0.0f}}) {
            SCOPED_TRACE(testing::Message() << "alpha " << alpha << " beta " << beta);
            const auto ref = reference(c.ta, c.tb, c.M, c.N, c.K, alpha, A, lda, B, ldb, beta, C0, ldc, exact);
            std::vector<float> native = C0, widened = C0;
            cpu::gemm_bf16(c.ta, c.tb, c.M, c.N, c.K, alpha, A16.data(), lda, B16.data(), ldb, beta, native.data(),
                           ldc);
            cpu::gemm_bf16_widened(c.ta, c.tb, c.M, c.N, c.K, alpha, A16.data(), lda, B16.data(), ldb, beta,
                                   widened.data(), ldc);
            EXPECT_LE(max_rel_diff(native, ref, c.M, c.N, ldc), 1e-5);
            EXPECT_LE(max_rel_diff(widened, ref, c.M, c.N, ldc), 1e-5);
            for (int64_t i = 0; i < c.M; ++i)
                for (int64_t j = c.N; j < ldc; ++j) {
                    ASSERT_EQ(native[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]);
                    ASSERT_EQ(widened[size_t(i * ldc + j)], C0[size_t(i * ldc + j)]);
                }
        }
    }
}

TEST(Gemm, PrecisionNamesAndErrors) {
    EXPECT_EQ(cpu::matmul_precision_from_string("fp32"), cpu::MatmulPrecision::F32);
    EXPECT_EQ(cpu::matmul_precision_from_string("bf16"), cpu::MatmulPrecision::BF16);
    EXPECT_STREQ(cpu::matmul_precision_name(cpu::MatmulPrecision::BF16), "bf16");
    try {
        cpu::matmul_precision_from_string("fp16");
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("'fp16'"), std::string::npos) << e.what();
    }
}

TEST(Gemm, Bf16ConversionMatchesScalarRounding) {
    // The vector conversion (AVX512_BF16 where built) rounds like f32_to_bf16, ties to even included; only
    // denormals differ (flushed to zero), which this input has none of.
    std::vector<float> x = random_matrix(1000, 99);
    x[3] = 1.0f + 1.0f / 256; // a tie: rounds to even (1.0)
    x[4] = 1.0f + 3.0f / 256; // a tie: rounds up to even
    x[5] = 0.0f;
    x[6] = -0.0f;
    x[7] = INFINITY;
    std::vector<uint16_t> got(x.size());
    f32_to_bf16_n(x.data(), got.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i], f32_to_bf16(x[i])) << i << " " << x[i];
}

} // namespace
} // namespace zaya
