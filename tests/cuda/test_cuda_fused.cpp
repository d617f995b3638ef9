// The fused CUDA ops (ops/cuda/residual_norm.cu, cca_fused.cu, router_fused.cu) against the CPU chains of unfused
// ops they replace, on fresh random inputs with poisoned outputs. Norm rows: widths for several block sizes and the
// unfused fallback for rows too wide for registers, counts with partial blocks of rows (backward). CCA: varlen
// batches with empty sequences and ones longer than a token tile. Router: partial token tiles, several widths.
#include "cuda_test_util.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/moe.h"
#include "ops/cpu/norm.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/ops.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

namespace zaya {
namespace {

using namespace test;

// The residual scaling's inputs and parameters, and the norm's weight, on both sides.
struct ResidualNormCase {
    int64_t N, D;
    std::vector<float> x, res, hs, hb, rs, rb, w;
    ResidualNormCase(int64_t n, int64_t d, uint64_t seed)
        : N(n), D(d), x(random_vec(size_t(n * d), seed)), res(random_vec(size_t(n * d), seed + 1)),
          hs(random_vec(size_t(d), seed + 2, 0.2, 1.0)), hb(random_vec(size_t(d), seed + 3, 0.1)),
          rs(random_vec(size_t(d), seed + 4, 0.2, 1.0)), rb(random_vec(size_t(d), seed + 5, 0.1)),
          w(random_vec(size_t(d), seed + 6, 0.2, 1.0)) {}
};

class CudaFused : public CudaOps, public ::testing::WithParamInterface<std::pair<int64_t, int64_t>> {};

TEST_P(CudaFused, ResidualRmsNormForwardBackward) {
    const auto [N, D] = GetParam();
    const ResidualNormCase c(N, D, 100 + uint64_t(D));
    const float eps = 1e-5f;
    const size_t nd = size_t(N * D);
    // CPU chain: residual scaling, then the norm of its output.
    std::vector<float> out(nd), y(nd), rstd(static_cast<size_t>(N));
    cpu::residual_scale_forward(out.data(), c.x.data(), c.res.data(), c.hs.data(), c.hb.data(), c.rs.data(),
                                c.rb.data(), N, D);
    cpu::rmsnorm_forward(y.data(), rstd.data(), out.data(), c.w.data(), N, D, eps);

    auto x_d = upload(c.x), res_d = upload(c.res), hs_d = upload(c.hs), hb_d = upload(c.hb), rs_d = upload(c.rs),
         rb_d = upload(c.rb), w_d = upload(c.w);
    auto out_d = poisoned(nd), y_d = poisoned(nd), rstd_d = poisoned(static_cast<size_t>(N));
    cuda::residual_rmsnorm_forward(out_d.data(), y_d.data(), rstd_d.data(), x_d.data(), res_d.data(), hs_d.data(),
                                   hb_d.data(), rs_d.data(), rb_d.data(), w_d.data(), N, D, eps);
    EXPECT_LT(rel_err(download(out_d), out), kFp32Tol);
    EXPECT_LT(rel_err(download(y_d), y), kFp32Tol);
    EXPECT_LT(rel_err(download(rstd_d), rstd), kFp32Tol);

    // Backward from the CPU's forward values (so both sides differentiate the same point).
    const auto dy = random_vec(nd, 200), g0 = random_vec(nd, 201), dres0 = random_vec(nd, 202);
    const auto dp0 = random_vec(size_t(5 * D), 203); // dw, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias
    auto out_h = upload(out), rstd_h = upload(rstd), dy_d = upload(dy);
    for (bool accumulate_g : {false, true})
        for (bool accumulate_dres : {false, true}) {
            SCOPED_TRACE(::testing::Message() << "accumulate_g=" << accumulate_g
                                              << " accumulate_dres=" << accumulate_dres);
            auto g = g0, dres = dres0, dp = dp0;
            std::vector<float> dx(nd);
            float *p = dp.data();
            cpu::rmsnorm_backward(g.data(), p, dy.data(), out.data(), c.w.data(), rstd.data(), N, D, accumulate_g);
            cpu::residual_scale_backward(dx.data(), dres.data(), p + D, p + 2 * D, p + 3 * D, p + 4 * D, g.data(),
                                         c.x.data(), c.res.data(), c.hs.data(), c.hb.data(), c.rs.data(), c.rb.data(),
                                         N, D, accumulate_dres);
            std::vector<float> first[3];
            for (int run = 0; run < 2; ++run) {
                auto g_d = upload(g0), dres_d = accumulate_dres ? upload(dres0) : poisoned(nd), dp_d = upload(dp0);
                auto dx_d = poisoned(nd);
                float *q = dp_d.data();
                cuda::rmsnorm_residual_backward(dx_d.data(), dres_d.data(), q + D, q + 2 * D, q + 3 * D, q + 4 * D, q,
                                                g_d.data(), dy_d.data(), out_h.data(), w_d.data(), rstd_h.data(),
                                                x_d.data(), res_d.data(), hs_d.data(), hb_d.data(), rs_d.data(),
                                                rb_d.data(), N, D, accumulate_g, accumulate_dres);
                const std::vector<float> got[3] = {download(dx_d), download(dres_d), download(dp_d)};
                EXPECT_LT(rel_err(got[0], dx), kFp32Tol);
                EXPECT_LT(rel_err(got[1], dres), kFp32Tol);
                for (int k = 0; k < 5; ++k) {
                    const auto part = [&](const std::vector<float> &v) {
                        return std::vector<float>(v.begin() + k * D, v.begin() + (k + 1) * D);
                    };
                    EXPECT_LT(rel_err(part(got[2]), part(dp)), kFp32Tol) << "parameter gradient " << k;
                }
                if (run == 0) std::copy(got, got + 3, first);
                for (int k = 0; k < 3; ++k) EXPECT_EQ(got[k], first[k]) << "output " << k << " differs on a rerun";
            }
        }
}

// (N, D): one row, one partial block of rows, several blocks; 32 to 1024 threads (256: D = 1000, as the 1b preset's
// 1024); D = 4099 takes the fallback.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaFused,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 90}, std::pair<int64_t, int64_t>{37, 300},
                                           std::pair<int64_t, int64_t>{70, 130}, std::pair<int64_t, int64_t>{9, 1000},
                                           std::pair<int64_t, int64_t>{3, 2048},
                                           std::pair<int64_t, int64_t>{2, 4096}, std::pair<int64_t, int64_t>{2, 4099}));

struct CcaChainCase {
    std::vector<int64_t> lens; // the varlen batch: an empty sequence, one longer than a tile of tokens
    int64_t nq, nkv, hd, k0, k1, rot;
};

void PrintTo(const CcaChainCase &c, std::ostream *os) {
    *os << "lens=" << ::testing::PrintToString(c.lens) << " nq=" << c.nq << " nkv=" << c.nkv << " hd=" << c.hd
        << " k0=" << c.k0 << " k1=" << c.k1 << " rot=" << c.rot;
}

class CudaFusedCca : public CudaOps, public ::testing::WithParamInterface<CcaChainCase> {};

// cca_conv_qk_forward against cpu::cca_conv_forward → cca_qk_mean_forward → cca_qk_norm_forward → rope_forward.
TEST_P(CudaFusedCca, ConvQkChainForward) {
    const CcaChainCase cc = GetParam();
    const int64_t groups = cc.nq + cc.nkv, C = groups * cc.hd, B = int64_t(cc.lens.size());
    const cpu::ConvShape s{C, groups, cc.k0, cc.k1};
    std::vector<int64_t> ss(size_t(B + 1), 0);
    std::vector<int32_t> pos;
    int64_t max_len = 0;
    for (int64_t b = 0; b < B; ++b) {
        const int64_t T = cc.lens[size_t(b)];
        ss[size_t(b + 1)] = ss[size_t(b)] + T;
        max_len = std::max(max_len, T);
        for (int64_t t = 0; t < T; ++t) pos.push_back(int32_t(t));
    }
    const int64_t N = ss[size_t(B)], P = cpu::cca_conv_p_rows(N, B, s), half = cc.rot / 2;
    const auto z = random_vec(size_t(N * C), 300), wd = random_vec(size_t(C * s.k0), 301, 0.5);
    const auto bd = random_vec(size_t(C), 302, 0.5), wg = random_vec(size_t(C * cc.hd * s.k1), 303, 0.3);
    const auto bg = random_vec(size_t(C), 304, 0.5), temp = random_vec(size_t(cc.nkv), 305, 0.2, 1.0);
    std::vector<float> cos_t(size_t(std::max<int64_t>(1, N * half))), sin_t(cos_t.size());
    if (half > 0) cpu::rope_tables(cos_t.data(), sin_t.data(), pos.data(), N, cc.rot, 10000.0);

    std::vector<float> o(size_t(N * C)), p(size_t(P * C)), q(size_t(N * cc.nq * cc.hd)), k(size_t(N * cc.nkv * cc.hd));
    std::vector<float> qn(size_t(N * cc.nq)), kn(size_t(N * cc.nkv));
    cpu::cca_conv_forward(o.data(), p.data(), z.data(), ss.data(), B, s, wd.data(), bd.data(), wg.data(), bg.data());
    cpu::cca_qk_mean_forward(q.data(), k.data(), o.data(), z.data(), N, cc.nq, cc.nkv, cc.hd);
    cpu::cca_qk_norm_forward(q.data(), k.data(), qn.data(), kn.data(), temp.data(), N, cc.nq, cc.nkv, cc.hd);
    cpu::rope_forward(q.data(), cos_t.data(), sin_t.data(), N, cc.nq, cc.hd, cc.rot);
    cpu::rope_forward(k.data(), cos_t.data(), sin_t.data(), N, cc.nkv, cc.hd, cc.rot);

    auto ss_d = upload(ss);
    const cuda::VarlenBatch batch{ss_d.data(), B, N, max_len};
    auto z_d = upload(z), wd_d = upload(wd), bd_d = upload(bd), wg_d = upload(wg), bg_d = upload(bg);
    auto temp_d = upload(temp), cos_d = upload(cos_t), sin_d = upload(sin_t);
    auto o_d = poisoned(o.size()), p_d = poisoned(p.size()), q_d = poisoned(q.size()), k_d = poisoned(k.size());
    auto qn_d = poisoned(qn.size()), kn_d = poisoned(kn.size());
    cuda::cca_conv_qk_forward(o_d.data(), p_d.data(), q_d.data(), k_d.data(), qn_d.data(), kn_d.data(), z_d.data(),
                              batch, s, wd_d.data(), bd_d.data(), wg_d.data(), bg_d.data(), temp_d.data(),
                              cos_d.data(), sin_d.data(), cc.nq, cc.nkv, cc.rot);
    EXPECT_LT(rel_err(download(o_d), o), kFp32Tol) << "conv output";
    EXPECT_LT(rel_err(download(p_d), p), kFp32Tol) << "depthwise output";
    EXPECT_LT(rel_err(download(q_d), q), kFp32Tol) << "q";
    EXPECT_LT(rel_err(download(k_d), k), kFp32Tol) << "k";
    EXPECT_LT(rel_err(download(qn_d), qn), kFp32Tol) << "qn";
    EXPECT_LT(rel_err(download(kn_d), kn), kFp32Tol) << "kn";
    if (!cuda::conv_on_tensor_cores(s)) return;

    // With the packed bf16 weight: the conv on tensor cores (cca_conv_forward_bf16, the same bits), then the chain
    // from the mean on in one kernel — against the CPU's mean, norm and RoPE of that conv output.
    SCOPED_TRACE("bf16 grouped conv");
    cuda::DeviceArray<uint16_t> wg16(wg.size());
    cuda::pack_conv_weight_bf16(wg16.data(), wg_d.data(), s);
    auto o16_d = poisoned(o.size()), p16_d = poisoned(p.size());
    cuda::cca_conv_forward_bf16(o16_d.data(), p16_d.data(), z_d.data(), batch, s, wd_d.data(), bd_d.data(),
                                wg16.data(), bg_d.data());
    const std::vector<float> o16 = download(o16_d);
    std::vector<float> q16(q.size()), k16(k.size()), qn16(qn.size()), kn16(kn.size());
    cpu::cca_qk_mean_forward(q16.data(), k16.data(), o16.data(), z.data(), N, cc.nq, cc.nkv, cc.hd);
    cpu::cca_qk_norm_forward(q16.data(), k16.data(), qn16.data(), kn16.data(), temp.data(), N, cc.nq, cc.nkv, cc.hd);
    cpu::rope_forward(q16.data(), cos_t.data(), sin_t.data(), N, cc.nq, cc.hd, cc.rot);
    cpu::rope_forward(k16.data(), cos_t.data(), sin_t.data(), N, cc.nkv, cc.hd, cc.rot);
    for (auto *d : {&o_d, &p_d, &q_d, &k_d, &qn_d, &kn_d}) cuda::fill_bytes(d->data(), 0xFF, d->size() * sizeof(float));
    cuda::cca_conv_qk_forward(o_d.data(), p_d.data(), q_d.data(), k_d.data(), qn_d.data(), kn_d.data(), z_d.data(),
                              batch, s, wd_d.data(), bd_d.data(), wg_d.data(), bg_d.data(), temp_d.data(),
                              cos_d.data(), sin_d.data(), cc.nq, cc.nkv, cc.rot, wg16.data());
    EXPECT_EQ(download(o_d), o16) << "conv output";
    EXPECT_EQ(download(p_d), download(p16_d)) << "depthwise output";
    EXPECT_LT(rel_err(download(o_d), o), 2e-2) << "conv output against fp32";
    EXPECT_LT(rel_err(download(q_d), q16), kFp32Tol) << "q";
    EXPECT_LT(rel_err(download(k_d), k16), kFp32Tol) << "k";
    EXPECT_LT(rel_err(download(qn_d), qn16), kFp32Tol) << "qn";
    EXPECT_LT(rel_err(download(kn_d), kn16), kFp32Tol) << "kn";
}

// cca_qk_backward against cpu::rope_backward (q, k) → cca_qk_mean_forward → cca_qk_norm_backward →
// cca_qk_mean_backward, from the CPU forward's conv output and norms; dtemp accumulates, and a rerun is identical.
TEST_P(CudaFusedCca, QkChainBackward) {
    const CcaChainCase cc = GetParam();
    const int64_t nq = cc.nq, nkv = cc.nkv, hd = cc.hd, C = (nq + nkv) * hd, half = cc.rot / 2;
    int64_t N = 0;
    for (int64_t T : cc.lens) N += T;
    std::vector<int32_t> pos;
    for (int64_t T : cc.lens)
        for (int64_t t = 0; t < T; ++t) pos.push_back(int32_t(t));
    // A forward point: conv output and z random, norms from the CPU's mean and norm.
    const auto conv = random_vec(size_t(N * C), 500), z = random_vec(size_t(N * C), 501);
    const auto temp = random_vec(size_t(nkv), 502, 0.2, 1.0), dtemp0 = random_vec(size_t(nkv), 503);
    const auto dq0 = random_vec(size_t(N * nq * hd), 504), dk0 = random_vec(size_t(N * nkv * hd), 505);
    std::vector<float> q(dq0.size()), k(dk0.size()), qn(size_t(N * nq)), kn(size_t(N * nkv));
    cpu::cca_qk_mean_forward(q.data(), k.data(), conv.data(), z.data(), N, nq, nkv, hd);
    cpu::cca_qk_norm_forward(q.data(), k.data(), qn.data(), kn.data(), temp.data(), N, nq, nkv, hd);
    std::vector<float> cos_t(size_t(std::max<int64_t>(1, N * half))), sin_t(cos_t.size());
    if (half > 0) cpu::rope_tables(cos_t.data(), sin_t.data(), pos.data(), N, cc.rot, 10000.0);

    auto dq = dq0, dk = dk0, dtemp = dtemp0;
    std::vector<float> q_pre(dq0.size()), k_pre(dk0.size()), dconv(size_t(N * C)), dz(size_t(N * C));
    cpu::rope_backward(dq.data(), cos_t.data(), sin_t.data(), N, nq, hd, cc.rot);
    cpu::rope_backward(dk.data(), cos_t.data(), sin_t.data(), N, nkv, hd, cc.rot);
    cpu::cca_qk_mean_forward(q_pre.data(), k_pre.data(), conv.data(), z.data(), N, nq, nkv, hd);
    cpu::cca_qk_norm_backward(dq.data(), dk.data(), dtemp.data(), q_pre.data(), k_pre.data(), qn.data(), kn.data(),
                              temp.data(), N, nq, nkv, hd);
    cpu::cca_qk_mean_backward(dconv.data(), dz.data(), dq.data(), dk.data(), N, nq, nkv, hd);

    auto conv_d = upload(conv), z_d = upload(z), qn_d = upload(qn), kn_d = upload(kn), temp_d = upload(temp);
    auto cos_d = upload(cos_t), sin_d = upload(sin_t);
    std::vector<float> first[3];
    for (int run = 0; run < 2; ++run) {
        auto dq_d = upload(dq0), dk_d = upload(dk0), dtemp_d = upload(dtemp0);
        auto qp_d = poisoned(q_pre.size()), kp_d = poisoned(k_pre.size());
        auto dconv_d = poisoned(dconv.size()), dz_d = poisoned(dz.size());
        cuda::cca_qk_backward(dconv_d.data(), dz_d.data(), dtemp_d.data(), dq_d.data(), dk_d.data(), qp_d.data(),
                              kp_d.data(), conv_d.data(), z_d.data(), qn_d.data(), kn_d.data(), temp_d.data(),
                              cos_d.data(), sin_d.data(), N, nq, nkv, hd, cc.rot);
        const std::vector<float> got[3] = {download(dconv_d), download(dz_d), download(dtemp_d)};
        EXPECT_LT(rel_err(got[0], dconv), kFp32Tol) << "dconv";
        EXPECT_LT(rel_err(got[1], dz), kFp32Tol) << "dz";
        EXPECT_LT(rel_err(got[2], dtemp), kFp32Tol) << "dtemp";
        if (run == 0) std::copy(got, got + 3, first);
        for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], first[i]) << "output " << i << " differs on a rerun";
    }
}

// GQA groups of 2 and 1; k0, k1 ∈ {2, 3}; partial, full and no RoPE; hd past one 128-thread pass (160).
INSTANTIATE_TEST_SUITE_P(Shapes, CudaFusedCca,
                         ::testing::Values(CcaChainCase{{5, 1, 0, 19}, 4, 2, 16, 2, 2, 8},
                                           CcaChainCase{{3, 17}, 2, 2, 8, 3, 3, 8},
                                           CcaChainCase{{0, 6}, 2, 1, 12, 2, 3, 0},
                                           CcaChainCase{{33}, 2, 1, 160, 2, 2, 64},
                                           // hd not a multiple of 4: the conv reads one channel at a time
                                           CcaChainCase{{7, 2}, 2, 1, 10, 2, 2, 4}));

class CudaFusedRouter : public CudaOps, public ::testing::WithParamInterface<std::array<int64_t, 3>> {};

// router_mlp_forward against cpu::rmsnorm_forward → linear → gelu → linear → gelu → linear → router_select_forward.
TEST_P(CudaFusedRouter, MlpForward) {
    const auto [N, R, K] = GetParam();
    const size_t NR = size_t(N * R), NK = size_t(N * K);
    const auto rho = random_vec(NR, 400), norm_w = random_vec(size_t(R), 401, 0.2, 1.0);
    const double ws = 1.0 / std::sqrt(double(R));
    const auto fc1 = random_vec(size_t(R * R), 402, ws), fc1_b = random_vec(size_t(R), 403, 0.1);
    const auto fc2 = random_vec(size_t(R * R), 404, ws), fc2_b = random_vec(size_t(R), 405, 0.1);
    const auto out = random_vec(size_t(K * R), 406, ws), bias = random_vec(size_t(K), 407, 0.05);
    std::vector<float> r_norm(NR), h1(NR), a1(NR), h2(NR), a2(NR), logits(NK), probs(NK);
    std::vector<float> rstd(static_cast<size_t>(N)), p_sel(static_cast<size_t>(N));
    std::vector<int32_t> choice(static_cast<size_t>(N));
    cpu::rmsnorm_forward(r_norm.data(), rstd.data(), rho.data(), norm_w.data(), N, R, 1e-5f);
    cpu::linear_forward(h1.data(), r_norm.data(), fc1.data(), fc1_b.data(), N, R, R);
    cpu::gelu_forward(a1.data(), h1.data(), int64_t(NR));
    cpu::linear_forward(h2.data(), a1.data(), fc2.data(), fc2_b.data(), N, R, R);
    cpu::gelu_forward(a2.data(), h2.data(), int64_t(NR));
    cpu::linear_forward(logits.data(), a2.data(), out.data(), nullptr, N, R, K);
    cpu::router_select_forward(probs.data(), choice.data(), p_sel.data(), logits.data(), bias.data(), N, K);

    auto rho_d = upload(rho), nw_d = upload(norm_w), fc1_d = upload(fc1), fc1b_d = upload(fc1_b);
    auto fc2_d = upload(fc2), fc2b_d = upload(fc2_b), out_d = upload(out), bias_d = upload(bias);
    auto rn_d = poisoned(NR), rstd_d = poisoned(size_t(N)), h1_d = poisoned(NR), a1_d = poisoned(NR);
    auto h2_d = poisoned(NR), a2_d = poisoned(NR), lg_d = poisoned(NK), pr_d = poisoned(NK), ps_d = poisoned(size_t(N));
    auto ch_d = upload(std::vector<int32_t>(size_t(N), -1));
    ASSERT_TRUE(cuda::router_mlp_fusable(R, K));
    cuda::router_mlp_forward(rn_d.data(), rstd_d.data(), h1_d.data(), a1_d.data(), h2_d.data(), a2_d.data(),
                             lg_d.data(), pr_d.data(), ch_d.data(), ps_d.data(), rho_d.data(), nw_d.data(),
                             fc1_d.data(), fc1b_d.data(), fc2_d.data(), fc2b_d.data(), out_d.data(), bias_d.data(), N,
                             R, K, 1e-5f);
    EXPECT_LT(rel_err(download(rn_d), r_norm), kFp32Tol) << "r_norm";
    EXPECT_LT(rel_err(download(rstd_d), rstd), kFp32Tol) << "r_rstd";
    EXPECT_LT(rel_err(download(h1_d), h1), kFp32Tol) << "h1";
    EXPECT_LT(rel_err(download(a1_d), a1), kFp32Tol) << "a1";
    EXPECT_LT(rel_err(download(h2_d), h2), kFp32Tol) << "h2";
    EXPECT_LT(rel_err(download(a2_d), a2), kFp32Tol) << "a2";
    EXPECT_LT(rel_err(download(lg_d), logits), kFp32Tol) << "logits";
    EXPECT_LT(rel_err(download(pr_d), probs), kFp32Tol) << "probs";
    EXPECT_LT(rel_err(download(ps_d), p_sel), kFp32Tol) << "p_sel";
    EXPECT_EQ(download(ch_d), choice);
}

// (N, R, K): a partial tile of tokens; R below, at and past one 256-thread pass; the model's K = 17.
INSTANTIATE_TEST_SUITE_P(Shapes, CudaFusedRouter,
                         ::testing::Values(std::array<int64_t, 3>{37, 40, 5}, std::array<int64_t, 3>{20, 256, 17},
                                           std::array<int64_t, 3>{9, 300, 3}));

} // namespace
} // namespace zaya
