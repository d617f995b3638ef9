// CUDA CCA pieces (q-k mean, QK-norm with key temperature, partial RoPE; forward and backward) against cpu::*,
// with GQA groups 4 and 1, and zero head rows so QK-norm's clamp path runs too.
#include "cuda_test_util.h"
#include "ops/cpu/cca.h"
#include "ops/cuda/cca.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaCca : public CudaOps {};

struct CcaCase {
    int64_t N, nq, nkv, hd;
};

void check_qk_mean(const CcaCase &c, uint64_t seed) {
    const int64_t C = (c.nq + c.nkv) * c.hd, nqe = c.N * c.nq * c.hd, nke = c.N * c.nkv * c.hd;
    auto o = random_vec(size_t(c.N * C), seed), z = random_vec(size_t(c.N * C), seed + 1);
    auto dq = random_vec(size_t(nqe), seed + 2), dk = random_vec(size_t(nke), seed + 3);
    std::vector<float> q(static_cast<size_t>(nqe)), k(static_cast<size_t>(nke));
    std::vector<float> dconv(o.size()), dz(o.size());
    cpu::cca_qk_mean_forward(q.data(), k.data(), o.data(), z.data(), c.N, c.nq, c.nkv, c.hd);
    cpu::cca_qk_mean_backward(dconv.data(), dz.data(), dq.data(), dk.data(), c.N, c.nq, c.nkv, c.hd);
    auto o_d = upload(o), z_d = upload(z), dq_d = upload(dq), dk_d = upload(dk);
    auto q_d = poisoned(q.size()), k_d = poisoned(k.size()), dconv_d = poisoned(o.size()), dz_d = poisoned(o.size());
    cuda::cca_qk_mean_forward(q_d.data(), k_d.data(), o_d.data(), z_d.data(), c.N, c.nq, c.nkv, c.hd);
    cuda::cca_qk_mean_backward(dconv_d.data(), dz_d.data(), dq_d.data(), dk_d.data(), c.N, c.nq, c.nkv, c.hd);
    EXPECT_LT(rel_err(download(q_d), q), kFp32Tol);
    EXPECT_LT(rel_err(download(k_d), k), kFp32Tol);
    EXPECT_LT(rel_err(download(dconv_d), dconv), kFp32Tol);
    EXPECT_LT(rel_err(download(dz_d), dz), kFp32Tol);
}

void check_qk_norm(const CcaCase &c, uint64_t seed) {
    const int64_t nqe = c.N * c.nq * c.hd, nke = c.N * c.nkv * c.hd;
    auto q_pre = random_vec(size_t(nqe), seed), k_pre = random_vec(size_t(nke), seed + 1);
    std::fill_n(q_pre.begin() + 3 * c.hd, c.hd, 0.0f); // a zero q head and a zero k head: the norm clamps
    std::fill_n(k_pre.begin() + c.hd, c.hd, 0.0f);
    auto temp = random_vec(size_t(c.nkv), seed + 2, 0.3, 1.0), dtemp0 = random_vec(size_t(c.nkv), seed + 3, 0.1);
    auto dq = random_vec(size_t(nqe), seed + 4), dk = random_vec(size_t(nke), seed + 5);
    std::vector<float> q = q_pre, k = k_pre, qn(size_t(c.N * c.nq)), kn(size_t(c.N * c.nkv));
    cpu::cca_qk_norm_forward(q.data(), k.data(), qn.data(), kn.data(), temp.data(), c.N, c.nq, c.nkv, c.hd);
    auto q_d = upload(q_pre), k_d = upload(k_pre), temp_d = upload(temp), qn_d = poisoned(qn.size());
    auto kn_d = poisoned(kn.size());
    cuda::cca_qk_norm_forward(q_d.data(), k_d.data(), qn_d.data(), kn_d.data(), temp_d.data(), c.N, c.nq, c.nkv, c.hd);
    EXPECT_LT(rel_err(download(q_d), q), kFp32Tol);
    EXPECT_LT(rel_err(download(k_d), k), kFp32Tol);
    EXPECT_LT(rel_err(download(qn_d), qn), kFp32Tol);
    EXPECT_LT(rel_err(download(kn_d), kn), kFp32Tol);

    std::vector<float> dq_ref = dq, dk_ref = dk, dtemp = dtemp0;
    cpu::cca_qk_norm_backward(dq_ref.data(), dk_ref.data(), dtemp.data(), q_pre.data(), k_pre.data(), qn.data(),
                              kn.data(), temp.data(), c.N, c.nq, c.nkv, c.hd);
    auto dq_d = upload(dq), dk_d = upload(dk), dtemp_d = upload(dtemp0);
    auto qp_d = upload(q_pre), kp_d = upload(k_pre);
    cuda::cca_qk_norm_backward(dq_d.data(), dk_d.data(), dtemp_d.data(), qp_d.data(), kp_d.data(), qn_d.data(),
                               kn_d.data(), temp_d.data(), c.N, c.nq, c.nkv, c.hd);
    EXPECT_LT(rel_err(download(dq_d), dq_ref), kFp32Tol);
    EXPECT_LT(rel_err(download(dk_d), dk_ref), kFp32Tol);
    EXPECT_LT(rel_err(download(dtemp_d), dtemp), kFp32Tol);
}

void check_rope(const CcaCase &c, uint64_t seed) {
    const int64_t rot = c.hd / 2, half = rot / 2; // partial rotary factor 0.5, as ZAYA1
    std::vector<int32_t> pos(static_cast<size_t>(c.N));
    for (int64_t n = 0; n < c.N; ++n) pos[size_t(n)] = int32_t(n % 23); // positions restart: a varlen batch
    std::vector<float> cos_t(size_t(c.N * half)), sin_t(cos_t.size());
    cpu::rope_tables(cos_t.data(), sin_t.data(), pos.data(), c.N, rot, 1e4);
    const auto x = random_vec(size_t(c.N * c.nq * c.hd), seed);
    std::vector<float> fwd = x, bwd = x;
    cpu::rope_forward(fwd.data(), cos_t.data(), sin_t.data(), c.N, c.nq, c.hd, rot);
    cpu::rope_backward(bwd.data(), cos_t.data(), sin_t.data(), c.N, c.nq, c.hd, rot);
    auto cos_d = upload(cos_t), sin_d = upload(sin_t), fwd_d = upload(x), bwd_d = upload(x);
    cuda::rope_forward(fwd_d.data(), cos_d.data(), sin_d.data(), c.N, c.nq, c.hd, rot);
    cuda::rope_backward(bwd_d.data(), cos_d.data(), sin_d.data(), c.N, c.nq, c.hd, rot);
    EXPECT_LT(rel_err(download(fwd_d), fwd), kFp32Tol);
    EXPECT_LT(rel_err(download(bwd_d), bwd), kFp32Tol);
}

TEST_F(CudaCca, QkMeanForwardBackward) {
    check_qk_mean({37, 8, 2, 24}, 1500);
    check_qk_mean({11, 3, 3, 16}, 1510);
}

TEST_F(CudaCca, QkNormForwardBackward) {
    check_qk_norm({37, 8, 2, 24}, 1600);
    check_qk_norm({11, 3, 3, 16}, 1610);
}

TEST_F(CudaCca, RopeForwardBackward) {
    check_rope({37, 8, 2, 24}, 1700);
    check_rope({11, 3, 3, 16}, 1710);
}

} // namespace
} // namespace zaya
