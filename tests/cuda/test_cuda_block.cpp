// The block's glue kernels (ops/cuda/block.h) against the CPU: cpu::column_dot_add and cpu::rope_tables where the
// CPU has an op, and otherwise the loops of model/forward.cpp and backward.cpp restated here. Varlen batches with a
// length-1 sequence; bias present and absent.
#include "cuda_test_util.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/reduce.h"
#include "ops/cuda/block.h"

#include <gtest/gtest.h>

#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaBlock : public CudaOps {};

TEST_F(CudaBlock, BiasRowsAndColumnSums) {
    const int64_t N = 37, O = 19, ldy = 24;
    auto y = random_vec(size_t(N * ldy), 1), b = random_vec(size_t(O), 2);
    std::vector<float> ref = y;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) ref[size_t(n * ldy + o)] += b[size_t(o)];
    auto y_d = upload(y), b_d = upload(b);
    cuda::add_bias_rows(y_d.data(), ldy, b_d.data(), N, O);
    EXPECT_EQ(download(y_d), ref); // one addition per element: exact, padding columns untouched

    auto a = random_vec(size_t(N * ldy), 3), c = random_vec(size_t(N * 21), 4), out0 = random_vec(size_t(O), 5);
    auto a_d = upload(a), c_d = upload(c);
    for (bool with_b : {true, false}) {
        std::vector<float> out = out0;
        cpu::column_dot_add(out.data(), a.data(), ldy, with_b ? c.data() : nullptr, 21, N, O);
        auto out_d = upload(out0);
        cuda::column_dot_add(out_d.data(), a_d.data(), ldy, with_b ? c_d.data() : nullptr, 21, N, O);
        EXPECT_LT(rel_err(download(out_d), out), kFp32Tol) << with_b;
    }
}

// The column sums' two passes (column_sum.cuh) where they split: rows over three chunks of 256 (the last ragged),
// columns over three tiles of 32 (the last ragged), strided inputs; the same bits when run again; no rows: no change.
TEST_F(CudaBlock, ColumnSumsAcrossChunksAndTiles) {
    const int64_t N = 600, D = 70, lda = 72, ldb = 75;
    auto a = random_vec(size_t(N * lda), 20), c = random_vec(size_t(N * ldb), 21), out0 = random_vec(size_t(D), 22);
    auto a_d = upload(a), c_d = upload(c);
    for (bool with_b : {true, false}) {
        SCOPED_TRACE(with_b);
        std::vector<double> ref(out0.begin(), out0.end());
        for (int64_t n = 0; n < N; ++n)
            for (int64_t o = 0; o < D; ++o)
                ref[size_t(o)] += double(a[size_t(n * lda + o)]) * (with_b ? double(c[size_t(n * ldb + o)]) : 1.0);
        auto out_d = upload(out0), again_d = upload(out0);
        cuda::column_dot_add(out_d.data(), a_d.data(), lda, with_b ? c_d.data() : nullptr, ldb, N, D);
        cuda::column_dot_add(again_d.data(), a_d.data(), lda, with_b ? c_d.data() : nullptr, ldb, N, D);
        const auto got = download(out_d);
        EXPECT_LT(rel_err(got, std::vector<float>(ref.begin(), ref.end())), kFp32Tol);
        EXPECT_EQ(got, download(again_d)) << "not deterministic";
        cuda::column_dot_add(out_d.data(), a_d.data(), lda, with_b ? c_d.data() : nullptr, ldb, 0, D);
        EXPECT_EQ(download(out_d), got) << "no rows must add nothing";
    }
}

TEST_F(CudaBlock, DelayedValuesForwardBackward) {
    const std::vector<int64_t> seq{0, 5, 6, 20, 33}; // lengths 5, 1, 14, 13
    const int64_t B = 4, N = 33, Dv = 6, ldv = 16;
    auto v_del = random_vec(size_t(N * Dv), 10), bias = random_vec(size_t(Dv), 11);
    auto dv = random_vec(size_t(N * ldv), 12), dbias0 = random_vec(size_t(Dv), 13);
    auto seq_d = upload(seq);
    auto v_del_d = upload(v_del), bias_d = upload(bias), dv_d = upload(dv);
    for (bool with_bias : {true, false}) {
        SCOPED_TRACE(with_bias);
        // forward.cpp: the delayed half at a sequence's first token is the bias alone.
        std::vector<float> v(size_t(N * ldv), 7.0f), d_vdel(size_t(N * Dv), 7.0f), dbias = dbias0;
        for (int64_t s = 0; s < B; ++s)
            for (int64_t n = seq[size_t(s)]; n < seq[size_t(s + 1)]; ++n)
                for (int64_t i = 0; i < Dv; ++i)
                    v[size_t(n * ldv + i)] = n > seq[size_t(s)] ? v_del[size_t((n - 1) * Dv + i)]
                                                                : (with_bias ? bias[size_t(i)] : 0.0f);
        // backward.cpp: shifted back by one token; the first token's share goes to the bias.
        for (int64_t s = 0; s < B; ++s)
            for (int64_t n = seq[size_t(s)]; n < seq[size_t(s + 1)]; ++n) {
                for (int64_t i = 0; i < Dv; ++i) {
                    const float g = dv[size_t(n * ldv + i)];
                    if (n > seq[size_t(s)]) d_vdel[size_t((n - 1) * Dv + i)] = g;
                    else dbias[size_t(i)] += g;
                }
                if (n + 1 == seq[size_t(s + 1)])
                    for (int64_t i = 0; i < Dv; ++i) d_vdel[size_t(n * Dv + i)] = 0.0f;
            }
        auto v_d = upload(std::vector<float>(size_t(N * ldv), 7.0f)), d_vdel_d = poisoned(size_t(N * Dv));
        auto dbias_d = upload(dbias0);
        cuda::delayed_values_forward(v_d.data(), ldv, v_del_d.data(), with_bias ? bias_d.data() : nullptr,
                                     seq_d.data(), B, N, Dv);
        cuda::delayed_values_backward(d_vdel_d.data(), with_bias ? dbias_d.data() : nullptr, dv_d.data(), ldv,
                                      seq_d.data(), B, N, Dv);
        EXPECT_EQ(download(v_d), v); // copies: exact; the other columns keep their 7s
        EXPECT_EQ(download(d_vdel_d), d_vdel);
        if (with_bias) {
            EXPECT_LT(rel_err(download(dbias_d), dbias), kFp32Tol);
        }
    }
}

TEST_F(CudaBlock, EdaForwardAndCarry) {
    const int64_t N = 29, R = 12;
    auto h = random_vec(size_t(N * R), 20), scale = random_vec(size_t(R), 21), prev = random_vec(size_t(N * R), 22);
    auto d_rho = random_vec(size_t(N * R), 23);
    auto h_d = upload(h), scale_d = upload(scale), prev_d = upload(prev), d_rho_d = upload(d_rho);
    for (bool first_layer : {false, true}) {
        SCOPED_TRACE(first_layer);
        std::vector<float> rho(h.size()), carry(h.size());
        for (int64_t k = 0; k < N * R; ++k) {
            rho[size_t(k)] = first_layer ? h[size_t(k)] : h[size_t(k)] + scale[size_t(k % R)] * prev[size_t(k)];
            carry[size_t(k)] = first_layer ? 0.0f : scale[size_t(k % R)] * d_rho[size_t(k)];
        }
        auto rho_d = poisoned(h.size()), carry_d = poisoned(h.size());
        const float *s = first_layer ? nullptr : scale_d.data();
        cuda::eda_forward(rho_d.data(), h_d.data(), s, first_layer ? nullptr : prev_d.data(), N, R);
        cuda::eda_carry_backward(carry_d.data(), s, d_rho_d.data(), N, R);
        EXPECT_LT(rel_err(download(rho_d), rho), kFp32Tol);
        EXPECT_LT(rel_err(download(carry_d), carry), kFp32Tol);
    }
}

TEST_F(CudaBlock, RopeTablesMatchTheCpuBits) {
    std::vector<int32_t> pos{0, 1, 2, 7, 100, 4095, 32767, 131071, 5};
    for (auto [rot, theta] : {std::pair<int64_t, double>{64, 10000.0}, {16, 1e6}}) {
        SCOPED_TRACE(rot);
        const int64_t N = int64_t(pos.size()), half = rot / 2;
        std::vector<float> cos_t(size_t(N * half)), sin_t(size_t(N * half));
        cpu::rope_tables(cos_t.data(), sin_t.data(), pos.data(), N, rot, theta);
        auto pos_d = upload(pos);
        auto inv_d = upload(cpu::rope_inv_freq(rot, theta));
        auto cos_d = poisoned(cos_t.size()), sin_d = poisoned(sin_t.size());
        cuda::rope_tables(cos_d.data(), sin_d.data(), pos_d.data(), inv_d.data(), N, half);
        // Same fp32 angle; cos/sin in double on both sides (device and host libm agree to ~1 ulp of double).
        EXPECT_LT(rel_err(download(cos_d), cos_t), 1e-6);
        EXPECT_LT(rel_err(download(sin_d), sin_t), 1e-6);
    }
}

} // namespace
} // namespace zaya
