// The general cuBLASLt GEMMs (ops.h: gemm_f32, gemm_bf16) in all four transpose combinations against plain double
// loops, on odd sizes, with row strides wider than the rows and operands that start one row into their buffer,
// alpha and beta ≠ 1, and beta = 0 over a poisoned C (which must not be read). Strides are first multiples of 8
// elements (16-byte aligned operands, as the model's), then odd (operands only 2- or 4-byte aligned): should only
// the odd-stride test fail, cuBLASLt has no kernel for such alignment and callers must align.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cuda/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaGemm : public CudaOps {};

struct GemmCase {
    bool trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    bool odd_strides;
    int64_t a_shift = 0; // A's storage starts this many elements into its buffer (a lower base alignment)
};

// Each operand is stored as a (rows+1) × ld buffer and used from its second row.
template <class T> struct Operand {
    int64_t rows, cols, ld;
    std::vector<float> values; // the logical matrix as the kernel sees it (bf16-rounded for bf16), rows × cols
    std::vector<T> storage;
};

template <class T> Operand<T> make_operand(int64_t rows, int64_t cols, bool odd_stride, uint64_t seed) {
    const int64_t ld = odd_stride ? cols + 1 + cols % 2 : (cols + 8) / 8 * 8; // odd, or a multiple of 8 > cols
    Operand<T> op{rows, cols, ld, random_vec(size_t(rows * cols), seed), {}};
    op.storage.assign(size_t((rows + 1) * op.ld), T{});
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float &v = op.values[size_t(r * cols + c)];
            if constexpr (sizeof(T) == 2) v = bf16_to_f32(op.storage[size_t((r + 1) * op.ld + c)] = f32_to_bf16(v));
            else op.storage[size_t((r + 1) * op.ld + c)] = v;
        }
    return op;
}

template <class T, class Gemm> void check_gemm(const GemmCase &g, Gemm gemm, double tol, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "trans " << g.trans_a << g.trans_b << " " << g.M << "x" << g.N << "x" << g.K
                                      << " beta " << g.beta);
    // Stored shapes: A is [M,K] or [K,M], B is [K,N] or [N,K].
    auto A = make_operand<T>(g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.odd_strides, seed);
    auto B = make_operand<T>(g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.odd_strides, seed + 1);
    const int64_t ldc = g.odd_strides ? g.N + 1 + g.N % 2 : (g.N + 8) / 8 * 8;
    auto c0 = random_vec(size_t((g.M + 1) * ldc), seed + 2);
    std::vector<float> ref = c0;
    for (int64_t i = 0; i < g.M; ++i)
        for (int64_t j = 0; j < g.N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < g.K; ++k) {
                const double a = g.trans_a ? A.values[size_t(k * g.M + i)] : A.values[size_t(i * g.K + k)];
                const double b = g.trans_b ? B.values[size_t(j * g.K + k)] : B.values[size_t(k * g.N + j)];
                acc += a * b;
            }
            float &c = ref[size_t((i + 1) * ldc + j)];
            c = float(g.alpha * acc + (g.beta == 0 ? 0.0 : g.beta * double(c)));
        }
    auto a_store = A.storage;
    a_store.insert(a_store.begin(), size_t(g.a_shift), T{});
    auto a_d = upload(a_store), b_d = upload(B.storage), c_d = upload(c0);
    if (g.beta == 0) cuda::fill_bytes(c_d.data(), 0xFF, c0.size() * sizeof(float)); // NaN: C must not be read
    gemm(g.trans_a, g.trans_b, g.M, g.N, g.K, g.alpha, a_d.data() + g.a_shift + A.ld, A.ld, b_d.data() + B.ld, B.ld,
         g.beta,
         c_d.data() + ldc, ldc);
    auto got = download(c_d);
    // Only the M×N window is compared (the padding of C is the GEMM's to leave alone, but NaN there is ours).
    std::vector<float> got_window, ref_window;
    for (int64_t i = 0; i < g.M; ++i)
        for (int64_t j = 0; j < g.N; ++j) {
            got_window.push_back(got[size_t((i + 1) * ldc + j)]);
            ref_window.push_back(ref[size_t((i + 1) * ldc + j)]);
        }
    EXPECT_LT(rel_err(got_window, ref_window), tol);
}

// Both sizes odd, K both short and long; beta = 0 and a general alpha, beta.
template <class T, class Gemm> void check_all_transposes(Gemm gemm, double tol, bool odd_strides, uint64_t seed) {
    for (bool ta : {false, true})
        for (bool tb : {false, true}) {
            check_gemm<T>({ta, tb, 33, 47, 61, 1.0f, 0.0f, odd_strides}, gemm, tol, seed += 10);
            check_gemm<T>({ta, tb, 19, 8, 130, -0.7f, 1.5f, odd_strides}, gemm, tol, seed += 10);
        }
}

TEST_F(CudaGemm, F32AllTransposes) { check_all_transposes<float>(cuda::gemm_f32, 1e-5, false, 1800); }

TEST_F(CudaGemm, Bf16AllTransposes) { check_all_transposes<uint16_t>(cuda::gemm_bf16, kBf16Tol, false, 1900); }

TEST_F(CudaGemm, OddStridesAndLowAlignment) {
    check_all_transposes<float>(cuda::gemm_f32, 1e-5, true, 2000);
    check_all_transposes<uint16_t>(cuda::gemm_bf16, kBf16Tol, true, 2100);
}

// The same shape and strides from a 16-byte aligned A, then from one a single element further on (2-byte aligned),
// then aligned again: GEMM plans are kept per shape, and each alignment needs its own (the first one's algorithm
// may assume an alignment the second lacks).
TEST_F(CudaGemm, SameShapeAtAnotherAlignment) {
    for (int64_t shift : {0, 1, 0})
        check_gemm<uint16_t>({false, true, 33, 47, 64, 1.0f, 0.0f, false, shift}, cuda::gemm_bf16, kBf16Tol, 2200);
}

// The batched GEMM with bf16 C and D (Newton–Schulz's): D_i = bf16(alpha·op(A_i)·op(B_i) + beta·C_i) for three
// matrices at their strides, against double loops rounded once — at most one bf16 step away (the fp32 epilogue
// may round before bf16 does). Into a separate D, with C left as it was; in place (C = D); and beta = 0 over a
// poisoned C, which must not be read.
TEST_F(CudaGemm, Bf16BatchedWithBf16Output) {
    const int64_t M = 24, N = 40, K = 32, count = 3, sa = M * K + 8, sb = K * N + 16, sc = M * N + 8;
    for (const bool trans_b : {false, true}) {
        SCOPED_TRACE(trans_b ? "B transposed" : "B as stored");
        auto bf16_vec = [](size_t n, uint64_t seed) {
            std::vector<uint16_t> v(n);
            const auto f = random_vec(n, seed);
            for (size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(f[i]);
            return v;
        };
        const auto a = bf16_vec(size_t(count * sa), 2300), b = bf16_vec(size_t(count * sb), 2301),
                   c = bf16_vec(size_t(count * sc), 2302);
        const float alpha = 0.75f, beta = -1.5f;
        auto expected = [&](float bt) {
            std::vector<float> ref(size_t(count * sc));
            for (int64_t t = 0; t < count; ++t)
                for (int64_t i = 0; i < M; ++i)
                    for (int64_t j = 0; j < N; ++j) {
                        double acc = 0;
                        for (int64_t p = 0; p < K; ++p)
                            acc += double(bf16_to_f32(a[size_t(t * sa + i * K + p)])) *
                                   bf16_to_f32(b[size_t(t * sb + (trans_b ? j * K + p : p * N + j))]);
                        const double cv = bt == 0 ? 0.0 : double(bt) * bf16_to_f32(c[size_t(t * sc + i * N + j)]);
                        ref[size_t(t * sc + i * N + j)] = float(alpha * acc + cv);
                    }
            return ref;
        };
        auto check = [&](const std::vector<uint16_t> &got, const std::vector<float> &ref) {
            int far = 0;
            for (int64_t t = 0; t < count; ++t)
                for (int64_t e = 0; e < M * N; ++e) {
                    const size_t at = size_t(t * sc + e);
                    // One bf16 step at r's binade (8 significant bits), and a floor for results near 0, whose
                    // fp32 cancellation error is relative to the terms rather than to r.
                    const double r = ref[at], step = std::ldexp(1.0, std::ilogb(r == 0 ? 1e-30 : r) - 7);
                    far += std::abs(double(bf16_to_f32(got[at])) - r) > step + 1e-5;
                }
            EXPECT_EQ(far, 0) << "elements more than one bf16 step from the reference";
        };
        const int ldb = trans_b ? int(K) : int(N);
        auto a_d = upload(a), b_d = upload(b), c_d = upload(c), d_d = upload(std::vector<uint16_t>(c.size(), 0xFFFF));
        cuda::gemm_bf16_batched(false, trans_b, M, N, K, alpha, a_d.data(), K, sa, b_d.data(), ldb, sb, beta,
                                c_d.data(), d_d.data(), N, sc, count);
        check(download(d_d), expected(beta));
        EXPECT_EQ(download(c_d), c) << "C was written";
        cuda::gemm_bf16_batched(false, trans_b, M, N, K, alpha, a_d.data(), K, sa, b_d.data(), ldb, sb, beta,
                                c_d.data(), c_d.data(), N, sc, count); // in place
        check(download(c_d), expected(beta));
        auto nan_d = upload(std::vector<uint16_t>(c.size(), 0x7FC0)); // C all NaN, beta = 0
        cuda::gemm_bf16_batched(false, trans_b, M, N, K, alpha, a_d.data(), K, sa, b_d.data(), ldb, sb, 0.0f,
                                nan_d.data(), nan_d.data(), N, sc, count);
        check(download(nan_d), expected(0.0f));
    }
}

} // namespace
} // namespace zaya
