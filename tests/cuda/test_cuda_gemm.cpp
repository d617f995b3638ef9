// The general cuBLASLt GEMMs (ops.h: gemm_f32, gemm_bf16) in all four transpose combinations against plain double
// loops, on odd sizes, with row strides wider than the rows and operands that start one row into their buffer,
// alpha and beta ≠ 1, and beta = 0 over a poisoned C (which must not be read). Strides are first multiples of 8
// elements (16-byte aligned operands, as the model's), then odd (operands only 2- or 4-byte aligned): should only
// the odd-stride test fail, cuBLASLt has no kernel for such alignment and callers must align.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cuda/ops.h"

#include <gtest/gtest.h>

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

} // namespace
} // namespace zaya
