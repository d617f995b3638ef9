// The CUDA backend's linear layers (ops/backend.h: linears_forward / linears_backward, and linear_forward /
// linear_backward as one part) against double loops, in fp32 and under bf16 matmuls, where the reference rounds x,
// W and dy to bf16 as the backend's one conversion of each must: four parts reading one x, two of them packed into
// one output of stride 40 (as q‖k into the conv input), one whose dy width of 12 is not a multiple of 8 (its
// backward fp32 even under bf16), one 8 wide at column 4 of rows 12 apart (its dy packed for bf16: the stride
// need not be a multiple of 8), biases present and absent, dx written over poison and accumulated, dW and db
// accumulated. Two calls with different x catch a stale converted copy; the parts one by one must give the grouped
// op's bits.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/backend.h"
#include "ops/cuda/ops.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaLinears : public CudaOps {};

constexpr int64_t kN = 37, kI = 40;

// A part on the host: where its output sits (buffer, column offset, stride), its width, weight and bias.
struct HostPart {
    int buf;
    int64_t col, ld, O;
    std::vector<float> W, b; // b empty: no bias
};

std::vector<HostPart> host_parts() {
    std::vector<HostPart> p = {{0, 0, 40, 24, {}, {}}, {0, 24, 40, 16, {}, {}}, {1, 0, 12, 12, {}, {}},
                               {2, 4, 12, 8, {}, {}}};
    for (size_t i = 0; i < p.size(); ++i) {
        p[i].W = random_vec(size_t(p[i].O * kI), 100 + i, 0.3);
        if (i != 2) p[i].b = random_vec(size_t(p[i].O), 200 + i);
    }
    return p;
}

std::vector<float> rounded(std::vector<float> v, bool bf16) {
    if (bf16)
        for (float &x : v) x = bf16_to_f32(f32_to_bf16(x));
    return v;
}
// Whether the backend runs this part's backward on bf16 tensor cores: dy's width a multiple of 8 (its columns are
// packed into rows of that width; the forward's operands, x and W, have rows of kI = 40: always bf16 under bf16
// matmuls).
bool backward_bf16(const HostPart &p, bool bf16) { return bf16 && p.O % 8 == 0; }

void check_linears(bool bf16) {
    SCOPED_TRACE(bf16 ? "bf16 matmuls" : "fp32 matmuls");
    Backend &be = cuda_backend();
    be.set_matmul_precision(bf16 ? cpu::MatmulPrecision::BF16 : cpu::MatmulPrecision::F32);
    const double tol = 2e-5; // the operands match the reference's exactly; only the summation differs
    auto parts = host_parts();
    const int64_t buf_ld[3] = {40, 12, 12};
    std::vector<cuda::DeviceArray<float>> W, b;
    for (const auto &p : parts) {
        W.push_back(upload(p.W));
        b.push_back(upload(p.b.empty() ? std::vector<float>(1) : p.b));
    }

    // Forward, twice: the second x must not see the first's converted copy.
    for (uint64_t seed : {1, 2}) {
        const auto x = random_vec(size_t(kN * kI), seed);
        auto x_d = upload(x);
        std::vector<cuda::DeviceArray<float>> Y;
        for (int64_t ld : buf_ld) Y.push_back(poisoned(size_t(kN * ld)));
        std::vector<LinearOut> outs;
        for (size_t i = 0; i < parts.size(); ++i)
            outs.push_back({Y[size_t(parts[i].buf)].data() + parts[i].col, parts[i].ld, W[i].data(),
                            parts[i].b.empty() ? nullptr : b[i].data(), parts[i].O});
        be.linears_forward(outs, x_d.data(), kN, kI);
        for (size_t i = 0; i < parts.size(); ++i) {
            const HostPart &p = parts[i];
            const auto xr = rounded(x, bf16), wr = rounded(p.W, bf16);
            const auto y = download(Y[size_t(p.buf)]);
            std::vector<float> got, ref;
            for (int64_t n = 0; n < kN; ++n)
                for (int64_t o = 0; o < p.O; ++o) {
                    double s = p.b.empty() ? 0.0 : double(p.b[size_t(o)]);
                    for (int64_t k = 0; k < kI; ++k) s += double(xr[size_t(n * kI + k)]) * wr[size_t(o * kI + k)];
                    ref.push_back(float(s));
                    got.push_back(y[size_t(n * p.ld + p.col + o)]);
                }
            EXPECT_LT(rel_err(got, ref), tol) << "forward, part " << i << ", x " << seed;
        }
    }

    // Backward: dx written (over poison) and accumulated (onto dx0); dW, db accumulated onto their start values.
    const auto x = random_vec(size_t(kN * kI), 3), dx0 = random_vec(size_t(kN * kI), 4);
    std::vector<std::vector<float>> dy_host, dW0, db0;
    for (size_t i = 0; i < 3; ++i) dy_host.push_back(random_vec(size_t(kN * buf_ld[i]), 10 + i));
    for (size_t i = 0; i < parts.size(); ++i) {
        dW0.push_back(random_vec(size_t(parts[i].O * kI), 300 + i));
        db0.push_back(random_vec(size_t(parts[i].O), 400 + i));
    }
    auto x_d = upload(x);
    std::vector<cuda::DeviceArray<float>> dy;
    for (const auto &h : dy_host) dy.push_back(upload(h));
    for (bool accumulate : {false, true}) {
        SCOPED_TRACE(accumulate ? "dx accumulated" : "dx written");
        auto dx = accumulate ? upload(dx0) : poisoned(size_t(kN * kI));
        std::vector<cuda::DeviceArray<float>> dW, db;
        std::vector<LinearGrad> grads;
        for (size_t i = 0; i < parts.size(); ++i) {
            dW.push_back(upload(dW0[i]));
            db.push_back(upload(db0[i]));
            const HostPart &p = parts[i];
            grads.push_back({dy[size_t(p.buf)].data() + p.col, p.ld, W[i].data(), p.O, dW[i].data(),
                             p.b.empty() ? nullptr : db[i].data()});
        }
        be.linears_backward(dx.data(), grads, x_d.data(), kN, kI, accumulate);
        std::vector<double> dx_ref(size_t(kN * kI));
        for (size_t i = 0; i < dx_ref.size(); ++i) dx_ref[i] = accumulate ? dx0[i] : 0.0;
        for (size_t i = 0; i < parts.size(); ++i) {
            const HostPart &p = parts[i];
            const bool r = backward_bf16(p, bf16);
            const auto xr = rounded(x, r), wr = rounded(p.W, r), dyr = rounded(dy_host[size_t(p.buf)], r);
            auto dy_at = [&](int64_t n, int64_t o) { return double(dyr[size_t(n * p.ld + p.col + o)]); };
            std::vector<float> dW_ref(dW0[i]), db_ref(db0[i]);
            for (int64_t o = 0; o < p.O; ++o) {
                double sb = db0[i][size_t(o)];
                for (int64_t n = 0; n < kN; ++n) sb += double(dy_host[size_t(p.buf)][size_t(n * p.ld + p.col + o)]);
                db_ref[size_t(o)] = float(sb);
                for (int64_t k = 0; k < kI; ++k) {
                    double s = dW0[i][size_t(o * kI + k)];
                    for (int64_t n = 0; n < kN; ++n) s += dy_at(n, o) * xr[size_t(n * kI + k)];
                    dW_ref[size_t(o * kI + k)] = float(s);
                }
            }
            for (int64_t n = 0; n < kN; ++n)
                for (int64_t k = 0; k < kI; ++k)
                    for (int64_t o = 0; o < p.O; ++o)
                        dx_ref[size_t(n * kI + k)] += dy_at(n, o) * wr[size_t(o * kI + k)];
            EXPECT_LT(rel_err(download(dW[i]), dW_ref), tol) << "dW, part " << i;
            if (!p.b.empty()) EXPECT_LT(rel_err(download(db[i]), db_ref), tol) << "db (fp32 dy), part " << i;
            else EXPECT_EQ(download(db[i]), db0[i]) << "part " << i << " has no bias: its db is not touched";
        }
        EXPECT_LT(rel_err(download(dx), std::vector<float>(dx_ref.begin(), dx_ref.end())), tol) << "dx";

        // The same parts one by one (linear_backward): the grouped op's bits.
        auto dx1 = accumulate ? upload(dx0) : poisoned(size_t(kN * kI));
        for (size_t i = 0; i < parts.size(); ++i) {
            auto dW1 = upload(dW0[i]), db1 = upload(db0[i]);
            const LinearGrad &g = grads[i];
            be.linear_backward(dx1.data(), dW1.data(), g.db ? db1.data() : nullptr, g.dy, g.ldy, x_d.data(), g.W, kN,
                               kI, g.O, accumulate || i > 0);
            EXPECT_EQ(download(dW1), download(dW[i])) << "dW one by one, part " << i;
        }
        EXPECT_EQ(download(dx1), download(dx)) << "dx one by one";
    }
    be.set_matmul_precision(cpu::MatmulPrecision::F32);
}

// Under bf16 matmuls the backend keeps each weight's bf16 copy while the weights are unchanged (WeightsUnchanged: a
// training step's micro-batches) and converts afresh once the scope ends: a weight changed inside the scope — what
// the scope promises never happens — is not seen until it ends, and outside any scope every call sees the current
// weight. For a linear's weight and for the experts' (the tensor-core grouped GEMMs).
TEST_F(CudaLinears, Bf16WeightCopiesKeptOnlyWhileWeightsUnchanged) {
    Backend &be = cuda_backend();
    be.set_matmul_precision(cpu::MatmulPrecision::BF16);
    const int64_t N = 8, I = 16, O = 8;
    const cpu::MoeShape s{I, O, 2, false};
    auto x = upload(random_vec(size_t(N * I), 300));
    const auto W1 = random_vec(size_t(O * I), 301), W2 = random_vec(size_t(O * I), 302);
    const auto gu1 = random_vec(size_t(2 * 2 * O * I), 303), gu2 = random_vec(size_t(2 * 2 * O * I), 304);
    const auto dn = random_vec(size_t(2 * I * O), 305);
    auto W = upload(W1), gate_up = upload(gu1), down = upload(dn);
    auto order = upload(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
    auto offsets = upload(std::vector<int64_t>{0, 5, 8, 8}); // two experts, no skip-slot rows
    auto p_sel = upload(std::vector<float>(size_t(N), 1.0f));
    auto set = [](cuda::DeviceArray<float> &d, const std::vector<float> &h) {
        cuda::copy_to_device(d.data(), h.data(), h.size() * sizeof(float));
    };
    auto forward = [&] { // the linear's output and the experts', side by side
        auto y = poisoned(size_t(N * O)), out = poisoned(size_t(N * I)), xg = poisoned(size_t(N * I));
        auto h = poisoned(size_t(N * 2 * O)), a = poisoned(size_t(N * O)), ye = poisoned(size_t(N * I));
        be.linear_forward(y.data(), O, x.data(), W.data(), nullptr, N, I, O);
        be.moe_experts_forward(out.data(), xg.data(), h.data(), a.data(), ye.data(), x.data(), order.data(),
                               offsets.data(), p_sel.data(), gate_up.data(), down.data(), N, s);
        return std::make_pair(download(y), download(out));
    };
    const auto first = forward();
    set(W, W2), set(gate_up, gu2);
    const auto second = forward(); // outside a scope: the new weights
    ASSERT_NE(first.first, second.first);
    ASSERT_NE(first.second, second.second);
    {
        const WeightsUnchanged scope(be);
        EXPECT_EQ(forward(), second);
        set(W, W1), set(gate_up, gu1);
        EXPECT_EQ(forward(), second) << "the copies made at the scope's first use are kept";
    }
    EXPECT_EQ(forward(), first) << "after the scope every use converts the current weights";
    {
        const WeightsUnchanged scope(be);
        EXPECT_EQ(forward(), first) << "a new scope converts afresh";
    }
    be.set_matmul_precision(cpu::MatmulPrecision::F32);
}

// A linear given its input's bf16 copy (MatmulInput, written by the op that produced the input) reads it instead of
// converting x: bf16(x) gives the converting path's bits; the copy of another input gives that input's result, so
// the copy — not x — was read; forward and backward (dW).
TEST_F(CudaLinears, Bf16InputCopyReadInsteadOfConverting) {
    Backend &be = cuda_backend();
    be.set_matmul_precision(cpu::MatmulPrecision::BF16);
    const int64_t N = 8, I = 16, O = 8;
    auto x1 = upload(random_vec(size_t(N * I), 310)), x2 = upload(random_vec(size_t(N * I), 311));
    auto W = upload(random_vec(size_t(O * I), 312)), dy = upload(random_vec(size_t(N * O), 313));
    cuda::DeviceArray<uint16_t> x1_16(size_t(N * I)), x2_16(size_t(N * I));
    cuda::to_bf16(x1_16.data(), x1.data(), N * I);
    cuda::to_bf16(x2_16.data(), x2.data(), N * I);
    auto forward = [&](MatmulInput x) {
        auto y = poisoned(size_t(N * O));
        be.linear_forward(y.data(), O, x, W.data(), nullptr, N, I, O);
        return download(y);
    };
    auto weight_grad = [&](MatmulInput x) {
        auto dW = upload(std::vector<float>(size_t(O * I), 0.0f));
        be.linear_backward(nullptr, dW.data(), nullptr, dy.data(), O, x, W.data(), N, I, O, false);
        return download(dW);
    };
    EXPECT_EQ(forward({x1.data(), x1_16.data()}), forward(x1.data()));
    EXPECT_EQ(forward({x1.data(), x2_16.data()}), forward(x2.data()));
    EXPECT_NE(forward(x1.data()), forward(x2.data()));
    EXPECT_EQ(weight_grad({x1.data(), x1_16.data()}), weight_grad(x1.data()));
    EXPECT_EQ(weight_grad({x1.data(), x2_16.data()}), weight_grad(x2.data()));
    be.set_matmul_precision(cpu::MatmulPrecision::F32);
}

TEST_F(CudaLinears, Fp32MatchesReference) { check_linears(false); }

TEST_F(CudaLinears, Bf16MatchesRoundedReference) { check_linears(true); }

} // namespace
} // namespace zaya
