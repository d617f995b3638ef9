// int8 linear layers (`--quantize int8`): the quantization's error bound and groups, both paths (dot passes of
// exact int8 sums, widened panels + GEMM) equal to a double reference on the dequantized weights and activations
// (each row quantized by the weights' rule) for sizes that exercise every remainder loop and the column chunks,
// and the row gather.
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/linear_i8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace zaya {
namespace {

struct Quantized {
    std::vector<int8_t> q;
    std::vector<float> scales, w; // w: the dequantized weights s·q
};

Quantized quantize(const std::vector<float> &w, int64_t O, int64_t I) {
    Quantized r{std::vector<int8_t>(w.size()), std::vector<float>(size_t(O * cpu::i8_groups(I))), {}};
    cpu::quantize_i8(r.q.data(), r.scales.data(), w.data(), O, I);
    r.w.resize(w.size());
    const int64_t G = cpu::i8_groups(I);
    for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < I; ++i)
            r.w[size_t(o * I + i)] = r.scales[size_t(o * G + i / cpu::kI8Group)] * r.q[size_t(o * I + i)];
    return r;
}

// Each group's scale is its largest magnitude / 127, that weight becomes ±127, every weight is within half a step;
// an all-zero group has scale 0. From bf16, the same as from the widened values.
TEST(LinearI8, QuantizationBoundsAndGroups) {
    Rng rng(3, 0);
    for (int64_t I : {7, 64, 100, 300}) {
        const int64_t O = 5, G = cpu::i8_groups(I);
        std::vector<float> w(size_t(O * I));
        for (auto &v : w) v = float(rng.normal());
        std::fill_n(w.begin() + 2 * I, std::min<int64_t>(I, cpu::kI8Group), 0.0f); // row 2's first group: zeros
        const Quantized r = quantize(w, O, I);
        for (int64_t o = 0; o < O; ++o)
            for (int64_t g = 0; g < G; ++g) {
                const int64_t c0 = g * cpu::kI8Group, c1 = std::min(I, c0 + cpu::kI8Group);
                float amax = 0;
                int peak = 0;
                for (int64_t c = c0; c < c1; ++c) {
                    amax = std::max(amax, std::fabs(w[size_t(o * I + c)]));
                    peak = std::max(peak, std::abs(int(r.q[size_t(o * I + c)])));
                }
                const float s = r.scales[size_t(o * G + g)];
                EXPECT_FLOAT_EQ(s, amax / 127.0f) << "I " << I << " row " << o << " group " << g;
                EXPECT_EQ(peak, amax > 0 ? 127 : 0);
                for (int64_t c = c0; c < c1; ++c)
                    ASSERT_LE(std::fabs(w[size_t(o * I + c)] - r.w[size_t(o * I + c)]), 0.5f * s * (1 + 1e-5f));
            }
        std::vector<uint16_t> wb(w.size());
        std::vector<float> widened(w.size());
        for (size_t k = 0; k < w.size(); ++k) widened[k] = bf16_to_f32(wb[k] = f32_to_bf16(w[k]));
        std::vector<int8_t> qb(w.size());
        std::vector<float> sb(size_t(O * G));
        cpu::quantize_i8_from_bf16(qb.data(), sb.data(), wb.data(), O, I);
        const Quantized rw = quantize(widened, O, I);
        EXPECT_EQ(qb, rw.q);
        EXPECT_EQ(sb, rw.scales);
    }
}

TEST(LinearI8, MatchesReferenceOfDequantizedWeightsAndActivationsOnBothPaths) {
    Rng rng(5, 0);
    double worst = 0; // against the fp32 activations: what their quantization moves, beyond rounding
    // 1100 columns: 8 rows of them (35 KB) are cut into 1024-column chunks, a chunk boundary inside the groups' run.
    for (int64_t I : {7, 16, 45, 64, 300, 1100}) {
        for (int64_t O : {1, 3, 70}) {
            std::vector<float> w(size_t(O * I)), b(static_cast<size_t>(O));
            for (auto &v : w) v = float(rng.normal());
            for (auto &v : b) v = float(rng.normal());
            const Quantized r = quantize(w, O, I);
            for (int64_t N : {1, 2, 3, 5, 8, 9, 17, 40, 41}) {
                std::vector<float> x(size_t(N * I));
                for (auto &v : x) v = float(rng.normal());
                const Quantized xr = quantize(x, N, I); // the activations as the kernel sees them
                const int64_t ldy = O + 3; // a strided output: the rest of each row must stay untouched
                std::vector<float> y(size_t(N * ldy), -7.0f);
                const int64_t dot_max = N % 2 ? 1000 : 0; // both paths, alternating by N
                cpu::linear_i8_with(y.data(), ldy, x.data(), r.q.data(), r.scales.data(), b.data(), N, I, O, dot_max);
                for (int64_t n = 0; n < N; ++n) {
                    for (int64_t o = 0; o < O; ++o) {
                        double ref = b[size_t(o)], exact = ref;
                        for (int64_t i = 0; i < I; ++i) {
                            ref += double(xr.w[size_t(n * I + i)]) * r.w[size_t(o * I + i)];
                            exact += double(x[size_t(n * I + i)]) * r.w[size_t(o * I + i)];
                        }
                        ASSERT_NEAR(y[size_t(n * ldy + o)], ref, 1e-4 * std::sqrt(double(I)))
                            << "I " << I << " O " << O << " N " << N << " row " << n << " col " << o;
                        worst = std::max(worst, std::fabs(y[size_t(n * ldy + o)] - exact) / std::sqrt(double(I)));
                    }
                    for (int64_t o = O; o < ldy; ++o) ASSERT_EQ(y[size_t(n * ldy + o)], -7.0f);
                }
            }
        }
    }
    EXPECT_GT(worst, 1e-3); // the activations were quantized (fp32 activations would stay within 1e-4)
}

TEST(LinearI8, GatherRowsDequantizes) {
    Rng rng(9, 0);
    const int64_t V = 6, D = 70;
    std::vector<float> w(size_t(V * D));
    for (auto &v : w) v = float(rng.normal());
    const Quantized r = quantize(w, V, D);
    const std::vector<int32_t> ids = {4, 0, 4, 5};
    std::vector<float> out(ids.size() * size_t(D));
    cpu::gather_rows_i8(out.data(), r.q.data(), r.scales.data(), ids.data(), int64_t(ids.size()), D);
    for (size_t n = 0; n < ids.size(); ++n)
        for (int64_t d = 0; d < D; ++d) ASSERT_EQ(out[n * size_t(D) + size_t(d)], r.w[size_t(ids[n] * D + d)]);
}

} // namespace
} // namespace zaya
