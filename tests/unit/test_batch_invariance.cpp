// Batch invariance of the few-row paths a decoding step takes: a row's output has the same bits whatever rows share
// the call, so a speculative draft's rows or a batch of requests decode exactly as each row alone. The streaming dot
// passes (ops/cpu/weight_stream.h: 1 row or 8, chunked or not, bf16 weights with fp32 or bf16 rows, int8 weights) at
// ZAYA1-8B's shapes (2048 and 4096 columns, where passes of 5 or more rows chunk the columns, and one whose last
// piece is short), AVX-512 kernels only (the AVX2 ones keep more chains per row for fewer rows: a different sum; the
// portable build's sanitizer run has those); the CCA convolution's direct path; and cached attention's per-row path.
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/linear_bf16.h"
#include "ops/cpu/linear_i8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

namespace zaya {
namespace {

// y[N, O] = x[N, I] · Wᵀ + b by one storage's path.
using LinearRows = std::function<void(float *y, const float *x, int64_t N)>;

// Every row of every N-row call (N = 1..max_rows, the rows drawn afresh) equals, bit for bit, that row alone.
void expect_rows_alone(const LinearRows &linear, int64_t I, int64_t O, int64_t max_rows, const char *what) {
    Rng rng(11, uint64_t(I));
    for (int64_t N = 2; N <= max_rows; N += N < 10 ? 1 : 7) {
        std::vector<float> x(size_t(N * I)), y(size_t(N * O)), alone(static_cast<size_t>(O));
        for (auto &v : x) v = float(rng.normal());
        linear(y.data(), x.data(), N);
        for (int64_t n = 0; n < N; ++n) {
            linear(alone.data(), x.data() + n * I, 1);
            ASSERT_EQ(std::memcmp(alone.data(), y.data() + n * O, size_t(O) * sizeof(float)), 0)
                << what << ": I " << I << ", row " << n << " of " << N << " differs from the row alone";
        }
    }
}

struct Weights {
    std::vector<uint16_t> bf16;
    std::vector<int8_t> q;
    std::vector<float> scales, b;
};

Weights random_weights(int64_t I, int64_t O) {
    Rng rng(12, uint64_t(I));
    std::vector<float> w(size_t(O * I));
    for (auto &v : w) v = float(rng.normal()) * 0.02f;
    Weights r{std::vector<uint16_t>(w.size()), std::vector<int8_t>(w.size()),
              std::vector<float>(size_t(O * cpu::i8_groups(I))), std::vector<float>(static_cast<size_t>(O))};
    for (size_t k = 0; k < w.size(); ++k) r.bf16[k] = f32_to_bf16(w[k]);
    cpu::quantize_i8(r.q.data(), r.scales.data(), w.data(), O, I);
    for (auto &v : r.b) v = float(rng.normal());
    return r;
}

TEST(BatchInvariance, DotPassRowsEqualTheRowAlone) {
#if !defined(__AVX512F__)
    GTEST_SKIP() << "batch invariance holds for the AVX-512 kernels; this build has the AVX2 ones";
#endif
    const int64_t O = 70; // two row blocks of 32 and a short one
    for (int64_t I : {2048, 4096, 2100}) {
        const Weights w = random_weights(I, O);
        for (auto p : {cpu::MatmulPrecision::F32, cpu::MatmulPrecision::BF16}) {
            const int64_t max_rows = p == cpu::MatmulPrecision::BF16 ? cpu::kBf16InDotMaxRows : cpu::kBf16DotMaxRows;
            expect_rows_alone(
                [&](float *y, const float *x, int64_t N) {
                    cpu::linear_bf16(y, O, x, w.bf16.data(), w.b.data(), N, I, O, p);
                },
                I, O, max_rows,
                p == cpu::MatmulPrecision::BF16 ? "bf16 weights, bf16 rows" : "bf16 weights, fp32 rows");
        }
        expect_rows_alone(
            [&](float *y, const float *x, int64_t N) {
                cpu::linear_i8_with(y, O, x, w.q.data(), w.scales.data(), w.b.data(), N, I, O, cpu::kI8DotMaxRows);
            },
            I, O, 30, "int8 weights");
    }
}

// The CCA convolution at ZAYA1-8B's shape (10 head groups of 128 channels): a sequence's outputs are the same bits
// alone as beside others (decoding sequences of 3 rows: state and new token; a draft's longer rows), up to 64 rows
// in all: the conv's direct path, summing each output on its own, covers what a step of decoding rows brings.
TEST(BatchInvariance, ConvRowsEqualTheSequenceAlone) {
    const cpu::ConvShape s{1280, 10, 2, 2};
    const int64_t C = s.C, hd = C / s.groups;
    Rng rng(13, 0);
    auto randoms = [&rng](int64_t n, float scale) {
        std::vector<float> v(static_cast<size_t>(n));
        for (auto &x : v) x = float(rng.normal()) * scale;
        return v;
    };
    const std::vector<float> wd = randoms(C * s.k0, 0.5f), bd = randoms(C, 0.1f), wg = randoms(C * hd * s.k1, 0.05f),
                             bg = randoms(C, 0.1f);
    // o of sequences with these lengths, the rows of z given in order.
    auto conv = [&](const std::vector<int64_t> &lengths, const float *z) {
        std::vector<int64_t> start = {0};
        for (int64_t T : lengths) start.push_back(start.back() + T);
        const int64_t N = start.back(), B = int64_t(lengths.size());
        std::vector<float> o(size_t(N * C)), p(size_t(cpu::cca_conv_p_rows(N, B, s) * C));
        cpu::cca_conv_forward(o.data(), p.data(), z, start.data(), B, s, wd.data(), bd.data(), wg.data(), bg.data());
        return o;
    };
    for (const int64_t first : {3, 9, 17}) {
        for (int64_t others = 1; first + 3 * others <= 64; others += 3) {
            std::vector<int64_t> lengths = {first};
            lengths.resize(size_t(1 + others), 3);
            const std::vector<float> z = randoms((first + 3 * others) * C, 1.0f);
            const std::vector<float> alone = conv({first}, z.data()), beside = conv(lengths, z.data());
            ASSERT_EQ(std::memcmp(alone.data(), beside.data(), alone.size() * sizeof(float)), 0)
                << "a sequence of " << first << " rows beside " << others << " of 3";
        }
    }
}

// Cached attention under 16 new rows (its per-row path, ZAYA1-8B's heads: 8 query heads of 128 on 2 kv heads), over
// an fp32 and a bf16 cache, causal and in a sliding window: each row of a call of n rows (a speculative draft's) equals
// that row's query attended alone at its position, bit for bit.
TEST(BatchInvariance, AttentionRowsEqualTheRowAlone) {
    const int64_t nq = 8, nkv = 2, hd = 128, past = 1300; // (3 key blocks of 512)
    Rng rng(14, 0);
    for (const int64_t window : {int64_t(0), int64_t(64)}) {
        const cpu::AttnShape s{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), window};
        for (int64_t n = 2; n < 16; n += 3) {
            const int64_t len = past + n;
            std::vector<float> q(size_t(n * nq * hd)), k(size_t(len * nkv * hd)), v(k.size());
            for (auto *a : {&q, &k, &v})
                for (auto &x : *a) x = float(rng.normal());
            std::vector<uint16_t> kb(k.size()), vb(v.size());
            for (size_t i = 0; i < k.size(); ++i) kb[i] = f32_to_bf16(k[i]), vb[i] = f32_to_bf16(v[i]);
            std::vector<float> rows(q.size()), alone(size_t(nq * hd));
            for (const bool bf16 : {false, true}) {
                const auto attend = [&](float *out, const float *qr, int64_t m, int64_t p0) {
                    if (bf16) cpu::attention_cached(out, qr, kb.data(), vb.data(), m, p0, s);
                    else cpu::attention_cached(out, qr, k.data(), v.data(), m, p0, s);
                };
                attend(rows.data(), q.data(), n, past);
                for (int64_t r = 0; r < n; ++r) {
                    attend(alone.data(), q.data() + r * nq * hd, 1, past + r);
                    ASSERT_EQ(std::memcmp(alone.data(), rows.data() + r * nq * hd, alone.size() * sizeof(float)), 0)
                        << (bf16 ? "bf16" : "fp32") << " cache, window " << window << ": row " << r << " of " << n;
                }
            }
        }
    }
}

} // namespace
} // namespace zaya
