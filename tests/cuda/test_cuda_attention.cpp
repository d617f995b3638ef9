// CUDA attention forward/backward against cpu::attention_* on varlen batches: ragged lengths (not multiples of the
// 16-row tiles), a length-1 sequence, GQA groups 1 and 4, a sliding window, head sizes up to 128 (the kernels'
// shared memory then passes 48 KiB), and a grid narrower than the longest sequence.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cpu/attention.h"
#include "ops/cuda/attention.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaAttention : public CudaOps {};

// fp32 on both sides; the exp implementations differ (fast_exp vs expf) and so do the summation orders, over up
// to a few hundred keys or queries per element.
constexpr double kAttnTol = 1e-4;

struct AttnCase {
    std::vector<int64_t> lengths;
    int64_t nq, nkv, hd, window;
    int64_t grid_len = 0; // max_len told to the kernels if > 0: shorter than a sequence, blocks stride over tiles
};

// A case's batch layout, shape and random inputs (q, k, v, dout).
struct AttnInputs {
    std::vector<int64_t> seq_start;
    int64_t B, N, max_len;
    cpu::AttnShape s;
    size_t nqe, nke; // elements of q (and out, dout) and of k (and v)
    std::vector<float> q, k, v, dout;
};

AttnInputs attention_inputs(const AttnCase &c, uint64_t seed) {
    AttnInputs in;
    in.B = int64_t(c.lengths.size());
    in.seq_start.assign(size_t(in.B + 1), 0);
    for (int64_t b = 0; b < in.B; ++b) in.seq_start[size_t(b + 1)] = in.seq_start[size_t(b)] + c.lengths[size_t(b)];
    in.N = in.seq_start[size_t(in.B)];
    in.max_len = c.grid_len > 0 ? c.grid_len : *std::max_element(c.lengths.begin(), c.lengths.end());
    in.s = cpu::AttnShape{c.nq, c.nkv, c.hd, 1.0f / std::sqrt(float(c.hd)), c.window};
    in.nqe = size_t(in.N * c.nq * c.hd), in.nke = size_t(in.N * c.nkv * c.hd);
    in.q = random_vec(in.nqe, seed), in.k = random_vec(in.nke, seed + 1), in.v = random_vec(in.nke, seed + 2);
    in.dout = random_vec(in.nqe, seed + 3);
    return in;
}

void check_attention(const AttnCase &c, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "nq=" << c.nq << " nkv=" << c.nkv << " hd=" << c.hd << " window=" << c.window);
    const AttnInputs in = attention_inputs(c, seed);
    const auto &[seq_start, B, N, max_len, s, nqe, nke, q, k, v, dout] = in;

    std::vector<float> out(nqe), lse(size_t(N * c.nq)), dq(nqe), dk(nke), dv(nke);
    cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), seq_start.data(), B, s);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(),
                            v.data(), seq_start.data(), B, s);

    auto starts_d = upload(seq_start);
    const cuda::VarlenBatch batch{starts_d.data(), B, N, max_len};
    auto q_d = upload(q), k_d = upload(k), v_d = upload(v), dout_d = upload(dout);
    auto out_d = poisoned(nqe), lse_d = poisoned(lse.size());
    cuda::attention_forward(out_d.data(), lse_d.data(), q_d.data(), k_d.data(), v_d.data(), batch, s);
    EXPECT_LT(rel_err(download(out_d), out), kAttnTol);
    EXPECT_LT(rel_err(download(lse_d), lse), kAttnTol);

    auto dq_d = poisoned(nqe), dk_d = poisoned(nke), dv_d = poisoned(nke);
    cuda::attention_backward(dq_d.data(), dk_d.data(), dv_d.data(), dout_d.data(), out_d.data(), lse_d.data(),
                             q_d.data(), k_d.data(), v_d.data(), batch, s);
    const auto dq_got = download(dq_d), dk_got = download(dk_d), dv_got = download(dv_d);
    EXPECT_LT(rel_err(dq_got, dq), kAttnTol);
    EXPECT_LT(rel_err(dk_got, dk), kAttnTol);
    EXPECT_LT(rel_err(dv_got, dv), kAttnTol);

    // Deterministic: a second backward (into poisoned buffers again) gives the same bits.
    cuda::fill_bytes(dq_d.data(), 0xFF, nqe * sizeof(float));
    cuda::fill_bytes(dk_d.data(), 0xFF, nke * sizeof(float));
    cuda::fill_bytes(dv_d.data(), 0xFF, nke * sizeof(float));
    cuda::attention_backward(dq_d.data(), dk_d.data(), dv_d.data(), dout_d.data(), out_d.data(), lse_d.data(),
                             q_d.data(), k_d.data(), v_d.data(), batch, s);
    EXPECT_EQ(download(dq_d), dq_got);
    EXPECT_EQ(download(dk_d), dk_got);
    EXPECT_EQ(download(dv_d), dv_got);
}

TEST_F(CudaAttention, FullCausalGroupOfOne) { check_attention({{1, 37, 64, 5}, 4, 4, 32, 0}, 100); }

TEST_F(CudaAttention, FullCausalGroupOfFour) { check_attention({{70, 1, 33}, 8, 2, 24, 0}, 200); }

TEST_F(CudaAttention, SlidingWindow) { check_attention({{50, 1, 90}, 4, 1, 40, 17}, 300); }

// A grid two tiles wide for sequences of up to six tiles: each block runs several tiles in turn.
TEST_F(CudaAttention, BlocksStrideOverTiles) { check_attention({{90, 7, 33}, 4, 2, 32, 0, 20}, 350); }

TEST_F(CudaAttention, HeadDim128WithWindow) { check_attention({{129, 1, 20}, 8, 2, 128, 33}, 400); }

// The tensor-core forward and backward (bf16 matmuls): against the CPU on the same inputs rounded to bf16, so what is
// left is the bf16 rounding of P and dS (relative 2⁻⁹ each, in sums of up to ~130 terms) and the accumulation orders.
constexpr double kAttnBf16Tol = 1e-2;

std::vector<float> bf16_rounded(std::vector<float> x) {
    for (float &f : x) f = bf16_to_f32(f32_to_bf16(f));
    return x;
}

void check_attention_bf16(const AttnCase &c, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "bf16 nq=" << c.nq << " nkv=" << c.nkv << " hd=" << c.hd
                                      << " window=" << c.window);
    const AttnInputs in = attention_inputs(c, seed);
    const auto &[seq_start, B, N, max_len, s, nqe, nke, q, k, v, dout] = in;
    std::vector<float> out(nqe), lse(size_t(N * c.nq));
    const auto qr = bf16_rounded(q), kr = bf16_rounded(k), vr = bf16_rounded(v);
    cpu::attention_forward(out.data(), lse.data(), qr.data(), kr.data(), vr.data(), seq_start.data(), B, s);

    auto starts_d = upload(seq_start);
    const cuda::VarlenBatch batch{starts_d.data(), B, N, max_len};
    auto q_d = upload(q), k_d = upload(k), v_d = upload(v);
    auto out_d = poisoned(nqe), lse_d = poisoned(lse.size());
    cuda::attention_forward_bf16(out_d.data(), lse_d.data(), q_d.data(), k_d.data(), v_d.data(), batch, s);
    const auto got = download(out_d);
    EXPECT_LT(rel_err(got, out), kAttnBf16Tol);
    EXPECT_LT(rel_err(download(lse_d), lse), 1e-4); // scores from exact products of bf16 values, fp32 softmax
    cuda::fill_bytes(out_d.data(), 0xFF, nqe * sizeof(float));
    cuda::attention_forward_bf16(out_d.data(), nullptr, q_d.data(), k_d.data(), v_d.data(), batch, s);
    EXPECT_EQ(download(out_d), got); // deterministic, and lse is optional

    // Backward: the CPU on the bf16-rounded inputs and dout; the GPU also rounds P and dS for their products.
    const auto dout_r = bf16_rounded(dout);
    std::vector<float> dq(nqe), dk(nke), dv(nke);
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), dout_r.data(), out.data(), lse.data(), qr.data(),
                            kr.data(), vr.data(), seq_start.data(), B, s);
    auto dout_d = upload(dout);
    auto dq_d = poisoned(nqe), dk_d = poisoned(nke), dv_d = poisoned(nke);
    cuda::attention_backward_bf16(dq_d.data(), dk_d.data(), dv_d.data(), dout_d.data(), out_d.data(), lse_d.data(),
                                  q_d.data(), k_d.data(), v_d.data(), batch, s);
    const auto dq_got = download(dq_d), dk_got = download(dk_d), dv_got = download(dv_d);
    EXPECT_LT(rel_err(dq_got, dq), kAttnBf16Tol);
    EXPECT_LT(rel_err(dk_got, dk), kAttnBf16Tol);
    EXPECT_LT(rel_err(dv_got, dv), kAttnBf16Tol);
    cuda::fill_bytes(dq_d.data(), 0xFF, nqe * sizeof(float));
    cuda::fill_bytes(dk_d.data(), 0xFF, nke * sizeof(float));
    cuda::fill_bytes(dv_d.data(), 0xFF, nke * sizeof(float));
    cuda::attention_backward_bf16(dq_d.data(), dk_d.data(), dv_d.data(), dout_d.data(), out_d.data(), lse_d.data(),
                                  q_d.data(), k_d.data(), v_d.data(), batch, s);
    EXPECT_EQ(download(dq_d), dq_got);
    EXPECT_EQ(download(dk_d), dk_got);
    EXPECT_EQ(download(dv_d), dv_got);
}

// Tiles of 64: a sequence of 130 spans three query and key tiles; length 1; GQA; window; a narrow grid; hd 128.
TEST_F(CudaAttention, TensorCoresCausalAcrossTiles) { check_attention_bf16({{1, 130, 37}, 1, 1, 32, 0}, 500); }

TEST_F(CudaAttention, TensorCoresGroupOfFourWithWindow) { check_attention_bf16({{90, 3}, 4, 1, 16, 17}, 600); }

// A window wider than a tile: key tiles wholly inside every query's window (no per-pair test) next to tiles that
// straddle its lower edge.
TEST_F(CudaAttention, TensorCoresWindowWiderThanTiles) { check_attention_bf16({{300, 5}, 2, 1, 16, 100}, 650); }

TEST_F(CudaAttention, TensorCoresStrideAndHeadDim128) { check_attention_bf16({{70, 1}, 1, 1, 128, 0, 20}, 700); }

// The head sizes the kernels are instantiated for besides 16, 32 and 128 (each its own register tiling).
TEST_F(CudaAttention, TensorCoresEveryOtherHeadDim) {
    for (const int64_t hd : {48, 64, 80, 96, 112}) check_attention_bf16({{70, 3}, 2, 1, hd, 0}, 800 + uint64_t(hd));
}

// A prefill pass over a cache (attention_prefill_bf16, the GPU decoder's): n new queries after `cached` keys, against
// cpu::attention_cached on the same inputs rounded to bf16, with the key and value rows past cached + n NaN (a read
// of them would show). Queries in several tiles of 64 whose first position is mid key tile; a window reaching back
// into the cache, wider than a tile; none cached; GQA; the output's bf16 copy; over a bf16 cache, the CPU's.
TEST_F(CudaAttention, TensorCoresPrefillOverCache) {
    struct Case {
        int64_t cached, n, window, nq, nkv, hd;
    };
    for (const Case &cs : {Case{0, 70, 0, 4, 2, 16}, Case{45, 70, 0, 4, 2, 16}, Case{45, 130, 20, 4, 1, 16},
                           Case{100, 129, 90, 2, 2, 32}, Case{130, 3, 0, 8, 2, 128}}) {
        const std::string ctx = fmt::format("cached={} n={} window={} nq={} nkv={} hd={}", cs.cached, cs.n, cs.window,
                                            cs.nq, cs.nkv, cs.hd);
        const int64_t Dq = cs.nq * cs.hd, Dk = cs.nkv * cs.hd, T = cs.cached + cs.n, rows = T + 5;
        const cpu::AttnShape s{cs.nq, cs.nkv, cs.hd, 1.0f / std::sqrt(float(cs.hd)), cs.window};
        const auto q = bf16_rounded(random_vec(size_t(cs.n * Dq), 31));
        auto k = bf16_rounded(random_vec(size_t(rows * Dk), 32)), v = bf16_rounded(random_vec(size_t(rows * Dk), 33));
        std::vector<float> ref(size_t(cs.n * Dq));
        cpu::attention_cached(ref.data(), q.data(), k.data(), v.data(), cs.n, cs.cached, s);
        for (size_t i = size_t(T * Dk); i < k.size(); ++i) k[i] = v[i] = std::numeric_limits<float>::quiet_NaN();
        auto q_d = upload(q), k_d = upload(k), v_d = upload(v), out = poisoned(size_t(cs.n * Dq));
        auto seq = upload(std::vector<int64_t>{0, cs.n});
        auto out16 = upload(std::vector<uint16_t>(size_t(cs.n * Dq), 0xFFFF));
        cuda::attention_prefill_bf16(out.data(), q_d.data(), k_d.data(), v_d.data(), seq.data(), cs.n, cs.cached, s,
                                     out16.data());
        const auto got = download(out);
        EXPECT_LT(rel_err(got, ref), kAttnBf16Tol) << ctx;
        const auto got16 = download(out16);
        size_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += got16[i] != f32_to_bf16(got[i]);
        EXPECT_EQ(differ, 0u) << ctx << ": the bf16 copy is bf16(out)";
        // Over a bf16 cache (a bf16 model's in the decoder): the keys and values read as they are, the same inputs
        // as the fp32 cache rounded, so the same output to the bit.
        std::vector<uint16_t> k16(k.size()), v16(v.size());
        for (size_t i = 0; i < k.size(); ++i) k16[i] = f32_to_bf16(k[i]), v16[i] = f32_to_bf16(v[i]);
        auto k16_d = upload(k16), v16_d = upload(v16);
        auto out_b = poisoned(size_t(cs.n * Dq));
        cuda::attention_prefill_bf16(out_b.data(), q_d.data(), k16_d.data(), v16_d.data(), seq.data(), cs.n,
                                     cs.cached, s);
        EXPECT_EQ(download(out_b), got) << ctx << ", bf16 cache";
        // And that is the CPU's attention over the same bf16 cache, its definition (ops/cpu/attention.h: integer
        // maxima, P rounded to bf16), up to the rounding crossings the sums' order allows — as the decode kernels'.
        std::vector<float> ref16(size_t(cs.n * Dq));
        cpu::attention_cached(ref16.data(), q.data(), k16.data(), v16.data(), cs.n, cs.cached, s);
        expect_attention_close<uint16_t>(got, ref16, cs.hd, ctx + ", the CPU's over the bf16 cache");
    }
}

} // namespace
} // namespace zaya
