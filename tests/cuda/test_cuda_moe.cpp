// CUDA MoE pieces against the CPU: router selection and token grouping against cpu::router_select_* and
// cpu::moe_group_tokens (exact for choices and orders), the experts against a per-token reference in plain loops
// (cpu::moe_experts_* runs its GEMMs through oneDNN, which this binary does not carry), with an expert that gets
// no token, one that gets a single token, and the skip slot in both of its modes.
#include "cuda_test_util.h"
#include "core/error.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/moe.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/ops.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaMoe : public CudaOps {};

// fp32 on both sides, sums of at most a few hundred products in different orders.
constexpr double kMoeTol = 1e-4;

TEST_F(CudaMoe, RouterSelectForwardBackward) {
    const int64_t N = 300, K = 9;
    auto logits = random_vec(size_t(N * K), 1100, 2.0), bias = random_vec(size_t(K), 1101, 0.05);
    // Exact ties: equal logits (and equal biases on classes 2 and 5) — the lowest index must win on both sides.
    std::fill(logits.begin(), logits.begin() + K, 0.5f);
    for (int64_t e = 0; e < K; ++e) logits[size_t(K + e)] = e == 2 || e == 5 ? 3.0f : 0.0f;
    bias[5] = bias[2];
    std::vector<float> probs(logits.size()), p_sel(static_cast<size_t>(N)), dlogits(logits.size());
    std::vector<int32_t> choice(static_cast<size_t>(N));
    cpu::router_select_forward(probs.data(), choice.data(), p_sel.data(), logits.data(), bias.data(), N, K);
    const auto dp_sel = random_vec(size_t(N), 1102);
    cpu::router_select_backward(dlogits.data(), dp_sel.data(), probs.data(), choice.data(), N, K);

    auto l_d = upload(logits), b_d = upload(bias), dp_d = upload(dp_sel);
    auto probs_d = poisoned(probs.size()), p_sel_d = poisoned(p_sel.size()), dl_d = poisoned(dlogits.size());
    cuda::DeviceArray<int32_t> choice_d(choice.size());
    cuda::fill_bytes(choice_d.data(), 0xFF, choice.size() * sizeof(int32_t));
    cuda::router_select_forward(probs_d.data(), choice_d.data(), p_sel_d.data(), l_d.data(), b_d.data(), N, K);
    EXPECT_LT(rel_err(download(probs_d), probs), kFp32Tol);
    EXPECT_LT(rel_err(download(p_sel_d), p_sel), kFp32Tol);
    EXPECT_EQ(download(choice_d), choice);
    cuda::router_select_backward(dl_d.data(), dp_d.data(), probs_d.data(), choice_d.data(), N, K);
    EXPECT_LT(rel_err(download(dl_d), dlogits), kFp32Tol);
}

void check_grouping(const std::vector<int32_t> &choice, int64_t E) {
    const int64_t N = int64_t(choice.size());
    SCOPED_TRACE(::testing::Message() << "N=" << N << " E=" << E);
    std::vector<int32_t> order(static_cast<size_t>(N));
    std::vector<int64_t> offsets(size_t(E + 2));
    cpu::moe_group_tokens(order.data(), offsets.data(), choice.data(), N, E);
    auto choice_d = upload(choice);
    cuda::DeviceArray<int32_t> order_d(order.size());
    cuda::DeviceArray<int64_t> offsets_d(offsets.size());
    cuda::fill_bytes(order_d.data(), 0xFF, order.size() * sizeof(int32_t));
    cuda::fill_bytes(offsets_d.data(), 0xFF, offsets.size() * sizeof(int64_t));
    cuda::moe_group_tokens(order_d.data(), offsets_d.data(), choice_d.data(), N, E);
    EXPECT_EQ(download(offsets_d), offsets);
    EXPECT_EQ(download(order_d), order);
}

TEST_F(CudaMoe, GroupTokensIsAStableCountingSort) {
    const int64_t E = 7;
    std::vector<int32_t> choice(1000);
    Rng rng(1200, 0);
    // Several 256-token chunks (the last ragged); expert 3 never chosen.
    for (auto &c : choice) {
        c = int32_t(rng.next() % uint64_t(E + 1));
        if (c == 3) c = int32_t(E);
    }
    check_grouping(choice, E);
    check_grouping({int32_t(E)}, E);   // one token, to the skip slot
    check_grouping({2, 0, 2, 2}, E);   // one chunk, most groups empty
}

// The Trainer's expert load counts: sizes[g] += offsets[g+1] − offsets[g], on the device (no download per layer).
TEST_F(CudaMoe, AddGroupSizesAccumulatesEachGroupsRows) {
    const int64_t groups = 300; // more than a block's 128 threads
    std::vector<int64_t> offsets(static_cast<size_t>(groups + 1)), sizes(static_cast<size_t>(groups)),
        want(static_cast<size_t>(groups));
    Rng rng(1250, 0);
    for (int64_t g = 0; g < groups; ++g) {
        offsets[size_t(g + 1)] = offsets[size_t(g)] + int64_t(rng.next() % 5);
        sizes[size_t(g)] = int64_t(rng.next() % 100);
        want[size_t(g)] = sizes[size_t(g)] + offsets[size_t(g + 1)] - offsets[size_t(g)];
    }
    auto offsets_d = upload(offsets), sizes_d = upload(sizes);
    cuda::add_group_sizes(sizes_d.data(), offsets_d.data(), groups);
    EXPECT_EQ(download(sizes_d), want);
}

// Per-token reference of the experts (the math of cpu::moe_experts_*), in double accumulation.
struct ExpertsReference {
    std::vector<float> out, h, a, y;                     // token order: h[N,2I], a[N,I], y[N,D]
    std::vector<float> dx, dp_sel, dgate_up, ddown;      // gradients (weight grads include their initial values)
};

ExpertsReference experts_reference(const std::vector<float> &x, const std::vector<int32_t> &choice,
                                   const std::vector<float> &p_sel, const std::vector<float> &gate_up,
                                   const std::vector<float> &down, const std::vector<float> &dout,
                                   std::vector<float> dgate_up, std::vector<float> ddown, int64_t N,
                                   const cpu::MoeShape &s) {
    const int64_t D = s.D, I = s.I, E = s.E;
    ExpertsReference r;
    r.out.assign(size_t(N * D), 0), r.h.assign(size_t(N * 2 * I), 0), r.a.assign(size_t(N * I), 0);
    r.y.assign(size_t(N * D), 0), r.dx.assign(size_t(N * D), 0), r.dp_sel.assign(size_t(N), 0);
    std::vector<float> dy(static_cast<size_t>(D)), da(static_cast<size_t>(I)), dh(size_t(2 * I));
    for (int64_t n = 0; n < N; ++n) {
        const int64_t e = choice[size_t(n)];
        const float *xn = x.data() + n * D, *gn = dout.data() + n * D;
        float *h = r.h.data() + n * 2 * I, *a = r.a.data() + n * I, *y = r.y.data() + n * D;
        float *dx = r.dx.data() + n * D;
        if (e < E) {
            const float *Wgu = gate_up.data() + e * 2 * I * D, *Wd = down.data() + e * D * I;
            for (int64_t o = 0; o < 2 * I; ++o) {
                double acc = 0;
                for (int64_t d = 0; d < D; ++d) acc += double(Wgu[o * D + d]) * double(xn[d]);
                h[o] = float(acc);
            }
            cpu::swiglu_forward(a, h, 1, I);
            for (int64_t o = 0; o < D; ++o) {
                double acc = 0;
                for (int64_t i = 0; i < I; ++i) acc += double(Wd[o * I + i]) * double(a[i]);
                y[o] = float(acc);
            }
        } else if (s.skip_passthrough) {
            std::copy(xn, xn + D, y);
        }
        const float p = p_sel[size_t(n)];
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) {
            r.out[size_t(n * D + d)] = p * y[d];
            dy[size_t(d)] = p * gn[d];
            dot += double(gn[d]) * double(y[d]);
        }
        r.dp_sel[size_t(n)] = float(dot);
        if (e < E) {
            const float *Wgu = gate_up.data() + e * 2 * I * D, *Wd = down.data() + e * D * I;
            float *dWgu = dgate_up.data() + e * 2 * I * D, *dWd = ddown.data() + e * D * I;
            for (int64_t i = 0; i < I; ++i) {
                double acc = 0;
                for (int64_t d = 0; d < D; ++d) acc += double(dy[size_t(d)]) * double(Wd[d * I + i]);
                da[size_t(i)] = float(acc);
            }
            for (int64_t d = 0; d < D; ++d)
                for (int64_t i = 0; i < I; ++i) dWd[d * I + i] += dy[size_t(d)] * a[i];
            cpu::swiglu_backward(dh.data(), da.data(), h, 1, I);
            for (int64_t d = 0; d < D; ++d) {
                double acc = 0;
                for (int64_t o = 0; o < 2 * I; ++o) acc += double(dh[size_t(o)]) * double(Wgu[o * D + d]);
                dx[d] = float(acc);
            }
            for (int64_t o = 0; o < 2 * I; ++o)
                for (int64_t d = 0; d < D; ++d) dWgu[o * D + d] += dh[size_t(o)] * xn[d];
        } else if (s.skip_passthrough) {
            std::copy(dy.begin(), dy.end(), dx);
        }
    }
    r.dgate_up = std::move(dgate_up), r.ddown = std::move(ddown);
    return r;
}

// Rows of the token-order matrix m[N, w] in grouped order (row r = token order[r]), the first `rows` of them.
std::vector<float> grouped(const std::vector<float> &m, const std::vector<int32_t> &order, int64_t rows, int64_t w) {
    std::vector<float> g(size_t(rows * w));
    for (int64_t r = 0; r < rows; ++r)
        std::copy_n(m.begin() + order[size_t(r)] * w, w, g.begin() + r * w);
    return g;
}

// bf16 copies of the expert weights for the tensor-core path (what the backend makes once per step).
struct Bf16Weights {
    cuda::DeviceArray<uint16_t> gate_up, down;
    cuda::ExpertWeightsBf16 view;
    Bf16Weights(const cuda::DeviceArray<float> &gu, const cuda::DeviceArray<float> &dn)
        : gate_up(gu.size()), down(dn.size()), view{gate_up.data(), down.data()} {
        cuda::to_bf16(gate_up.data(), gu.data(), int64_t(gu.size()));
        cuda::to_bf16(down.data(), dn.data(), int64_t(dn.size()));
    }
};

// bf16: the tensor-core path, against the fp32 reference: both operands of every product rounded to bf16 (relative
// error 2⁻⁹ each), sums over tens of products — a wrong tile, layout or mask gives errors of order one.
constexpr double kMoeBf16Tol = 2e-2;

void check_experts(bool passthrough, bool bf16 = false, int64_t N = 100, int64_t D = 40, int64_t I = 24) {
    SCOPED_TRACE(testing::Message() << (passthrough ? "skip passthrough" : "skip outputs zero") << (bf16 ? ", bf16" : "")
                                    << ", N " << N << ", D " << D << ", I " << I);
    const int64_t E = 5;
    const double tol = bf16 ? kMoeBf16Tol : kMoeTol;
    const cpu::MoeShape s{D, I, E, passthrough};
    // Expert 2 gets no token, expert 4 exactly one, the skip slot every sixth; groups of ragged sizes.
    std::vector<int32_t> choice(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n)
        choice[size_t(n)] = n == 57 ? 4 : n % 6 == 5 ? int32_t(E) : std::array<int32_t, 3>{0, 1, 3}[size_t(n * n % 3)];
    std::vector<int32_t> order(static_cast<size_t>(N));
    std::vector<int64_t> offsets(size_t(E + 2));
    cpu::moe_group_tokens(order.data(), offsets.data(), choice.data(), N, E);
    auto x = random_vec(size_t(N * D), 1300), p_sel = random_vec(size_t(N), 1301, 0.2, 0.5);
    auto gate_up = random_vec(size_t(E * 2 * I * D), 1302, 0.2), down = random_vec(size_t(E * D * I), 1303, 0.2);
    auto dout = random_vec(size_t(N * D), 1304);
    // Weight gradients already holding values as large as a step's (they are +=): compared as increments below.
    auto dgu0 = random_vec(gate_up.size(), 1305), ddown0 = random_vec(down.size(), 1306);
    const auto ref = experts_reference(x, choice, p_sel, gate_up, down, dout, dgu0, ddown0, N, s);

    auto x_d = upload(x), p_d = upload(p_sel), gu_d = upload(gate_up), dn_d = upload(down), dout_d = upload(dout);
    auto order_d = upload(order);
    auto offsets_d = upload(offsets);
    const Bf16Weights w16(gu_d, dn_d);
    const cuda::ExpertWeightsBf16 *w = bf16 ? &w16.view : nullptr;
    auto out_d = poisoned(size_t(N * D)), xg_d = poisoned(size_t(N * D)), h_d = poisoned(size_t(N * 2 * I));
    auto a_d = poisoned(size_t(N * I)), y_d = poisoned(size_t(N * D));
    cuda::moe_experts_forward(out_d.data(), xg_d.data(), h_d.data(), a_d.data(), y_d.data(), x_d.data(),
                              order_d.data(), offsets_d.data(), p_d.data(), gu_d.data(), dn_d.data(), N, s, w);
    const int64_t expert_rows = offsets[size_t(E)]; // h and a exist only for these
    EXPECT_LT(rel_err(download(out_d), ref.out), tol);
    EXPECT_LT(rel_err(download(xg_d), grouped(x, order, N, D)), tol);
    EXPECT_LT(rel_err(head(download(h_d), size_t(expert_rows * 2 * I)), grouped(ref.h, order, expert_rows, 2 * I)),
              tol);
    EXPECT_LT(rel_err(head(download(a_d), size_t(expert_rows * I)), grouped(ref.a, order, expert_rows, I)), tol);
    EXPECT_LT(rel_err(download(y_d), grouped(ref.y, order, N, D)), tol);

    auto dx_d = poisoned(size_t(N * D)), dp_d = poisoned(size_t(N));
    auto dgu_d = upload(dgu0), ddn_d = upload(ddown0);
    auto dy_d = poisoned(size_t(N * D)), da_d = poisoned(size_t(N * I)), dh_d = poisoned(size_t(N * 2 * I));
    auto dxg_d = poisoned(size_t(N * D));
    cuda::moe_experts_backward(dx_d.data(), dp_d.data(), dgu_d.data(), ddn_d.data(), dy_d.data(), da_d.data(),
                               dh_d.data(), dxg_d.data(), dout_d.data(), order_d.data(), offsets_d.data(), p_d.data(),
                               xg_d.data(), h_d.data(), a_d.data(), y_d.data(), gu_d.data(), dn_d.data(), N, s,
                               w);
    EXPECT_LT(rel_err(download(dx_d), ref.dx), tol);
    EXPECT_LT(rel_err(download(dp_d), ref.dp_sel), tol);
    auto increment = [](std::vector<float> after, const std::vector<float> &before) {
        for (size_t i = 0; i < after.size(); ++i) after[i] -= before[i];
        return after;
    };
    EXPECT_LT(rel_err(increment(download(dgu_d), dgu0), increment(ref.dgate_up, dgu0)), tol);
    EXPECT_LT(rel_err(increment(download(ddn_d), ddown0), increment(ref.ddown, ddown0)), tol);
}

TEST_F(CudaMoe, ExpertsSkipOutputsZero) { check_experts(false); }

TEST_F(CudaMoe, ExpertsSkipPassthrough) { check_experts(true); }

// Tensor cores (128×128 output tiles, k in steps of 32): groups within one 128-row tile and spanning two with a
// ragged end, widths within one column tile and across three, k steps with and without a remainder of 8 — in the
// products over rows (h, y, da, dxg) and in the weight gradients, whose k is a group's rows (an empty group adds
// nothing; a group of one row, and groups longer than a k step, starting anywhere).
TEST_F(CudaMoe, ExpertsBf16TensorCores) {
    check_experts(false, true);
    check_experts(true, true, 300, 72, 40);
    check_experts(true, true, 600, 136, 152);
}

// Shapes the tensor-core path cannot take (rows copied in 16-byte pieces) fail, naming the sizes.
TEST_F(CudaMoe, ExpertsBf16RejectsWidthsNotMultiplesOf8) {
    const cpu::MoeShape s{44, 24, 2, false};
    EXPECT_FALSE(cuda::experts_on_tensor_cores(s));
    EXPECT_TRUE(cuda::experts_on_tensor_cores(cpu::MoeShape{48, 24, 2, false}));
    const int64_t N = 4;
    auto x_d = upload(random_vec(size_t(N * s.D), 1410)), p_d = upload(random_vec(size_t(N), 1411));
    auto gu_d = upload(random_vec(size_t(s.E * 2 * s.I * s.D), 1412));
    auto dn_d = upload(random_vec(size_t(s.E * s.D * s.I), 1413));
    auto order_d = upload(std::vector<int32_t>{0, 1, 2, 3});
    auto offsets_d = upload(std::vector<int64_t>{0, 2, 4, 4});
    const Bf16Weights w16(gu_d, dn_d);
    auto out_d = poisoned(size_t(N * s.D)), xg_d = poisoned(size_t(N * s.D)), h_d = poisoned(size_t(N * 2 * s.I));
    auto a_d = poisoned(size_t(N * s.I)), y_d = poisoned(size_t(N * s.D));
    try {
        cuda::moe_experts_forward(out_d.data(), xg_d.data(), h_d.data(), a_d.data(), y_d.data(), x_d.data(),
                                  order_d.data(), offsets_d.data(), p_d.data(), gu_d.data(), dn_d.data(), N, s,
                                  &w16.view);
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("hidden size 44 and expert width 24 must be multiples of 8"),
                  std::string::npos)
            << e.what();
    }
}

// The tensor-core path really rounds to bf16 (it is not the fp32 kernel by mistake) and is deterministic.
TEST_F(CudaMoe, ExpertsBf16DiffersFromFp32AndRepeats) {
    const int64_t N = 70, D = 48, I = 32, E = 2;
    const cpu::MoeShape s{D, I, E, false};
    std::vector<int32_t> choice(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) choice[size_t(n)] = int32_t(n % 3);
    std::vector<int32_t> order(static_cast<size_t>(N));
    std::vector<int64_t> offsets(size_t(E + 2));
    cpu::moe_group_tokens(order.data(), offsets.data(), choice.data(), N, E);
    auto x = random_vec(size_t(N * D), 1400), p_sel = random_vec(size_t(N), 1401, 0.2, 0.5);
    auto gate_up = random_vec(size_t(E * 2 * I * D), 1402, 0.2), down = random_vec(size_t(E * D * I), 1403, 0.2);
    auto x_d = upload(x), p_d = upload(p_sel), gu_d = upload(gate_up), dn_d = upload(down);
    auto order_d = upload(order);
    auto offsets_d = upload(offsets);
    const Bf16Weights w16(gu_d, dn_d);
    auto run = [&](bool bf16) {
        auto out_d = poisoned(size_t(N * D)), xg_d = poisoned(size_t(N * D)), h_d = poisoned(size_t(N * 2 * I));
        auto a_d = poisoned(size_t(N * I)), y_d = poisoned(size_t(N * D));
        cuda::moe_experts_forward(out_d.data(), xg_d.data(), h_d.data(), a_d.data(), y_d.data(), x_d.data(),
                                  order_d.data(), offsets_d.data(), p_d.data(), gu_d.data(), dn_d.data(), N, s,
                                  bf16 ? &w16.view : nullptr);
        return download(out_d);
    };
    const auto f32 = run(false), b1 = run(true), b2 = run(true);
    EXPECT_EQ(b1, b2);
    const double diff = rel_err(b1, f32);
    EXPECT_GT(diff, 1e-5);
    EXPECT_LT(diff, kMoeBf16Tol);
}

} // namespace
} // namespace zaya
