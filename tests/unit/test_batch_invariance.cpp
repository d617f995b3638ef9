// Batch invariance of the few-row paths a decoding step takes: a row's output has the same bits whatever rows share
// the call, so a speculative draft's rows or a batch of requests decode exactly as each row alone. The streaming dot
// passes (ops/cpu/weight_stream.h: 1 row or 8, chunked or not, bf16 weights with fp32 or bf16 rows, int8 weights) at
// ZAYA1-8B's shapes (2048 and 4096 columns, where passes of 5 or more rows chunk the columns, and one whose last
// piece is short), AVX-512 kernels only (the AVX2 ones keep more chains per row for fewer rows: a different sum; the
// portable build's sanitizer run has those); the CCA convolution's direct path; and cached attention's per-row path.
// With batch_invariant, the same for any row count: every linear (fp32 weights too), the conv and attention.
#include "core/dtype.h"
#include "core/rng.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/linear_bf16.h"
#include "ops/cpu/linear_f32.h"
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
    std::vector<float> f32;
    std::vector<uint16_t> bf16;
    std::vector<int8_t> q;
    std::vector<float> scales, b;
};

Weights random_weights(int64_t I, int64_t O) {
    Rng rng(12, uint64_t(I));
    std::vector<float> w(size_t(O * I));
    for (auto &v : w) v = float(rng.normal()) * 0.02f;
    Weights r{w, std::vector<uint16_t>(w.size()), std::vector<int8_t>(w.size()),
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

// batch_invariant: every row through the dot passes whatever the count — past the GEMM paths' thresholds (24 bf16
// rows, 64 fp32 ones, 256 int8 ones) — for each storage, fp32 weights included, with fp32 and bf16 rows.
TEST(BatchInvariance, InvariantLinearRowsEqualTheRowAlone) {
#if !defined(__AVX512F__)
    GTEST_SKIP() << "batch invariance holds for the AVX-512 kernels; this build has the AVX2 ones";
#else
    const int64_t O = 40;
    for (int64_t I : {2048, 2100}) {
        const Weights w = random_weights(I, O);
        for (auto p : {cpu::MatmulPrecision::F32, cpu::MatmulPrecision::BF16}) {
            const bool bf16_rows = p == cpu::MatmulPrecision::BF16;
            expect_rows_alone(
                [&](float *y, const float *x, int64_t N) {
                    cpu::linear_bf16(y, O, x, w.bf16.data(), w.b.data(), N, I, O, p, true);
                },
                I, O, 80, bf16_rows ? "bf16 weights, bf16 rows" : "bf16 weights, fp32 rows");
            expect_rows_alone(
                [&](float *y, const float *x, int64_t N) {
                    cpu::linear_f32(y, O, x, w.f32.data(), w.b.data(), N, I, O, p, true);
                },
                I, O, 80, bf16_rows ? "fp32 weights, bf16 rows" : "fp32 weights, fp32 rows");
        }
        expect_rows_alone(
            [&](float *y, const float *x, int64_t N) {
                cpu::linear_i8(y, O, x, w.q.data(), w.scales.data(), w.b.data(), N, I, O, true);
            },
            I, O, 270, "int8 weights");
    }
#endif
}

// The invariant fp32-weight path computes the product: it agrees with the SGEMM's to rounding.
TEST(BatchInvariance, InvariantFp32LinearAgreesWithTheSgemm) {
    const int64_t I = 300, O = 50, N = 70;
    const Weights w = random_weights(I, O);
    Rng rng(15, 0);
    std::vector<float> x(size_t(N * I)), dot(size_t(N * O)), sgemm(dot.size());
    for (auto &v : x) v = float(rng.normal());
    cpu::linear_f32(dot.data(), O, x.data(), w.f32.data(), w.b.data(), N, I, O, cpu::MatmulPrecision::F32, true);
    cpu::linear_f32(sgemm.data(), O, x.data(), w.f32.data(), w.b.data(), N, I, O, cpu::MatmulPrecision::F32);
    for (size_t k = 0; k < dot.size(); ++k) ASSERT_NEAR(dot[k], sgemm[k], 1e-4f * (1 + std::fabs(sgemm[k]))) << k;
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
    auto conv = [&](const std::vector<int64_t> &lengths, const float *z, bool batch_invariant = false) {
        std::vector<int64_t> start = {0};
        for (int64_t T : lengths) start.push_back(start.back() + T);
        const int64_t N = start.back(), B = int64_t(lengths.size());
        std::vector<float> o(size_t(N * C)), p(size_t(cpu::cca_conv_p_rows(N, B, s) * C));
        cpu::cca_conv_forward(o.data(), p.data(), z, start.data(), B, s, wd.data(), bd.data(), wg.data(), bg.data(),
                              nullptr, batch_invariant);
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
    // batch_invariant: any rows (a prompt's chunk beside decoding sequences; the chunk's first part alone).
    for (const int64_t first : {30, 150}) {
        const std::vector<int64_t> lengths = {first, 3, 50, 3};
        const std::vector<float> z = randoms((first + 56) * C, 1.0f);
        const std::vector<float> alone = conv({first}, z.data(), true), beside = conv(lengths, z.data(), true);
        ASSERT_EQ(std::memcmp(alone.data(), beside.data(), alone.size() * sizeof(float)), 0)
            << "batch-invariant: a sequence of " << first << " rows beside 56 more";
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

// batch_invariant: 16 rows or more attend each on its own as well (a prompt's chunk), also where the rows are taken
// in groups (a long cache: here 88 key blocks of one kv head of 16, so 93 rows a group).
TEST(BatchInvariance, InvariantAttentionRowsEqualTheRowAlone) {
    Rng rng(16, 0);
    struct AttnCase {
        int64_t nq, nkv, hd, past, n;
    };
    for (const AttnCase cs : {AttnCase{8, 2, 128, 700, 40}, AttnCase{2, 1, 16, 44900, 100}}) {
        const cpu::AttnShape s{cs.nq, cs.nkv, cs.hd, 1.0f / std::sqrt(float(cs.hd)), 0};
        const int64_t len = cs.past + cs.n, row = cs.nq * cs.hd;
        std::vector<float> q(size_t(cs.n * row)), k(size_t(len * cs.nkv * cs.hd)), v(k.size());
        for (auto *a : {&q, &k, &v})
            for (auto &x : *a) x = float(rng.normal());
        std::vector<uint16_t> kb(k.size()), vb(v.size());
        for (size_t i = 0; i < k.size(); ++i) kb[i] = f32_to_bf16(k[i]), vb[i] = f32_to_bf16(v[i]);
        std::vector<float> rows(q.size()), alone(static_cast<size_t>(row));
        for (const bool bf16 : {false, true}) {
            const auto attend = [&](float *out, const float *qr, int64_t m, int64_t p0) {
                if (bf16) cpu::attention_cached(out, qr, kb.data(), vb.data(), m, p0, s, true);
                else cpu::attention_cached(out, qr, k.data(), v.data(), m, p0, s, true);
            };
            attend(rows.data(), q.data(), cs.n, cs.past);
            for (int64_t r = 0; r < cs.n; ++r) {
                attend(alone.data(), q.data() + r * row, 1, cs.past + r);
                ASSERT_EQ(std::memcmp(alone.data(), rows.data() + r * row, alone.size() * sizeof(float)), 0)
                    << (bf16 ? "bf16" : "fp32") << " cache, " << cs.past << " keys before: row " << r << " of "
                    << cs.n;
            }
        }
    }
}

} // namespace
} // namespace zaya
