// Every CUDA op against its CPU twin (ops/cpu) on fresh random inputs. Outputs are poisoned (NaN bytes) before each
// run so an unwritten element fails; every CUDA call is checked. Without a GPU every test skips and says why.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/norm.h"
#include "ops/cuda/ops.h"
#include "optim/adamw.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// Ids repeat (a dozen over 41 tokens, some never), the skip token occurs; dtable, dbias, dscale accumulate onto
// random values. A rerun from the same values must be bit-identical (no atomics).
TEST_F(CudaOps, EmbeddingBackwardSkipsAndIsDeterministic) {
    const int64_t N = 41, D = 70, V = 12;
    auto table = random_vec(size_t(V * D), 30), bias = random_vec(size_t(D), 31, 0.1);
    auto scale = random_vec(size_t(D), 32, 0.2, 1.0), dout = random_vec(size_t(N * D), 33);
    const auto dtable0 = random_vec(table.size(), 34), dbias0 = random_vec(size_t(D), 35),
               dscale0 = random_vec(size_t(D), 36);
    std::vector<int32_t> tokens(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) tokens[size_t(n)] = int32_t((n * n * 7 + 3) % (V - 1)); // id 11 never occurs
    auto t_d = upload(tokens);
    auto tab_d = upload(table), b_d = upload(bias), s_d = upload(scale), g_d = upload(dout);
    for (int32_t skip : {5, -1}) {
        SCOPED_TRACE(::testing::Message() << "skip_token=" << skip);
        auto dtable = dtable0, dbias = dbias0, dscale = dscale0;
        cpu::embedding_backward(dtable.data(), dbias.data(), dscale.data(), dout.data(), tokens.data(), table.data(),
                                bias.data(), scale.data(), N, D, skip);
        std::vector<float> first[3];
        for (int run = 0; run < 2; ++run) {
            auto dt_d = upload(dtable0), db_d = upload(dbias0), ds_d = upload(dscale0);
            cuda::embedding_backward(dt_d.data(), db_d.data(), ds_d.data(), g_d.data(), t_d.data(), tab_d.data(),
                                     b_d.data(), s_d.data(), N, D, skip);
            const std::vector<float> got[3] = {download(dt_d), download(db_d), download(ds_d)};
            EXPECT_LT(rel_err(got[0], dtable), kFp32Tol);
            EXPECT_LT(rel_err(got[1], dbias), kFp32Tol);
            EXPECT_LT(rel_err(got[2], dscale), kFp32Tol);
            if (skip >= 0) { // the skip token's row is untouched, exactly
                EXPECT_EQ(std::vector<float>(got[0].begin() + skip * D, got[0].begin() + (skip + 1) * D),
                          std::vector<float>(dtable0.begin() + skip * D, dtable0.begin() + (skip + 1) * D));
            }
            if (run == 0) std::copy(got, got + 3, first);
            for (int k = 0; k < 3; ++k) EXPECT_EQ(got[k], first[k]) << "output " << k << " differs on a rerun";
        }
    }
}

// The device groups rows by id with a radix sort of 11-bit digits: ids equal in their low digits but not above
// (every digit of the three differs somewhere), over more rows than one 256-row chunk of the counting sort, the skip
// token among them; against the CPU, id by id.
TEST_F(CudaOps, EmbeddingBackwardGroupsIdsAcrossEveryDigit) {
    const int32_t d1 = 1 << 11, d2 = 1 << 22;
    const std::vector<int32_t> ids = {1, 1 + d1, 1 + d2, d1, d2, d2 + d1 + 1, 5, 5 + 3 * d1, 0};
    const int64_t N = 600, D = 2, V = d2 + d1 + 2;
    std::vector<int32_t> tokens(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) tokens[size_t(n)] = ids[size_t((n * 5 + n / 11) % int64_t(ids.size()))];
    const auto dout = random_vec(size_t(N * D), 37), scale = random_vec(size_t(D), 38, 0.2, 1.0);
    const std::vector<float> table(size_t(V * D), 0.5f), bias(size_t(D), 0.0f), zeros(size_t(V * D), 0.0f);
    std::vector<float> dtable = zeros, dbias(size_t(D), 0.0f), dscale(size_t(D), 0.0f);
    cpu::embedding_backward(dtable.data(), dbias.data(), dscale.data(), dout.data(), tokens.data(), table.data(),
                            bias.data(), scale.data(), N, D, d1);
    auto t_d = upload(tokens);
    auto g_d = upload(dout), s_d = upload(scale), tab_d = upload(table), b_d = upload(bias);
    auto dt_d = upload(zeros), db_d = upload(std::vector<float>(size_t(D), 0.0f));
    auto ds_d = upload(std::vector<float>(size_t(D), 0.0f));
    cuda::embedding_backward(dt_d.data(), db_d.data(), ds_d.data(), g_d.data(), t_d.data(), tab_d.data(), b_d.data(),
                             s_d.data(), N, D, d1);
    const std::vector<float> got = download(dt_d);
    for (int32_t id : ids) {
        SCOPED_TRACE(::testing::Message() << "id " << id);
        const std::vector<float> row(got.begin() + id * D, got.begin() + (id + 1) * D);
        EXPECT_LT(rel_err(row, std::vector<float>(dtable.begin() + id * D, dtable.begin() + (id + 1) * D)), kFp32Tol);
        if (id != d1) {
            EXPECT_NE(row, std::vector<float>(size_t(D), 0.0f)) << "an id's rows were not added";
        }
    }
    EXPECT_EQ(got[size_t(d1 * D)], 0.0f) << "the skip token's row";
    EXPECT_LT(rel_err(got, dtable), kFp32Tol);

    // The grouping itself (one run per id is what keeps each table row to one writer): the rows stably sorted by
    // id, the skip token's last.
    std::vector<int32_t> want(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) want[size_t(n)] = int32_t(n);
    const auto key = [&](int32_t n) { return tokens[size_t(n)] == d1 ? int64_t(1) << 40 : int64_t(tokens[size_t(n)]); };
    std::stable_sort(want.begin(), want.end(), [&](int32_t a, int32_t b) { return key(a) < key(b); });
    const int64_t *rows_d = nullptr;
    const int32_t *order_d = cuda::rows_by_token_id(t_d.data(), N, d1, &rows_d);
    std::vector<int32_t> order(static_cast<size_t>(N));
    int64_t rows = 0;
    cuda::copy_to_host(order.data(), order_d, order.size() * sizeof(int32_t));
    cuda::copy_to_host(&rows, rows_d, sizeof(rows));
    EXPECT_EQ(order, want);
    EXPECT_EQ(rows, N - std::count(tokens.begin(), tokens.end(), d1));
}

TEST_F(CudaOps, ResidualScaleBackward) {
    const int64_t N = 23, D = 90;
    auto x = random_vec(size_t(N * D), 40), res = random_vec(size_t(N * D), 41), dout = random_vec(size_t(N * D), 42);
    auto s1 = random_vec(size_t(D), 43, 0.2, 1.0), b1 = random_vec(size_t(D), 44, 0.1);
    auto s2 = random_vec(size_t(D), 45, 0.2, 1.0), b2 = random_vec(size_t(D), 46, 0.1);
    const auto dres0 = random_vec(size_t(N * D), 47), dp0 = random_vec(size_t(4 * D), 48);
    auto x_d = upload(x), r_d = upload(res), g_d = upload(dout);
    auto s1_d = upload(s1), b1_d = upload(b1), s2_d = upload(s2), b2_d = upload(b2);
    for (bool accumulate : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "accumulate_dres=" << accumulate);
        std::vector<float> dx(x.size()), dres = dres0, dp = dp0; // dp: d_hs_scale, d_hs_bias, d_res_scale, d_res_bias
        float *p = dp.data();
        cpu::residual_scale_backward(dx.data(), dres.data(), p, p + D, p + 2 * D, p + 3 * D, dout.data(), x.data(),
                                     res.data(), s1.data(), b1.data(), s2.data(), b2.data(), N, D, accumulate);
        auto dx_d = poisoned(dx.size()), dp_d = upload(dp0);
        auto dres_d = accumulate ? upload(dres0) : poisoned(dres0.size());
        float *q = dp_d.data();
        cuda::residual_scale_backward(dx_d.data(), dres_d.data(), q, q + D, q + 2 * D, q + 3 * D, g_d.data(),
                                      x_d.data(), r_d.data(), s1_d.data(), b1_d.data(), s2_d.data(), b2_d.data(), N, D,
                                      accumulate);
        EXPECT_LT(rel_err(download(dx_d), dx), kFp32Tol);
        EXPECT_LT(rel_err(download(dres_d), dres), kFp32Tol);
        EXPECT_LT(rel_err(download(dp_d), dp), kFp32Tol);
    }
}

// Wide inputs (the tails, where Φ is near 0 or 1), out of place and in place (dx aliasing dy).
TEST_F(CudaOps, GeluBackward) {
    auto x = random_vec(2001, 50, 3.0), dy = random_vec(x.size(), 51);
    x.insert(x.end(), {-12.0f, -6.0f, -0.0f, 0.0f, 6.0f, 12.0f});
    dy.resize(x.size(), 1.0f);
    const int64_t n = int64_t(x.size());
    std::vector<float> dx(x.size());
    cpu::gelu_backward(dx.data(), dy.data(), x.data(), n);
    auto x_d = upload(x), dy_d = upload(dy), dx_d = poisoned(x.size());
    cuda::gelu_backward(dx_d.data(), dy_d.data(), x_d.data(), n);
    EXPECT_LT(rel_err(download(dx_d), dx), kFp32Tol);
    cuda::gelu_backward(dy_d.data(), dy_d.data(), x_d.data(), n);
    EXPECT_LT(rel_err(download(dy_d), dx), kFp32Tol);
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
