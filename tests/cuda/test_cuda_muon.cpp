// Newton–Schulz on bf16 GEMMs against the same iteration in double (plain loops), for wide, square and tall
// matrices with sides multiples of 8 (as the model's), and one of odd sides (row strides that are odd numbers of
// bf16 elements: if only that one fails, see CudaGemm.OddStridesAndLowAlignment).
#include "cuda_test_util.h"
#include "ops/cuda/muon.h"
#include "optim/muon.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaMuon : public CudaOps {};

using Matrix = std::vector<double>; // row-major

// C[m,n] = A[m,k]·B[k,n]
Matrix matmul(const Matrix &A, const Matrix &B, int64_t m, int64_t k, int64_t n) {
    Matrix C(size_t(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t p = 0; p < k; ++p)
            for (int64_t j = 0; j < n; ++j) C[size_t(i * n + j)] += A[size_t(i * k + p)] * B[size_t(p * n + j)];
    return C;
}
Matrix transpose(const Matrix &A, int64_t m, int64_t n) {
    Matrix T(A.size());
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) T[size_t(j * m + i)] = A[size_t(i * n + j)];
    return T;
}

// The iteration of optim/muon.h in double, on the wide orientation (a tall X is transposed in and out, as torch).
std::vector<double> newton_schulz_reference(const std::vector<float> &x, int64_t rows, int64_t cols,
                                           const MuonHyper &h) {
    Matrix X(x.begin(), x.end());
    double ss = 0;
    for (double v : X) ss += v * v;
    const double norm = std::max(std::sqrt(ss), h.eps);
    for (double &v : X) v /= norm;
    const bool tall = rows > cols;
    int64_t m = rows, n = cols;
    if (tall) X = transpose(X, rows, cols), std::swap(m, n);
    const auto [a, b, c] = h.ns_coefficients;
    for (int s = 0; s < h.ns_steps; ++s) {
        const Matrix A = matmul(X, transpose(X, m, n), m, n, m);
        const Matrix AA = matmul(A, A, m, m, m);
        Matrix P(A.size());
        for (size_t i = 0; i < P.size(); ++i) P[i] = b * A[i] + c * AA[i];
        const Matrix PX = matmul(P, X, m, m, n);
        for (size_t i = 0; i < X.size(); ++i) X[i] = a * X[i] + PX[i];
    }
    if (tall) X = transpose(X, m, n);
    return X;
}

// ‖got − ref‖_F / ‖ref‖_F. bf16 rounds every GEMM operand to 8 significant bits, and the quintic amplifies such
// perturbations along small singular values (slope a ≈ 3.4 there), so the result carries an O(1e-2) error: 0.02–0.035
// measured in emulation and in a numpy simulation of the same roundings (the max entry error is 0.03–0.05 of the
// largest entry). 0.08 leaves room for fp32 accumulation order, while one Newton–Schulz step too few or too many
// already differs by ~0.35 and a layout or transpose mistake by O(1).
constexpr double kNewtonSchulzTol = 0.08;

double frobenius_rel_err(const std::vector<float> &got, const std::vector<double> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = double(got[i]) - ref[i];
        num += std::isfinite(got[i]) ? d * d : INFINITY;
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / den);
}

void check_newton_schulz(int64_t rows, int64_t cols, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const MuonHyper h;
    const auto g = random_vec(size_t(rows * cols), seed);
    const auto ref = newton_schulz_reference(g, rows, cols, h);
    cuda::NewtonSchulzBf16 ns(size_t(rows * cols), std::min(rows, cols));
    auto x_d = upload(g);
    const auto [a, b, c] = h.ns_coefficients;
    ns.run(x_d.data(), rows, cols, {float(a), float(b), float(c), h.ns_steps, float(h.eps)});
    const auto got = download(x_d);
    const double err = frobenius_rel_err(got, ref);
    ::testing::Test::RecordProperty("frobenius_rel_err", std::to_string(err)); // in gpu_check's JSON
    EXPECT_LT(err, kNewtonSchulzTol);
}

TEST_F(CudaMuon, NewtonSchulzWide) { check_newton_schulz(24, 88, 800); }

TEST_F(CudaMuon, NewtonSchulzSquare) { check_newton_schulz(40, 40, 900); }

TEST_F(CudaMuon, NewtonSchulzTall) { check_newton_schulz(96, 32, 1000); }

TEST_F(CudaMuon, NewtonSchulzOddSides) { check_newton_schulz(21, 37, 1100); }

} // namespace
} // namespace zaya
