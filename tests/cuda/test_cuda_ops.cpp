// Every CUDA op against its CPU twin (ops/cpu) on fresh random inputs. Outputs are poisoned (NaN bytes) before each
// run so an unwritten element fails; every CUDA call is checked. Without a GPU every test skips and says why.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/norm.h"
#include "ops/cuda/ops.h"
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <vector>

namespace zaya {
namespace {

using namespace test;

TEST_F(CudaOps, RmsNormForwardBackward) {
    const int64_t N = 37, D = 300;
    auto x = random_vec(size_t(N * D), 1), w = random_vec(size_t(D), 2, 0.2, 1.0), dy = random_vec(size_t(N * D), 3);
    std::vector<float> y(x.size()), rstd(static_cast<size_t>(N)), dx(x.size()), dw(size_t(D), 0.5f);
    cpu::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, D, 1e-5f);
    cpu::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, D, false);
    auto dx_d = upload(x), w_d = upload(w), dy_d = upload(dy);
    auto y_d = poisoned(y.size()), rstd_d = poisoned(rstd.size()), dxo = poisoned(dx.size());
    auto dw_d = upload(std::vector<float>(size_t(D), 0.5f));
    cuda::rmsnorm_forward(y_d.data(), rstd_d.data(), dx_d.data(), w_d.data(), N, D, 1e-5f);
    EXPECT_LT(rel_err(download(y_d), y), kFp32Tol);
    EXPECT_LT(rel_err(download(rstd_d), rstd), kFp32Tol);
    cuda::rmsnorm_backward(dxo.data(), dw_d.data(), dy_d.data(), dx_d.data(), w_d.data(), rstd_d.data(), N, D, false);
    EXPECT_LT(rel_err(download(dxo), dx), kFp32Tol);
    EXPECT_LT(rel_err(download(dw_d), dw), kFp32Tol);
}

TEST_F(CudaOps, ElementwiseOps) {
    const int64_t N = 19, D = 130, I = 70;
    auto x = random_vec(size_t(N * D), 4), res = random_vec(size_t(N * D), 5);
    auto s1 = random_vec(size_t(D), 6, 0.2, 1.0), b1 = random_vec(size_t(D), 7, 0.1);
    auto s2 = random_vec(size_t(D), 8, 0.2, 1.0), b2 = random_vec(size_t(D), 9, 0.1);
    std::vector<float> out(x.size());
    cpu::residual_scale_forward(out.data(), x.data(), res.data(), s1.data(), b1.data(), s2.data(), b2.data(), N, D);
    auto o_d = poisoned(out.size());
    auto x_d = upload(x), r_d = upload(res), s1_d = upload(s1), b1_d = upload(b1), s2_d = upload(s2), b2_d = upload(b2);
    cuda::residual_scale_forward(o_d.data(), x_d.data(), r_d.data(), s1_d.data(), b1_d.data(), s2_d.data(), b2_d.data(),
                                 N, D);
    EXPECT_LT(rel_err(download(o_d), out), kFp32Tol);

    const int64_t V = 50;
    auto table = random_vec(size_t(V * D), 10);
    std::vector<int32_t> tokens(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) tokens[size_t(n)] = int32_t((n * 7) % V);
    cpu::embedding_forward(out.data(), tokens.data(), table.data(), b1.data(), s1.data(), N, D);
    auto t_d = upload(tokens);
    auto tab_d = upload(table), e_d = poisoned(out.size());
    cuda::embedding_forward(e_d.data(), t_d.data(), tab_d.data(), b1_d.data(), s1_d.data(), N, D);
    EXPECT_LT(rel_err(download(e_d), out), kFp32Tol);

    auto h = random_vec(size_t(N * 2 * I), 11, 2.0), da = random_vec(size_t(N * I), 12);
    std::vector<float> a(static_cast<size_t>(N * I)), dh(h.size());
    cpu::swiglu_forward(a.data(), h.data(), N, I);
    cpu::swiglu_backward(dh.data(), da.data(), h.data(), N, I);
    auto h_d = upload(h), da_d = upload(da), a_d = poisoned(a.size()), dh_d = poisoned(dh.size());
    cuda::swiglu_forward(a_d.data(), h_d.data(), N, I);
    cuda::swiglu_backward(dh_d.data(), da_d.data(), h_d.data(), N, I);
    EXPECT_LT(rel_err(download(a_d), a), kFp32Tol);
    EXPECT_LT(rel_err(download(dh_d), dh), kFp32Tol);

    std::vector<float> g(h.size());
    cpu::gelu_forward(g.data(), h.data(), int64_t(h.size()));
    auto g_d = poisoned(g.size());
    cuda::gelu_forward(g_d.data(), h_d.data(), int64_t(h.size()));
    EXPECT_LT(rel_err(download(g_d), g), kFp32Tol);
}

TEST_F(CudaOps, AdamWMatchesTheCpuStep) {
    const size_t n = 10007;
    auto p = random_vec(n, 13), g = random_vec(n, 14), m = random_vec(n, 15, 0.1), v = random_vec(n, 16, 0.1);
    for (auto &x : v) x = x * x;
    auto p_d = upload(p), g_d = upload(g), m_d = upload(m), v_d = upload(v);
    AdamWHyper hp;
    for (int64_t step = 1; step <= 3; ++step) {
        adamw_update(p.data(), g.data(), m.data(), v.data(), n, 1e-3, 0.1, hp, step);
        cuda::adamw_update(p_d.data(), g_d.data(), m_d.data(), v_d.data(), int64_t(n), 1e-3, 0.1, hp.beta1, hp.beta2,
                           hp.eps, step);
    }
    EXPECT_LT(rel_err(download(p_d), p), kFp32Tol);
    EXPECT_LT(rel_err(download(m_d), m), kFp32Tol);
    EXPECT_LT(rel_err(download(v_d), v), kFp32Tol);
}

TEST_F(CudaOps, Bf16GemmMatchesCpuOnRoundedInputs) {
    const int64_t M = 33, N = 70, K = 257;
    auto a = random_vec(size_t(M * K), 17), b = random_vec(size_t(N * K), 18);
    // The CPU reference multiplies the same bf16-rounded values in fp32.
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    for (size_t i = 0; i < a.size(); ++i) a[i] = bf16_to_f32(a16[i] = f32_to_bf16(a[i]));
    for (size_t i = 0; i < b.size(); ++i) b[i] = bf16_to_f32(b16[i] = f32_to_bf16(b[i]));
    std::vector<float> c(static_cast<size_t>(M * N));
    for (int64_t i = 0; i < M; ++i) // a plain loop in double: this binary carries no BLAS to the GPU machine
        for (int64_t j = 0; j < N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += double(a[size_t(i * K + k)]) * double(b[size_t(j * K + k)]);
            c[size_t(i * N + j)] = float(acc);
        }
    auto a_d = upload(a16), b_d = upload(b16);
    auto c_d = poisoned(c.size());
    cuda::fill_bytes(c_d.data(), 0, c.size() * sizeof(float)); // beta = 0 must not read C anyway; keep it finite
    cuda::gemm_bf16_nt(c_d.data(), N, a_d.data(), b_d.data(), M, N, K, 0.0f);
    EXPECT_LT(rel_err(download(c_d), c), kBf16Tol);
    // to_bf16 rounds as core/dtype.h does.
    auto src = random_vec(1000, 19);
    auto src_d = upload(src);
    cuda::DeviceArray<uint16_t> dst_d(src.size());
    cuda::to_bf16(dst_d.data(), src_d.data(), int64_t(src.size()));
    cuda::synchronize();
    std::vector<uint16_t> dst(src.size());
    cuda::copy_to_host(dst.data(), dst_d.data(), dst.size() * 2);
    for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(dst[i], f32_to_bf16(src[i])) << i;
}

TEST(CudaRuntime, ReportsAvailability) {
    std::string why;
    const bool ok = cuda::device_available(&why);
    if (ok) EXPECT_FALSE(cuda::device_description().empty());
    else EXPECT_FALSE(why.empty()); // says what is missing
}

} // namespace
} // namespace zaya
