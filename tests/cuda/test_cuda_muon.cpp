// Newton–Schulz in bf16 (torch's iteration, as the CPU's Muon::newton_schulz_bf16) against a host reference that
// rounds to bf16 at the same points, products accumulated in double; for wide, square and tall matrices with sides
// multiples of 8 (as the model's), and one of odd sides (row strides that are odd numbers of bf16 elements: if only
// that one fails, see CudaGemm.OddStridesAndLowAlignment). Also: a rerun is bit-identical, every output is a bf16,
// and the result still approximates the exact-arithmetic iteration (the reference itself is the right iteration).
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cuda/muon.h"
#include "optim/muon.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <utility>
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

// The iteration of optim/muon.h in exact (double) arithmetic, on the wide orientation (a tall X is transposed in
// and out, as torch).
std::vector<double> newton_schulz_exact(const std::vector<float> &x, int64_t rows, int64_t cols, const MuonHyper &h) {
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

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// Σ_p term(p) in double, returned as fp32: a GEMM with fp32 output (only the accumulation order differs).
template <class Term> float dot(int64_t K, Term term) {
    double s = 0;
    for (int64_t p = 0; p < K; ++p) s += double(term(p));
    return float(s);
}

// torch's bf16 iteration with the CPU's rounding points (Muon::newton_schulz_bf16, muon.cpp), on the CPU's
// orientation (tall: A = XᵀX, X ← X·Pᵀ + a·X):
//   X = bf16(U);  norm = max(bf16(√ΣX²), bf16(eps));  X = bf16(X / norm)
//   steps times: A = bf16(X·Xᵀ);  P = bf16(c·(A·A) + b·A);  X = bf16(P·X + a·X)
// Matrix m of a batch of n-element matrices stored back to back.
std::vector<float> matrix_of(const std::vector<float> &batch, int64_t m, int64_t n) {
    return std::vector<float>(batch.begin() + m * n, batch.begin() + (m + 1) * n);
}

std::vector<float> newton_schulz_bf16_reference(const std::vector<float> &x, int64_t rows, int64_t cols,
                                                const cuda::NewtonSchulzParams &q) {
    const int64_t n = rows * cols;
    double ss = 0;
    for (float v : x) ss += double(round_bf16(v)) * double(round_bf16(v));
    const float norm = std::max(round_bf16(float(std::sqrt(ss))), round_bf16(q.eps));
    std::vector<float> X(static_cast<size_t>(n)), Y(X.size());
    for (size_t i = 0; i < X.size(); ++i) X[i] = round_bf16(round_bf16(x[i]) / norm);
    const bool tall = rows > cols;
    const int64_t k = tall ? cols : rows;
    std::vector<float> A(size_t(k * k)), P(A.size());
    auto at = [](const std::vector<float> &M, int64_t ld, int64_t i, int64_t j) { return M[size_t(i * ld + j)]; };
    for (int s = 0; s < q.steps; ++s) {
        for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j)
                A[size_t(i * k + j)] = round_bf16(
                    tall ? dot(rows, [&](int64_t p) { return at(X, cols, p, i) * at(X, cols, p, j); })
                         : dot(cols, [&](int64_t p) { return at(X, cols, i, p) * at(X, cols, j, p); }));
        for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
                const float AA = dot(k, [&](int64_t p) { return at(A, k, i, p) * at(A, k, p, j); });
                P[size_t(i * k + j)] = round_bf16(std::fma(q.c, AA, q.b * at(A, k, i, j)));
            }
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j)
                Y[size_t(i * cols + j)] =
                    tall ? dot(cols, [&](int64_t p) { return at(X, cols, i, p) * at(P, cols, j, p); })
                         : dot(rows, [&](int64_t p) { return at(P, rows, i, p) * at(X, cols, p, j); });
        for (size_t i = 0; i < X.size(); ++i) X[i] = round_bf16(std::fma(q.a, X[i], Y[i]));
    }
    return X;
}

// ‖got − ref‖_F / ‖ref‖_F (NaN counts as infinite).
template <class T> double frobenius_rel_err(const std::vector<float> &got, const std::vector<T> &ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = double(got[i]) - double(ref[i]);
        num += std::isfinite(got[i]) ? d * d : INFINITY;
        den += double(ref[i]) * double(ref[i]);
    }
    return std::sqrt(num / den);
}

// max |got − ref| in bf16 ulps of max |ref| (NaN counts as infinite).
double max_err_bf16_ulps(const std::vector<float> &got, const std::vector<float> &ref) {
    double m = 1e-30, e = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        m = std::max(m, double(std::fabs(ref[i])));
        e = std::isfinite(got[i]) ? std::max(e, std::fabs(double(got[i]) - double(ref[i]))) : INFINITY;
    }
    return e / std::ldexp(1.0, std::ilogb(m) - 7); // bf16 has 8 significant bits
}

// Against the same rounded iteration only the GEMMs' accumulation order differs, but a bf16 rounding it flips
// propagates through the following steps (the quintic amplifies it): simulating fp32 accumulation in other orders
// on these shapes gives ‖·‖_F errors up to 0.004 and max errors up to 2.5 ulps of the largest entry (0.008 and
// 5 ulps at 256²), while a rounding point moved (X kept in fp32 between steps, as before; b·A or a·X rounded
// separately) already differs by 0.016–0.042 and 3–16 ulps.
constexpr double kRoundedTol = 1e-2;
constexpr double kRoundedUlps = 6;
// From the exact-arithmetic iteration the bf16 one differs by O(1e-2) (8 significant bits everywhere, amplified
// along small singular values; 0.015–0.017 on these shapes in emulation): one Newton–Schulz step too few or too
// many already differs by ~0.35, a layout or transpose mistake by O(1).
constexpr double kExactTol = 0.05;

void check_newton_schulz(int64_t rows, int64_t cols, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
    const MuonHyper h;
    const auto g = random_vec(size_t(rows * cols), seed);
    const auto [a, b, c] = h.ns_coefficients;
    const cuda::NewtonSchulzParams q{float(a), float(b), float(c), h.ns_steps, float(h.eps)};
    const auto ref = newton_schulz_bf16_reference(g, rows, cols, q);
    cuda::NewtonSchulzBf16 ns(size_t(rows * cols), std::min(rows, cols));
    auto x_d = upload(g);
    ns.run(x_d.data(), rows, cols, q);
    const auto got = download(x_d);

    const double err = frobenius_rel_err(got, ref), ulps = max_err_bf16_ulps(got, ref);
    const double exact_err = frobenius_rel_err(got, newton_schulz_exact(g, rows, cols, h));
    ::testing::Test::RecordProperty("frobenius_rel_err", std::to_string(err)); // in gpu_check's JSON
    ::testing::Test::RecordProperty("max_err_bf16_ulps", std::to_string(ulps));
    ::testing::Test::RecordProperty("exact_frobenius_rel_err", std::to_string(exact_err));
    EXPECT_LT(err, kRoundedTol);
    EXPECT_LE(ulps, kRoundedUlps);
    EXPECT_LT(exact_err, kExactTol);

    size_t not_bf16 = 0;
    for (float v : got) not_bf16 += round_bf16(v) != v;
    EXPECT_EQ(not_bf16, 0u) << "outputs that are not bf16 values";

    // A rerun from the same input is bit-identical (the norm is a fixed-order reduction; no atomics).
    auto x2_d = upload(g);
    ns.run(x2_d.data(), rows, cols, q);
    const auto again = download(x2_d);
    EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * sizeof(float)), 0) << "rerun differs";
}

TEST_F(CudaMuon, NewtonSchulzWide) { check_newton_schulz(24, 88, 800); }

TEST_F(CudaMuon, NewtonSchulzSquare) { check_newton_schulz(40, 40, 900); }

TEST_F(CudaMuon, NewtonSchulzTall) { check_newton_schulz(96, 32, 1000); }

TEST_F(CudaMuon, NewtonSchulzOddSides) { check_newton_schulz(21, 37, 1100); }

// A batch (a layer's experts): each matrix of the strided-batched run against the same matrix run alone — equal up to
// the GEMMs' accumulation order (the batched call may pick another algorithm), at the tolerances above — with its
// own norm (the matrices are scaled differently), wide and tall; and a rerun is bit-identical.
TEST_F(CudaMuon, NewtonSchulzBatchedMatchesOneByOne) {
    const MuonHyper h;
    const auto [a, b, c] = h.ns_coefficients;
    const cuda::NewtonSchulzParams q{float(a), float(b), float(c), h.ns_steps, float(h.eps)};
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{24, 40}, {48, 16}}) {
        SCOPED_TRACE(::testing::Message() << rows << "x" << cols);
        const int64_t count = 3, n = rows * cols;
        auto g = random_vec(size_t(count * n), 1300 + uint64_t(rows));
        for (int64_t i = 0; i < n; ++i) g[size_t(n + i)] *= 7.0f, g[size_t(2 * n + i)] *= 0.01f;
        cuda::NewtonSchulzBf16 ns(size_t(n), std::min(rows, cols), count);
        auto x_d = upload(g);
        ns.run(x_d.data(), rows, cols, q, count);
        const auto got = download(x_d);
        for (int64_t m = 0; m < count; ++m) {
            const std::vector<float> one_in = matrix_of(g, m, n);
            auto one_d = upload(one_in);
            ns.run(one_d.data(), rows, cols, q);
            const auto one = download(one_d);
            const std::vector<float> mine = matrix_of(got, m, n);
            EXPECT_LT(frobenius_rel_err(mine, one), kRoundedTol) << "matrix " << m;
            EXPECT_LE(max_err_bf16_ulps(mine, one), kRoundedUlps) << "matrix " << m;
            EXPECT_LT(frobenius_rel_err(mine, newton_schulz_bf16_reference(one_in, rows, cols, q)), kRoundedTol);
        }
        auto again_d = upload(g);
        ns.run(again_d.data(), rows, cols, q, count);
        EXPECT_EQ(download(again_d), got) << "rerun differs";
    }
}

// Zero steps: only the normalisation, X = bf16(bf16(U) / max(bf16(‖bf16(U)‖), bf16(eps))) — exactly (one double
// reduction, rounded twice). A 0·U input takes the eps floor.
TEST_F(CudaMuon, NewtonSchulzZeroStepsIsTheRoundedNormalisation) {
    const int64_t rows = 24, cols = 40;
    const auto g = random_vec(size_t(rows * cols), 1200, 3.0);
    const cuda::NewtonSchulzParams q{3.4445f, -4.7750f, 2.0315f, 0, 1e-7f};
    cuda::NewtonSchulzBf16 ns(size_t(rows * cols), std::min(rows, cols));
    auto x_d = upload(g);
    ns.run(x_d.data(), rows, cols, q);
    const auto got = download(x_d), ref = newton_schulz_bf16_reference(g, rows, cols, q);
    EXPECT_EQ(std::memcmp(got.data(), ref.data(), got.size() * sizeof(float)), 0);

    const std::vector<float> zeros(size_t(rows * cols), 0.0f);
    auto z_d = upload(zeros);
    ns.run(z_d.data(), rows, cols, q);
    for (float v : download(z_d)) ASSERT_EQ(v, 0.0f);
}

// The norm's sum over several chunks of 64k elements (two matrices of 260 × 300, batched, scaled apart): each matrix
// normalised by its own norm, exactly as the reference rounds it.
TEST_F(CudaMuon, NewtonSchulzNormOverSeveralChunks) {
    const int64_t rows = 260, cols = 300, n = rows * cols, count = 2;
    auto g = random_vec(size_t(count * n), 1400);
    for (int64_t i = 0; i < n; ++i) g[size_t(n + i)] *= 7.0f;
    const cuda::NewtonSchulzParams q{3.4445f, -4.7750f, 2.0315f, 0, 1e-7f};
    cuda::NewtonSchulzBf16 ns(size_t(n), std::min(rows, cols), count);
    auto x_d = upload(g);
    ns.run(x_d.data(), rows, cols, q, count);
    const auto got = download(x_d);
    for (int64_t m = 0; m < count; ++m) {
        const auto ref = newton_schulz_bf16_reference(matrix_of(g, m, n), rows, cols, q);
        EXPECT_EQ(std::memcmp(got.data() + m * n, ref.data(), ref.size() * sizeof(float)), 0) << "matrix " << m;
    }
}

} // namespace
} // namespace zaya
