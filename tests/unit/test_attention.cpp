// CPU attention (block GEMMs, online softmax) against a naive O(T²) reference in double: forward output and lse,
// and the backward dq, dk, dv — over varlen batches whose lengths are not multiples of the blocks, GQA groups of
// 1, 2 and 4, sliding windows narrower and wider than a block; and results bit-identical for 1 and 2 threads
// (which also takes the backward through both of its task splits).
#include "core/rng.h"
#include "core/dtype.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/softmax_pow2.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <omp.h>
#include <sstream>
#include <string>
#include <vector>

namespace zaya {
namespace {

struct Case {
    std::vector<int64_t> lengths;
    int64_t nq, nkv, hd, window;
};

std::string describe(const Case &c) {
    std::ostringstream s;
    s << "lengths";
    for (int64_t T : c.lengths) s << ' ' << T;
    s << " nq " << c.nq << " nkv " << c.nkv << " hd " << c.hd << " window " << c.window;
    return s.str();
}

struct Data {
    std::vector<int64_t> seq_start;
    std::vector<float> q, k, v, g; // g: the gradient of the output
};

Data make_data(const Case &c, uint64_t seed) {
    Data d;
    d.seq_start = {0};
    for (int64_t T : c.lengths) d.seq_start.push_back(d.seq_start.back() + T);
    const int64_t N = d.seq_start.back();
    Rng rng(seed, 0);
    auto randv = [&](int64_t n, double sd) {
        std::vector<float> x(static_cast<size_t>(n));
        for (auto &e : x) e = float(sd * rng.normal());
        return x;
    };
    // q with sd 2 gives peaked softmax rows too, not only near-uniform ones.
    d.q = randv(N * c.nq * c.hd, 2.0);
    d.k = randv(N * c.nkv * c.hd, 1.0);
    d.v = randv(N * c.nkv * c.hd, 1.0);
    d.g = randv(N * c.nq * c.hd, 1.0);
    return d;
}

struct Result {
    std::vector<float> out, lse, dq, dk, dv;
};

cpu::AttnShape shape_of(const Case &c) { return {c.nq, c.nkv, c.hd, float(1.0 / std::sqrt(double(c.hd))), c.window}; }

Result run_cpu(const Case &c, const Data &d) {
    const int64_t N = d.seq_start.back(), B = int64_t(c.lengths.size());
    const cpu::AttnShape s = shape_of(c);
    Result r;
    // Outputs start as NaN: every element must be written.
    const float nan = std::nanf("");
    r.out.assign(size_t(N * c.nq * c.hd), nan);
    r.lse.assign(size_t(N * c.nq), nan);
    r.dq.assign(d.q.size(), nan);
    r.dk.assign(d.k.size(), nan);
    r.dv.assign(d.v.size(), nan);
    cpu::attention_forward(r.out.data(), r.lse.data(), d.q.data(), d.k.data(), d.v.data(), d.seq_start.data(), B, s);
    cpu::attention_backward(r.dq.data(), r.dk.data(), r.dv.data(), d.g.data(), r.out.data(), r.lse.data(), d.q.data(),
                            d.k.data(), d.v.data(), d.seq_start.data(), B, s);
    return r;
}

struct Reference {
    std::vector<double> out, lse, dq, dk, dv;
};

// Straightforward attention, one query row at a time: softmax over its visible keys, then the chain rule.
Reference run_reference(const Case &c, const Data &d) {
    const int64_t N = d.seq_start.back(), nq = c.nq, nkv = c.nkv, hd = c.hd, group = nq / nkv;
    const double scale = 1.0 / std::sqrt(double(hd));
    Reference r;
    r.out.assign(size_t(N * nq * hd), 0.0);
    r.lse.assign(size_t(N * nq), 0.0);
    r.dq.assign(d.q.size(), 0.0);
    r.dk.assign(d.k.size(), 0.0);
    r.dv.assign(d.v.size(), 0.0);
    auto at = [hd](int64_t n, int64_t nh, int64_t h) { return size_t((n * nh + h) * hd); };
    for (size_t b = 0; b + 1 < d.seq_start.size(); ++b) {
        const int64_t t0 = d.seq_start[b], T = d.seq_start[b + 1] - t0;
        for (int64_t h = 0; h < nq; ++h) {
            const int64_t j = h / group;
            for (int64_t t = 0; t < T; ++t) {
                const int64_t lo = c.window > 0 ? std::max<int64_t>(0, t - c.window + 1) : 0;
                const size_t qi = at(t0 + t, nq, h);
                std::vector<double> p(size_t(t - lo + 1)), dp(p.size());
                double m = -1e300;
                for (int64_t u = lo; u <= t; ++u) {
                    double dot = 0;
                    for (int64_t e = 0; e < hd; ++e) dot += double(d.q[qi + e]) * d.k[at(t0 + u, nkv, j) + e];
                    p[size_t(u - lo)] = dot * scale;
                    m = std::max(m, dot * scale);
                }
                double sum = 0;
                for (auto &x : p) sum += (x = std::exp(x - m));
                for (auto &x : p) x /= sum;
                r.lse[size_t((t0 + t) * nq + h)] = m + std::log(sum);
                double dd = 0; // D = Σ_u P·dP = dO·O
                for (int64_t u = lo; u <= t; ++u) {
                    const size_t vi = at(t0 + u, nkv, j);
                    double g_dot_v = 0;
                    for (int64_t e = 0; e < hd; ++e) {
                        r.out[qi + e] += p[size_t(u - lo)] * d.v[vi + e];
                        g_dot_v += double(d.g[qi + e]) * d.v[vi + e];
                    }
                    dp[size_t(u - lo)] = g_dot_v;
                    dd += p[size_t(u - lo)] * g_dot_v;
                }
                for (int64_t u = lo; u <= t; ++u) {
                    const size_t ki = at(t0 + u, nkv, j);
                    const double pu = p[size_t(u - lo)], ds = pu * (dp[size_t(u - lo)] - dd) * scale;
                    for (int64_t e = 0; e < hd; ++e) {
                        r.dq[qi + e] += ds * d.k[ki + e];
                        r.dk[ki + e] += ds * d.q[qi + e];
                        r.dv[ki + e] += pu * d.g[qi + e];
                    }
                }
            }
        }
    }
    return r;
}

void expect_close(const std::vector<float> &got, const std::vector<double> &want, double tol, const char *what,
                  const Case &c) {
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - want[i]) / (1.0 + std::fabs(want[i]));
        if (!(err <= worst)) worst = err, worst_i = i; // NaN too
    }
    EXPECT_LE(worst, tol) << what << "[" << worst_i << "] = " << got[worst_i] << ", reference " << want[worst_i]
                          << " (" << describe(c) << ")";
}

const std::vector<Case> &cases() {
    // Query blocks are 64 tokens for groups 1 and 2, 32 for 4, 16 for 8; key blocks 256.
    static const std::vector<Case> all = {
        {{1, 7, 64, 65, 200}, 4, 2, 16, 0},  // varlen, group 2
        {{1, 7, 64, 65, 200}, 4, 4, 8, 0},   // group 1 (plain multi-head)
        {{200, 65, 7, 1, 129}, 8, 2, 32, 0}, // group 4, head_dim of the small preset
        {{33, 300}, 8, 1, 8, 0},             // group 8; more than one key block
        {{1, 7, 64, 65, 200}, 4, 2, 16, 5},  // window far smaller than a block
        {{65, 300, 7}, 4, 1, 16, 100},       // window wider than a query block, narrower than a key block
        {{300, 1, 260}, 8, 2, 8, 150},       // ... the same with group 4
        {{129, 300}, 2, 1, 24, 1000},        // window longer than every sequence: full causal
        {{700}, 4, 1, 16, 0},                // one long sequence, one kv head: with 2 threads the backward splits
        {{700}, 4, 2, 16, 300},              // window wider than a key block
    };
    return all;
}

TEST(Attention, MatchesNaiveReference) {
    uint64_t seed = 1;
    for (const Case &c : cases()) {
        const Data d = make_data(c, seed++);
        const Result got = run_cpu(c, d);
        const Reference want = run_reference(c, d);
        expect_close(got.out, want.out, 1e-5, "out", c);
        expect_close(got.lse, want.lse, 1e-5, "lse", c);
        expect_close(got.dq, want.dq, 5e-5, "dq", c);
        expect_close(got.dk, want.dk, 5e-5, "dk", c);
        expect_close(got.dv, want.dv, 5e-5, "dv", c);
    }
}

// Same inputs, one thread and two: the bits must agree (training is reproducible whatever OMP_NUM_THREADS is).
// With one long sequence and one kv head, two threads take the backward's split path and one thread the fused one.
TEST(Attention, BitIdenticalForOneAndTwoThreads) {
    const int saved = omp_get_max_threads();
    uint64_t seed = 100;
    for (const Case &c : cases()) {
        const Data d = make_data(c, seed++);
        omp_set_num_threads(1);
        const Result one = run_cpu(c, d);
        omp_set_num_threads(2);
        const Result two = run_cpu(c, d);
        omp_set_num_threads(saved);
        for (auto [a, b, what] : {std::tuple{&one.out, &two.out, "out"}, {&one.lse, &two.lse, "lse"},
                                  {&one.dq, &two.dq, "dq"}, {&one.dk, &two.dk, "dk"}, {&one.dv, &two.dv, "dv"}})
            EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof(float)), 0)
                << what << " (" << describe(c) << ")";
    }
}

// Context parallelism's attention (SeqPrefix): every sequence cut into 2n chunks, rank r's call holding chunks r and
// 2n−1−r of each (two parts sharing their sequence's keys, laid out as the gathered keys are) against the keys up to
// each part's end. The parts' output and lse must be the whole sequences' at their rows, and dk, dv (the two parts
// summed into shared rows within a call, then over the ranks) the whole sequences' — against the naive reference,
// for 1 and 2 threads (the backward's two task splits), chunks not on the blocks' grid.
TEST(Attention, PartsAgainstTheirKeysMatchTheWholeSequences) {
    const int saved = omp_get_max_threads();
    const std::vector<std::pair<Case, int>> chunked = {
        {{{200, 200}, 4, 2, 16, 0}, 2},   // parts of 50: not a multiple of the query block
        {{{300, 300, 300}, 8, 2, 8, 0}, 3},
        {{{700}, 4, 1, 16, 0}, 2},        // parts of 175 over key blocks of 256
        {{{260, 260}, 4, 2, 16, 70}, 2},  // sliding window: a part sees only the end of the one before
        {{{600}, 8, 2, 8, 300}, 3},       // window wider than a key block
    };
    uint64_t seed = 200;
    for (const auto &[c, n] : chunked) {
        const Data d = make_data(c, seed++);
        const Reference want = run_reference(c, d);
        const int64_t B = int64_t(c.lengths.size()), T = c.lengths[0], wq = c.nq * c.hd, wk = c.nkv * c.hd;
        const int64_t Tc = T / (2 * n);
        const cpu::AttnShape s = shape_of(c);
        for (int threads : {1, 2}) {
            omp_set_num_threads(threads);
            Result got; // whole-batch layout: each part's rows written where they lie in the whole sequences
            got.out.assign(d.q.size(), std::nanf(""));
            got.lse.assign(d.q.size() / size_t(c.hd), std::nanf(""));
            got.dq.assign(d.q.size(), std::nanf(""));
            got.dk.assign(d.k.size(), 0.0f);
            got.dv.assign(d.v.size(), 0.0f);
            for (int r = 0; r < n; ++r) {
                const int64_t start[2] = {r * Tc, (2 * n - 1 - r) * Tc}; // parts 0 and 1
                // This rank's parts of every sequence, packed: q, the output's gradient.
                std::vector<float> q(size_t(2 * B * Tc * wq)), g(q.size());
                std::vector<int64_t> seq_start, key_start, pos0;
                for (int64_t b = 0; b < B; ++b)
                    for (int p = 0; p < 2; ++p) {
                        const int64_t row = (2 * b + p) * Tc;
                        seq_start.push_back(row);
                        key_start.push_back(b * T); // d.k, d.v: the whole sequences, as gathered from every rank
                        pos0.push_back(start[p]);
                        std::copy_n(d.q.begin() + (b * T + start[p]) * wq, Tc * wq, q.begin() + row * wq);
                        std::copy_n(d.g.begin() + (b * T + start[p]) * wq, Tc * wq, g.begin() + row * wq);
                    }
                seq_start.push_back(2 * B * Tc);
                SeqPrefix keys;
                keys.pos0 = pos0.data();
                keys.key_start = key_start.data();
                std::vector<float> out(q.size()), lse(q.size() / size_t(c.hd)), dq(q.size());
                std::vector<float> dk(d.k.size(), std::nanf("")), dv(d.v.size(), std::nanf(""));
                cpu::attention_forward(out.data(), lse.data(), q.data(), d.k.data(), d.v.data(), seq_start.data(),
                                       2 * B, s, &keys);
                cpu::attention_backward(dq.data(), dk.data(), dv.data(), g.data(), out.data(), lse.data(), q.data(),
                                        d.k.data(), d.v.data(), seq_start.data(), 2 * B, s, &keys);
                const int64_t key_end = start[1] + Tc; // part 1 reaches furthest
                for (int64_t b = 0; b < B; ++b) {
                    for (int p = 0; p < 2; ++p) {
                        const int64_t row = (2 * b + p) * Tc, at = b * T + start[p];
                        std::copy_n(out.begin() + row * wq, Tc * wq, got.out.begin() + at * wq);
                        std::copy_n(dq.begin() + row * wq, Tc * wq, got.dq.begin() + at * wq);
                        std::copy_n(lse.begin() + row * c.nq, Tc * c.nq, got.lse.begin() + at * c.nq);
                    }
                    // dk, dv: written for the keys up to the parts' end, the later ones left as they were.
                    for (int64_t e = 0; e < T * wk; ++e) {
                        const size_t i = size_t(b * T * wk + e);
                        EXPECT_EQ(std::isnan(dk[i]), e >= key_end * wk) << "dk[" << i << "] rank " << r;
                        if (e < key_end * wk) got.dk[i] += dk[i], got.dv[i] += dv[i];
                    }
                }
            }
            const std::string what = describe(c) + ", " + std::to_string(n) + " ranks, threads ";
            expect_close(got.out, want.out, 1e-5, (what + std::to_string(threads) + ": out").c_str(), c);
            expect_close(got.lse, want.lse, 1e-5, (what + std::to_string(threads) + ": lse").c_str(), c);
            expect_close(got.dq, want.dq, 5e-5, (what + std::to_string(threads) + ": dq").c_str(), c);
            expect_close(got.dk, want.dk, 5e-5, (what + std::to_string(threads) + ": dk").c_str(), c);
            expect_close(got.dv, want.dv, 5e-5, (what + std::to_string(threads) + ": dv").c_str(), c);
        }
    }
    omp_set_num_threads(saved);
}

// An exception may not leave an OpenMP region (the runtime calls std::terminate), and attention's GEMMs run inside
// one: a failing GEMM must reach the caller as zaya's error (FirstError, core/parallel.h). ZAYA_GEMM=bogus fails the
// first GEMM of a fresh process, and a threadsafe death test is one: it runs the test binary again for this test.
// The child exits 3 with the error it caught; an exception lost in the region would abort it instead.
[[noreturn]] void run_attention_with_a_failing_gemm(bool backward) {
    setenv("ZAYA_GEMM", "bogus", 1);
    omp_set_num_threads(2);
    const Case c{{300, 129}, 4, 2, 16, 0};
    const Data d = make_data(c, 7);
    try {
        if (backward) { // any finite output and lse will do: the first GEMM fails
            const int64_t B = int64_t(c.lengths.size());
            const cpu::AttnShape s = shape_of(c);
            std::vector<float> out(d.q.size()), lse(d.q.size() / size_t(c.hd)), dq(d.q.size()), dk(d.k.size()),
                dv(d.v.size());
            cpu::attention_backward(dq.data(), dk.data(), dv.data(), d.g.data(), out.data(), lse.data(), d.q.data(),
                                    d.k.data(), d.v.data(), d.seq_start.data(), B, s);
        } else {
            run_cpu(c, d);
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "caught: %s\n", e.what());
        std::_Exit(3);
    }
    std::_Exit(0);
}

// Cached attention (decoding): n new queries at positions p0 … over a cache of p0 + n rows, against a naive
// reference in double — caches long enough to be split into key blocks (decoding rows) or not (a few rows), prompt
// chunks (≥ 16 rows: the block GEMMs of attention_forward, several query blocks), sliding windows that leave whole
// blocks out, GQA groups of 1 and 4, head_dim 16 and 128 (groups of 4 at 128: the few-rows path's register kernel,
// attention_rows.h, where the CPU has AVX-512); the same bits for one thread and two.
TEST(Attention, CachedMatchesNaiveReferenceAcrossKeyBlocks) {
    Rng rng(17, 0);
    for (const auto &[nkv, hd] : {std::array<int64_t, 2>{2, 16}, {8, 16}, {2, 128}}) {
        const int64_t nq = 8;
        for (int64_t window : {int64_t(0), int64_t(700)}) {
            for (int64_t n : {1, 3, 9, 16, 70}) {
                const int64_t p0 = 1500, total = p0 + n;
                std::vector<float> q(size_t(n * nq * hd)), k(size_t(total * nkv * hd)), v(k.size());
                for (auto *x : {&q, &k, &v})
                    for (float &e : *x) e = float(rng.normal());
                const cpu::AttnShape sh{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), window};
                std::vector<float> out(q.size()), out1(q.size());
                cpu::attention_cached(out.data(), q.data(), k.data(), v.data(), n, p0, sh);
                const int saved = omp_get_max_threads();
                omp_set_num_threads(1);
                cpu::attention_cached(out1.data(), q.data(), k.data(), v.data(), n, p0, sh);
                omp_set_num_threads(saved);
                EXPECT_EQ(out, out1) << "n " << n << " nkv " << nkv << " window " << window;
                for (int64_t i = 0; i < n; ++i)
                    for (int64_t h = 0; h < nq; ++h) {
                        const int64_t pos = p0 + i, j = h / (nq / nkv);
                        const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
                        std::vector<double> sc;
                        double m = -1e300, sum = 0;
                        for (int64_t t = lo; t <= pos; ++t) {
                            double dot = 0;
                            for (int64_t d = 0; d < hd; ++d)
                                dot += double(q[size_t((i * nq + h) * hd + d)]) * k[size_t((t * nkv + j) * hd + d)];
                            sc.push_back(dot * sh.scale);
                            m = std::max(m, sc.back());
                        }
                        for (double &x : sc) sum += (x = std::exp(x - m));
                        for (int64_t d = 0; d < hd; ++d) {
                            double o = 0;
                            for (int64_t t = lo; t <= pos; ++t)
                                o += sc[size_t(t - lo)] * v[size_t((t * nkv + j) * hd + d)];
                            ASSERT_NEAR(out[size_t((i * nq + h) * hd + d)], o / sum, 1e-5)
                                << "n " << n << " nkv " << nkv << " window " << window << " row " << i << " head " << h;
                        }
                    }
            }
        }
    }
}

// The attention of a bf16 cache as ops/cpu/attention.h defines it, in double: queries q̃ rounded to bf16, scores in
// log2 units t = (scale·log2 e)·q̃·k, M = ⌊max t⌋, P = 2^(t − M) and out = Σ bf16(P)·v / Σ P — or, with round_p
// false, Σ P·v / Σ P (the probabilities not rounded). k and v: the cache's values, widened.
std::vector<float> bf16_cache_attention(const std::vector<float> &q, const std::vector<float> &k,
                                        const std::vector<float> &v, int64_t n, int64_t p0, const cpu::AttnShape &s,
                                        bool round_p) {
    const int64_t G = s.nq / s.nkv, hd = s.hd;
    const double scale = double(s.scale * 1.44269504088896341f);
    std::vector<float> out(q.size());
    std::vector<double> t, o(static_cast<size_t>(hd));
    for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < s.nq; ++h) {
            const int64_t pos = p0 + i, j = h / G, first = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
            t.assign(size_t(pos + 1 - first), 0.0);
            for (int64_t c = first; c <= pos; ++c) {
                double dot = 0;
                for (int64_t d = 0; d < hd; ++d)
                    dot += double(bf16_to_f32(f32_to_bf16(q[size_t((i * s.nq + h) * hd + d)]))) *
                           double(k[size_t((c * s.nkv + j) * hd + d)]);
                t[size_t(c - first)] = scale * dot;
            }
            const double M = std::floor(*std::max_element(t.begin(), t.end()));
            double l = 0;
            std::fill(o.begin(), o.end(), 0.0);
            for (int64_t c = first; c <= pos; ++c) {
                const double p = std::exp2(t[size_t(c - first)] - M);
                const double w = round_p ? double(bf16_to_f32(f32_to_bf16(float(p)))) : p;
                l += p;
                for (int64_t d = 0; d < hd; ++d) o[size_t(d)] += w * double(v[size_t((c * s.nkv + j) * hd + d)]);
            }
            for (int64_t d = 0; d < hd; ++d) out[size_t((i * s.nq + h) * hd + d)] = float(o[size_t(d)] / l);
        }
    return out;
}

float rms_diff(const std::vector<float> &a, const std::vector<float> &b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (double(a[i]) - double(b[i])) * (double(a[i]) - double(b[i]));
    return float(std::sqrt(s / double(a.size())));
}

// got and want, outputs of hd values each, as a bf16 cache's attention agrees with itself or its definition: its
// probabilities are rounded to bf16, and a score whose last bits differ (the order of the sums) sends one across a
// rounding boundary now and then, moving that output by up to 2^−8 of the probability's weight. So all but one
// output in 20 within 1e-5, every one within 4e-3 (probabilities not rounded at all: ~1e-4 off everywhere).
void expect_same_up_to_rounding_crossings(const std::vector<float> &got, const std::vector<float> &want, int64_t hd,
                                          const std::string &ctx) {
    const int64_t outputs = int64_t(want.size()) / hd;
    int64_t apart = 0;
    float worst = 0;
    for (int64_t o = 0; o < outputs; ++o) {
        float d = 0;
        for (int64_t i = o * hd; i < (o + 1) * hd; ++i) d = std::max(d, std::fabs(got[size_t(i)] - want[size_t(i)]));
        apart += d > 1e-5f;
        worst = std::max(worst, d);
    }
    EXPECT_LE(apart, std::max<int64_t>(1, outputs / 20)) << ctx << ": outputs beyond 1e-5 of " << outputs;
    EXPECT_LT(worst, 4e-3f) << ctx;
}

// The bf16 cache's softmax (ops/cpu/softmax_pow2.h): P = 2^(t − M) for two integer maxima comes out exactly a power
// of two apart, and so does its bf16 rounding — the property that lets every path round P alike — and it is 2^(t − M)
// to within fast_exp's error; exact powers of two for integers, 0 below 2^−126 (no subnormals).
TEST(Attention, Pow2SoftmaxIsExactlyShiftedByIntegerMaxima) {
    Rng rng(41, 0);
    for (int i = 0; i < 20000; ++i) {
        const float t = float(rng.normal() * 20.0), M = cpu::pow2::max_of_scores(t) + float(i % 7);
        const float p = cpu::pow2::exp2_below(t, M), shift = float(1 + i % 5);
        const float q = cpu::pow2::exp2_below(t, M + shift);
        ASSERT_EQ(p, q * std::exp2(shift)) << "t " << t << " M " << M;
        ASSERT_EQ(cpu::pow2::round_bf16(p), cpu::pow2::round_bf16(q) * std::exp2(shift)) << "t " << t;
        ASSERT_EQ(cpu::pow2::round_bf16(p), bf16_to_f32(f32_to_bf16(p)));
        if (M - t < 120) {
            ASSERT_NEAR(p / std::exp2(double(t) - double(M)), 1.0, 1e-6) << "t " << t << " M " << M;
        }
    }
    EXPECT_EQ(cpu::pow2::pow2_int(0.0f), 1.0f);
    EXPECT_EQ(cpu::pow2::pow2_int(-126.0f), std::ldexp(1.0f, -126));
    EXPECT_EQ(cpu::pow2::pow2_int(-127.0f), 0.0f);
    EXPECT_EQ(cpu::pow2::pow2_int(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_EQ(cpu::pow2::exp2_below(-200.0f, 0.0f), 0.0f);
    EXPECT_EQ(cpu::pow2::max_of_scores(-2.5f), -3.0f);
    EXPECT_EQ(cpu::pow2::max_of_scores(7.0f), 7.0f);
}

// Random queries and a bf16 cache of p0 + n rows: q [n, nq, hd]; kb, vb the cache's bits, k, v their values.
struct Bf16CacheCase {
    std::vector<float> q, k, v;
    std::vector<uint16_t> kb, vb;
};
Bf16CacheCase bf16_cache_case(Rng &rng, int64_t n, int64_t total, const cpu::AttnShape &s) {
    Bf16CacheCase c;
    c.q.resize(size_t(n * s.nq * s.hd)), c.k.resize(size_t(total * s.nkv * s.hd)), c.v.resize(c.k.size());
    for (auto *x : {&c.q, &c.k, &c.v})
        for (float &e : *x) e = float(rng.normal());
    c.kb.resize(c.k.size()), c.vb.resize(c.v.size());
    for (size_t i = 0; i < c.k.size(); ++i) {
        c.kb[i] = f32_to_bf16(c.k[i]), c.vb[i] = f32_to_bf16(c.v[i]);
        c.k[i] = bf16_to_f32(c.kb[i]), c.v[i] = bf16_to_f32(c.vb[i]);
    }
    return c;
}

// A bf16 cache's attention is the definition above (bf16_cache_attention): the kernels agree with it up to the
// order of their sums and the rare rounding crossing that order causes (expect_same_up_to_rounding_crossings) — for
// a prompt chunk (the bf16 GEMMs) and for a few rows (key blocks split or not), sliding window or not; and the same
// bits for any thread count.
TEST(Attention, CachedOverBf16IsItsDefinition) {
    Rng rng(23, 0);
    // hd 128 with 4 query heads per kv head: the few-rows path's register kernel (attention_rows.h, where the
    // CPU has AVX512_BF16); hd 16: its generic loops; a prompt chunk either way the GEMMs.
    for (const auto &[nq, nkv, hd] : {std::array<int64_t, 3>{8, 2, 16}, {8, 2, 128}, {6, 2, 128}})
    for (int64_t window : {int64_t(0), int64_t(300)}) {
        for (int64_t n : {1, 5, 40, 90}) {
            const int64_t p0 = 1100;
            const cpu::AttnShape sh{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), window};
            const Bf16CacheCase c = bf16_cache_case(rng, n, p0 + n, sh);
            std::vector<float> out(c.q.size(), std::nanf(""));
            cpu::attention_cached(out.data(), c.q.data(), c.kb.data(), c.vb.data(), n, p0, sh);
            const auto want = bf16_cache_attention(c.q, c.k, c.v, n, p0, sh, true);
            const auto unrounded = bf16_cache_attention(c.q, c.k, c.v, n, p0, sh, false);
            const std::string ctx = "nq " + std::to_string(nq) + " hd " + std::to_string(hd) + " n " +
                                    std::to_string(n) + " window " + std::to_string(window);
            EXPECT_GT(rms_diff(want, unrounded), 2e-5f) << ctx; // the case rounds probabilities visibly
            expect_same_up_to_rounding_crossings(out, want, hd, ctx);
            std::vector<float> one(c.q.size());
            const int saved = omp_get_max_threads();
            omp_set_num_threads(1);
            cpu::attention_cached(one.data(), c.q.data(), c.kb.data(), c.vb.data(), n, p0, sh);
            omp_set_num_threads(saved);
            EXPECT_EQ(out, one) << ctx;
        }
    }
}

// However a bf16 cache's queries come — a prompt chunk at once (the bf16 GEMMs, running maxima over key blocks), in
// two chunks, or one row at a time (per-row dots, maxima per key split) — they get the same outputs up to the order
// of the sums (and the rare rounding crossing it causes): the probabilities are rounded to bf16 relative to integer
// maxima, so no path rounds them differently.
TEST(Attention, Bf16CacheIsTheSameHoweverTheQueriesCome) {
    Rng rng(31, 0);
    const int64_t nq = 8, nkv = 2, n = 40, p0 = 1500;
    for (int64_t hd : {16, 128})
    for (int64_t window : {int64_t(0), int64_t(700)}) {
        const cpu::AttnShape sh{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), window};
        const Bf16CacheCase c = bf16_cache_case(rng, n, p0 + n, sh);
        const int64_t Dq = nq * hd;
        std::vector<float> whole(c.q.size()), halves(c.q.size()), rows(c.q.size());
        cpu::attention_cached(whole.data(), c.q.data(), c.kb.data(), c.vb.data(), n, p0, sh);
        cpu::attention_cached(halves.data(), c.q.data(), c.kb.data(), c.vb.data(), 24, p0, sh);
        cpu::attention_cached(halves.data() + 24 * Dq, c.q.data() + 24 * Dq, c.kb.data(), c.vb.data(), 16, p0 + 24,
                              sh);
        for (int64_t i = 0; i < n; ++i)
            cpu::attention_cached(rows.data() + i * Dq, c.q.data() + i * Dq, c.kb.data(), c.vb.data(), 1, p0 + i, sh);
        for (const auto *got : {&halves, &rows}) {
            std::string ctx = got == &rows ? "row by row" : "two chunks"; // appended: GCC 12 -Warray-bounds
            ctx.append(", window ").append(std::to_string(window)).append(", hd ").append(std::to_string(hd));
            expect_same_up_to_rounding_crossings(*got, whole, hd, ctx);
        }
    }
}

TEST(AttentionDeathTest, AGemmErrorInTheForwardRegionReachesTheCaller) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(run_attention_with_a_failing_gemm(false), ::testing::ExitedWithCode(3),
                "caught: ZAYA_GEMM must be 'onednn' or 'openblas', got 'bogus'");
}

TEST(AttentionDeathTest, AGemmErrorInTheBackwardRegionReachesTheCaller) {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    EXPECT_EXIT(run_attention_with_a_failing_gemm(true), ::testing::ExitedWithCode(3),
                "caught: ZAYA_GEMM must be 'onednn' or 'openblas', got 'bogus'");
}

} // namespace
} // namespace zaya
