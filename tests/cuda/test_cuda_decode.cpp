// Cached decoding on the GPU (ops/cuda/decode.h, infer/cuda_decoder.h): each decode kernel against a naive CPU
// reference, then the CudaDecoder's logits for a prompt and several decode steps against the CPU model's
// full-sequence logits (model_forward), for fp32 and bf16 weights.
#include "cuda_test_util.h"
#include "core/dtype.h"
#include "core/error.h"
#include "infer/cuda_decoder.h"
#include "model/forward.h"
#include "model/init.h"
#include "ops/backend.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/block.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/moe.h"
#include "ops/cpu/norm.h"
#include "ops/cuda/decode.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <tuple>
#include <string>
#include <type_traits>
#include <vector>

namespace zaya {
namespace {

using namespace test;

std::vector<uint16_t> to_bf16_bits(const std::vector<float> &v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
    return b;
}
std::vector<float> widened(const std::vector<uint16_t> &b) {
    std::vector<float> v(b.size());
    for (size_t i = 0; i < b.size(); ++i) v[i] = bf16_to_f32(b[i]);
    return v;
}
// What a linear with bf16 weights multiplies them by (decode.h): the rows rounded to bf16; with fp32 weights, the
// rows as they are.
std::vector<float> operand_rows(const std::vector<float> &x, bool bf16) { return bf16 ? widened(to_bf16_bits(x)) : x; }

// The KV cache as the tests hold it (decode.h): fp32, or bf16 bits. cache_of rounds values into the cache's
// element, values_of reads them back, kept is what the cache keeps of one value.
template <class T> std::vector<T> cache_of(const std::vector<float> &v) {
    if constexpr (std::is_same_v<T, float>) return v;
    else return to_bf16_bits(v);
}
template <class T> std::vector<float> values_of(const std::vector<T> &c) {
    if constexpr (std::is_same_v<T, float>) return c;
    else return widened(c);
}
template <class T> float kept(float x) {
    if constexpr (std::is_same_v<T, float>) return x;
    else return bf16_to_f32(f32_to_bf16(x));
}
// The CPU's attention over a cache of element T holding the values k, v (ops/cpu/attention.h; a bf16 cache's
// attention rounds the queries and the probabilities as the GPU's does).
template <class T>
void cpu_cached_attention(float *out, const float *q, const std::vector<float> &k, const std::vector<float> &v,
                          int64_t n, int64_t p0, const cpu::AttnShape &s) {
    const std::vector<T> kc = cache_of<T>(k), vc = cache_of<T>(v);
    cpu::attention_cached(out, q, kc.data(), vc.data(), n, p0, s);
}
template <class T> const char *cache_name() { return std::is_same_v<T, float> ? "f32 cache" : "bf16 cache"; }

// Arrival counters for the kernels their last block finishes (decode.h): zeros, as the decoder allocates them.
cuda::DeviceArray<unsigned> zeroed_counters(size_t n) { return upload(std::vector<unsigned>(n, 0u)); }
// Every launch leaves its counters zero again (the next launch, a graph replay, counts from there).
void expect_counters_zero(const cuda::DeviceArray<unsigned> &c, const std::string &ctx) {
    const std::vector<unsigned> got = download(c);
    EXPECT_EQ(std::count(got.begin(), got.end(), 0u), std::ptrdiff_t(got.size())) << "counters left nonzero: " << ctx;
}

// y[n, o] (row stride ldy) = Σ_i x[n, i]·W[o, i] + b[o], in double.
void ref_linear(std::vector<float> &y, int64_t ldy, const std::vector<float> &x, const float *W, const float *b,
                int64_t N, int64_t I, int64_t O) {
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) {
            double s = b ? b[o] : 0.0;
            for (int64_t i = 0; i < I; ++i) s += double(x[size_t(n * I + i)]) * W[o * I + i];
            y[size_t(n * ldy + o)] = float(s);
        }
}

// Widths a multiple of the 16-byte piece and not, and ZAYA1-8B's 2048 (8 rows staged = 64 KiB of shared memory:
// the opt-in past 48 KiB); row counts within one pass and over several; with a bias and without; a row stride
// wider than the output (the untouched columns keep their poison).
TEST_F(CudaOps, DecodeLinearRowsMatchReference) {
    for (bool bf16 : {false, true})
        for (int64_t I : {64, 37, 2048})
            for (int64_t N : {1, 3, 11}) {
                const int64_t O = 21, ldy = 24;
                std::vector<float> x = random_vec(size_t(N * I), 1), W = random_vec(size_t(O * I), 2);
                const std::vector<float> b = random_vec(size_t(O), 3);
                const std::vector<uint16_t> Wb = to_bf16_bits(W);
                if (bf16) W = widened(Wb);
                for (bool bias : {false, true}) {
                    std::vector<float> ref(size_t(N * ldy), std::numeric_limits<float>::quiet_NaN());
                    ref_linear(ref, ldy, operand_rows(x, bf16), W.data(), bias ? b.data() : nullptr, N, I, O);
                    auto dx = upload(x), db = upload(b);
                    auto dy = poisoned(size_t(N * ldy));
                    if (bf16) {
                        auto dW = upload(Wb);
                        cuda::linear_rows_bf16(dy.data(), ldy, dx.data(), dW.data(), bias ? db.data() : nullptr, N, I,
                                               O);
                        const std::vector<float> got = download(dy);
                        for (int64_t n = 0; n < N; ++n)
                            for (int64_t o = 0; o < ldy; ++o) {
                                const float g = got[size_t(n * ldy + o)], r = ref[size_t(n * ldy + o)];
                                if (o >= O)
                                    EXPECT_TRUE(std::isnan(g)) << "column " << o << " was written";
                                else
                                    EXPECT_NEAR(g, r, 1e-4 * (1 + std::fabs(r)))
                                        << fmt::format("bf16 I={} N={} n={} o={}", I, N, n, o);
                            }
                    } else {
                        auto dW = upload(W);
                        cuda::linear_rows_f32(dy.data(), ldy, dx.data(), dW.data(), bias ? db.data() : nullptr, N, I,
                                              O);
                        const std::vector<float> got = download(dy);
                        for (int64_t n = 0; n < N; ++n)
                            for (int64_t o = 0; o < O; ++o)
                                EXPECT_NEAR(got[size_t(n * ldy + o)], ref[size_t(n * ldy + o)],
                                            1e-4 * (1 + std::fabs(ref[size_t(n * ldy + o)])))
                                    << fmt::format("f32 I={} N={} n={} o={}", I, N, n, o);
                    }
                }
            }
}

// Two projections stacked into one matrix: outputs from `second.from` on land in the second buffer (its own row
// stride), over more rows than one pass takes; the columns past each buffer's outputs keep their poison.
TEST_F(CudaOps, DecodeLinearSecondOutput) {
    const int64_t N = 11, I = 40, O = 21, from = 13, ld1 = 16, ld2 = 10;
    const std::vector<float> x = random_vec(size_t(N * I), 31), W = random_vec(size_t(O * I), 32),
                             b = random_vec(size_t(O), 33);
    std::vector<float> ref(size_t(N * O));
    ref_linear(ref, O, x, W.data(), b.data(), N, I, O);
    auto dx = upload(x), dW = upload(W), db = upload(b);
    auto y1 = poisoned(size_t(N * ld1)), y2 = poisoned(size_t(N * ld2));
    cuda::linear_rows_f32(y1.data(), ld1, dx.data(), dW.data(), db.data(), N, I, O, cuda::Epilogue::None, nullptr,
                          cuda::SecondOutput{from, y2.data(), ld2});
    const std::vector<float> g1 = download(y1), g2 = download(y2);
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t o = 0; o < ld1; ++o) {
            const float g = g1[size_t(n * ld1 + o)];
            if (o < from) EXPECT_NEAR(g, ref[size_t(n * O + o)], 1e-4 * (1 + std::fabs(ref[size_t(n * O + o)])));
            else EXPECT_TRUE(std::isnan(g)) << "first buffer, row " << n << " column " << o << " was written";
        }
        for (int64_t o = 0; o < ld2; ++o) {
            const float g = g2[size_t(n * ld2 + o)];
            if (o < O - from)
                EXPECT_NEAR(g, ref[size_t(n * O + from + o)], 1e-4 * (1 + std::fabs(ref[size_t(n * O + from + o)])));
            else EXPECT_TRUE(std::isnan(g)) << "second buffer, row " << n << " column " << o << " was written";
        }
    }
}

// Rows routed to different experts, the skip slot among them, with and without the combine's scale and the
// passthrough, and with the SwiGLU of [gate ‖ up] rows fused into the input staging (the down projection's form).
TEST_F(CudaOps, DecodeExpertLinearMatchesReference) {
    const int64_t E = 3, I = 24, O = 10, N = 5;
    const std::vector<int32_t> choice = {2, 3, 0, 2, 1}; // 3 = the skip slot
    const std::vector<float> h = random_vec(size_t(N * 2 * I), 4),
                             W = widened(to_bf16_bits(random_vec(size_t(E * O * I), 5)));
    const std::vector<float> p = random_vec(size_t(N), 6, 0.2, 0.5), skip = random_vec(size_t(N * O), 7);
    for (bool swiglu : {false, true}) {
        // The rows the weights multiply: x itself (the first N·I values of h), or silu(gate)·up of h's rows.
        std::vector<float> x(h.begin(), h.begin() + N * I);
        if (swiglu)
            for (int64_t n = 0; n < N; ++n)
                for (int64_t i = 0; i < I; ++i) {
                    const double g = h[size_t(n * 2 * I + i)], u = h[size_t(n * 2 * I + I + i)];
                    x[size_t(n * I + i)] = float(g / (1.0 + std::exp(-g)) * u);
                }
        for (bool bf16 : {false, true})
            for (bool combine : {false, true}) {
                std::vector<float> ref(size_t(N * O));
                for (int64_t n = 0; n < N; ++n) {
                    const int32_t e = choice[size_t(n)];
                    const std::vector<float> row =
                        operand_rows(std::vector<float>(x.begin() + n * I, x.begin() + (n + 1) * I), bf16);
                    std::vector<float> y(static_cast<size_t>(O));
                    if (e < E) ref_linear(y, O, row, W.data() + e * O * I, nullptr, 1, I, O);
                    for (int64_t o = 0; o < O; ++o) {
                        const float v = e < E ? y[size_t(o)] : (combine ? skip[size_t(n * O + o)] : 0.0f);
                        ref[size_t(n * O + o)] = (combine ? p[size_t(n)] : 1.0f) * v;
                    }
                }
                auto dx = upload(swiglu ? h : x), dp = upload(p), dskip = upload(skip);
                auto dchoice = upload(choice);
                auto dy = poisoned(size_t(N * O));
                cuda::ExpertRows r{dchoice.data(), combine ? dp.data() : nullptr, combine ? dskip.data() : nullptr, O,
                                   E, swiglu};
                if (bf16) {
                    auto dW = upload(to_bf16_bits(W));
                    cuda::expert_linear_bf16(dy.data(), O, dx.data(), dW.data(), r, N, I, O);
                } else {
                    auto dW = upload(W);
                    cuda::expert_linear_f32(dy.data(), O, dx.data(), dW.data(), r, N, I, O);
                }
                EXPECT_LT(rel_err(download(dy), ref), kFp32Tol)
                    << "bf16 " << bf16 << " combine " << combine << " swiglu " << swiglu;
            }
    }
}

// The residual parameters of ResidualNormAfter, random, and the same steps on the host in double: stream ←
// (y + hs_bias)·hs_scale + (stream + res_bias)·res_scale, rstd = 1/√(mean(stream²) + eps), normed = w·stream·rstd.
struct ResidualCase {
    int64_t N, D;
    std::vector<float> hs_scale, hs_bias, res_scale, res_bias, w, stream;
    ResidualCase(int64_t n, int64_t d, uint64_t seed)
        : N(n), D(d), hs_scale(random_vec(size_t(d), seed, 0.5, 1.0)), hs_bias(random_vec(size_t(d), seed + 1, 0.1)),
          res_scale(random_vec(size_t(d), seed + 2, 0.5, 1.0)), res_bias(random_vec(size_t(d), seed + 3, 0.1)),
          w(random_vec(size_t(d), seed + 4, 0.2, 1.0)), stream(random_vec(size_t(n * d), seed + 5)) {}

    struct Result {
        std::vector<float> stream, normed, rstd;
    };
    Result reference(const std::vector<float> &y, float eps) const {
        Result r{stream, std::vector<float>(stream.size()), std::vector<float>(size_t(N))};
        for (int64_t n = 0; n < N; ++n) {
            double ss = 0;
            for (int64_t i = 0; i < D; ++i) {
                const size_t at = size_t(n * D + i);
                const double v = (double(y[at]) + hs_bias[size_t(i)]) * hs_scale[size_t(i)] +
                                 (double(stream[at]) + res_bias[size_t(i)]) * res_scale[size_t(i)];
                r.stream[at] = float(v), ss += v * v;
            }
            const double rs = 1.0 / std::sqrt(ss / double(D) + eps);
            r.rstd[size_t(n)] = float(rs);
            for (int64_t i = 0; i < D; ++i)
                r.normed[size_t(n * D + i)] = float(w[size_t(i)] * double(r.stream[size_t(n * D + i)]) * rs);
        }
        return r;
    }

    // On the device: the parameters, the stream uploaded afresh, the normed rows and rstd poisoned.
    struct Device {
        cuda::DeviceArray<float> hs_scale, hs_bias, res_scale, res_bias, w, stream, normed, rstd;
        cuda::ResidualNormAfter after(float eps, unsigned *counters) {
            return {stream.data(), normed.data(), rstd.data(), hs_scale.data(), hs_bias.data(), res_scale.data(),
                    res_bias.data(), w.data(),      eps,         counters};
        }
    };
    Device upload_all() const {
        return {upload(hs_scale), upload(hs_bias), upload(res_scale), upload(res_bias), upload(w), upload(stream),
                poisoned(stream.size()), poisoned(size_t(N))};
    }
};

void expect_residual(ResidualCase::Device &d, const ResidualCase::Result &ref, const std::string &ctx) {
    EXPECT_LT(rel_err(download(d.stream), ref.stream), kFp32Tol) << ctx;
    EXPECT_LT(rel_err(download(d.normed), ref.normed), kFp32Tol) << ctx;
    EXPECT_LT(rel_err(download(d.rstd), ref.rstd), kFp32Tol) << ctx;
}

// A linear whose last block does the residual scaling and norm of its rows (the decoder's output projection):
// one pass and several (each pass's last block its own rows), a row not stepped (zeros into the residual), D past
// the block's 256 threads, fp32 and bf16 weights. Run twice on one counter array, the second from the same
// inputs: the same bits, so the counters were as the first launch found them.
TEST_F(CudaOps, DecodeLinearResidualNormMatchesReference) {
    const float eps = 1e-6f;
    for (bool bf16 : {false, true})
        for (int64_t D : {40, 300})
            for (int64_t N : {1, 11}) {
                const int64_t I = N == 1 ? 2048 : 64;
                const ResidualCase rc(N, D, 70);
                std::vector<float> x = random_vec(size_t(N * I), 71), W = random_vec(size_t(D * I), 72, 0.1);
                const std::vector<float> b = random_vec(size_t(D), 73);
                const std::vector<uint16_t> Wb = to_bf16_bits(W);
                if (bf16) W = widened(Wb);
                std::vector<int32_t> active(size_t(N), 1);
                if (N > 1) active[2] = active[9] = 0;
                std::vector<float> y(size_t(N * D));
                ref_linear(y, D, operand_rows(x, bf16), W.data(), b.data(), N, I, D);
                for (int64_t n = 0; n < N; ++n)
                    if (!active[size_t(n)]) std::fill(y.begin() + n * D, y.begin() + (n + 1) * D, 0.0f);
                const ResidualCase::Result ref = rc.reference(y, eps);
                auto dx = upload(x), db = upload(b), dW32 = upload(W);
                auto dW16 = upload(Wb);
                auto dact = upload(active);
                auto counters = zeroed_counters(1);
                std::vector<float> first;
                for (int run = 0; run < 2; ++run) {
                    const std::string ctx = fmt::format("bf16 {} D={} N={} run {}", bf16, D, N, run);
                    ResidualCase::Device d = rc.upload_all();
                    auto dy = poisoned(size_t(N * D));
                    const cuda::ResidualNormAfter after = d.after(eps, counters.data());
                    if (bf16)
                        cuda::linear_rows_bf16(dy.data(), D, dx.data(), dW16.data(), db.data(), N, I, D,
                                               cuda::Epilogue::None, dact.data(), {}, after);
                    else
                        cuda::linear_rows_f32(dy.data(), D, dx.data(), dW32.data(), db.data(), N, I, D,
                                              cuda::Epilogue::None, dact.data(), {}, after);
                    EXPECT_LT(rel_err(download(dy), y), kFp32Tol) << ctx;
                    expect_residual(d, ref, ctx);
                    expect_counters_zero(counters, ctx);
                    if (run == 0) first = download(d.normed);
                    else EXPECT_EQ(download(d.normed), first) << ctx;
                }
            }
}

// The routed form with the residual norm after it, as the decoder's down projection runs it: SwiGLU rows in,
// the combine's scale, the skip passthrough reading the very rows the norm then overwrites (each row's other blocks
// have read them first), a row per expert, the skip slot among them.
TEST_F(CudaOps, DecodeExpertLinearResidualNormMatchesReference) {
    const int64_t E = 3, I = 24, D = 300, N = 5;
    const float eps = 1e-5f;
    const std::vector<int32_t> choice = {2, 3, 0, 2, 1}; // 3 = the skip slot
    const std::vector<float> h = random_vec(size_t(N * 2 * I), 80), W = random_vec(size_t(E * D * I), 81, 0.3);
    const std::vector<float> p = random_vec(size_t(N), 82, 0.2, 0.5), xn = random_vec(size_t(N * D), 83);
    const ResidualCase rc(N, D, 84);
    std::vector<float> y(size_t(N * D));
    for (int64_t n = 0; n < N; ++n) {
        const int32_t e = choice[size_t(n)];
        std::vector<float> row(static_cast<size_t>(I)), out(static_cast<size_t>(D));
        for (int64_t i = 0; i < I; ++i) {
            const double g = h[size_t(n * 2 * I + i)], u = h[size_t(n * 2 * I + I + i)];
            row[size_t(i)] = float(g / (1.0 + std::exp(-g)) * u);
        }
        if (e < E) ref_linear(out, D, row, W.data() + e * D * I, nullptr, 1, I, D);
        for (int64_t o = 0; o < D; ++o)
            y[size_t(n * D + o)] = p[size_t(n)] * (e < E ? out[size_t(o)] : xn[size_t(n * D + o)]);
    }
    const ResidualCase::Result ref = rc.reference(y, eps);
    ResidualCase::Device d = rc.upload_all();
    d.normed = upload(xn); // the normed rows are the passthrough's input, as in the decoder
    auto dh = upload(h), dW = upload(W), dp = upload(p);
    auto dchoice = upload(choice);
    auto dy = poisoned(size_t(N * D));
    auto counters = zeroed_counters(size_t(N));
    cuda::expert_linear_f32(dy.data(), D, dh.data(), dW.data(),
                            cuda::ExpertRows{dchoice.data(), dp.data(), d.normed.data(), D, E, true}, N, I, D,
                            d.after(eps, counters.data()));
    EXPECT_LT(rel_err(download(dy), y), kFp32Tol);
    expect_residual(d, ref, "routed");
    expect_counters_zero(counters, "routed");
}

// New queries at positions p0 … p0+n−1 over a cache whose rows past p0+n hold NaN (never read): keys in one piece
// and split several ways (more pieces than keys: empty ones), full causal and a sliding window, and pieces longer
// than one tile of kAttnMaxChunk keys (the online softmax across tiles). An fp32 cache, and a bf16 one against the
// CPU's attention over a bf16 cache (queries and probabilities rounded: ops/cpu/attention.h). Head sizes whose rows
// the kernel reads in 16-byte chunks (16, 128, 256; 96: rows of 12 or 24 chunks, which do not divide the block, so
// some threads sit out the values) and in pairs (6, and 16 with the caches two elements off 16-byte alignment).
template <class T> void expect_decode_attention_matches_cpu() {
    const int64_t nq = 4, nkv = 2, max_len = 310;
    struct Case {
        int64_t p0, n, window, splits, hd = 16, offset = 0;
    };
    std::vector<Case> cases = {{300, 2, 200, 40},      {13, 1, 0, 40},        {290, 3, 0, 2},
                               {13, 3, 0, 3, 6},       {290, 2, 5, 2, 6},     {200, 2, 0, 3, 128},
                               {130, 1, 50, 1, 128},   {140, 1, 0, 2, 256},   {150, 2, 0, 2, 96},
                               {140, 2, 0, 3, 16, 2}};
    for (int64_t p0 : {0, 13, 300})
        for (int64_t n : {1, 3})
            for (int64_t window : {0, 5})
                for (int64_t splits : {1, 3})
                    if (p0 + n <= max_len) cases.push_back({p0, n, window, splits});
    for (const Case &cs : cases) {
        const int64_t hd = cs.hd, Dk = nkv * hd, Dq = nq * hd;
        const cpu::AttnShape s{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), cs.window};
        const std::vector<float> q = random_vec(size_t(cs.n * Dq), 8);
        std::vector<float> k = values_of(cache_of<T>(random_vec(size_t(max_len * Dk), 9))),
                           v = values_of(cache_of<T>(random_vec(size_t(max_len * Dk), 10)));
        std::vector<float> ref(size_t(cs.n * Dq));
        cpu_cached_attention<T>(ref.data(), q.data(), k, v, cs.n, cs.p0, s);
        for (size_t i = size_t((cs.p0 + cs.n) * Dk); i < k.size(); ++i)
            k[i] = v[i] = std::numeric_limits<float>::quiet_NaN();
        std::vector<T> kc = cache_of<T>(k), vc = cache_of<T>(v);
        kc.insert(kc.begin(), size_t(cs.offset), T{}), vc.insert(vc.begin(), size_t(cs.offset), T{});
        auto dq = upload(q), dk = upload(kc), dv = upload(vc);
        auto dlen = upload(std::vector<int32_t>{int32_t(cs.p0)});
        auto out = poisoned(size_t(cs.n * Dq)), po = poisoned(size_t(cs.splits * cs.n * Dq)),
             pml = poisoned(size_t(cs.splits * cs.n * nq * 2));
        auto counters = zeroed_counters(size_t(cs.n * nq));
        const std::string ctx = fmt::format("{} p0={} n={} window={} splits={} hd={} offset={}", cache_name<T>(),
                                            cs.p0, cs.n, cs.window, cs.splits, hd, cs.offset);
        cuda::attention_decode(out.data(), po.data(), pml.data(), dq.data(), dk.data() + cs.offset,
                               dv.data() + cs.offset, dlen.data(), cs.n, s, cs.splits, counters.data());
        expect_attention_close<T>(download(out), ref, hd, ctx);
        expect_counters_zero(counters, ctx);
    }
}
TEST_F(CudaOps, DecodeAttentionMatchesCpu) {
    expect_decode_attention_matches_cpu<float>();
    expect_decode_attention_matches_cpu<uint16_t>();
}

TEST_F(CudaOps, DecodeCacheHelpers) {
    const int64_t W = 5, n = 2;
    auto kc = poisoned(size_t(6 * W)), vc = poisoned(size_t(6 * W));
    const std::vector<float> k = random_vec(size_t(n * W), 11), v = random_vec(size_t(n * W), 14);
    auto dk = upload(k), dv = upload(v);
    auto len = upload(std::vector<int32_t>{3});
    cuda::append_kv(kc.data(), vc.data(), dk.data(), dv.data(), len.data(), n, W);
    cuda::DeviceArray<int32_t> pos(static_cast<size_t>(n));
    cuda::decode_positions(pos.data(), len.data(), n);
    cuda::advance_length(len.data(), n);
    const std::vector<float> gk = download(kc), gv = download(vc);
    for (int64_t i = 0; i < n * W; ++i) {
        EXPECT_EQ(gk[size_t(3 * W + i)], k[size_t(i)]);
        EXPECT_EQ(gv[size_t(3 * W + i)], v[size_t(i)]);
    }
    for (int64_t i = 0; i < 3 * W; ++i) EXPECT_TRUE(std::isnan(gk[size_t(i)]) && std::isnan(gv[size_t(i)]));
    EXPECT_EQ(download(pos), (std::vector<int32_t>{3, 4}));
    EXPECT_EQ(download(len), (std::vector<int32_t>{5}));
    // The delayed values: the cache's row 0 takes the state, row i row i−1's own, the state row n−1's; the current
    // half and k as given.
    const int64_t Dv = 3, rows = 3;
    const std::vector<float> kk = random_vec(size_t(rows * 2 * Dv), 15), vv = random_vec(size_t(rows * 2 * Dv), 12),
                             state = random_vec(size_t(Dv), 13);
    auto dkk = upload(kk), dvv = upload(vv), dstate = upload(state), kc2 = poisoned(size_t(6 * 2 * Dv)),
         vc2 = poisoned(size_t(6 * 2 * Dv));
    auto len2 = upload(std::vector<int32_t>{2});
    cuda::append_kv(kc2.data(), vc2.data(), dkk.data(), dvv.data(), len2.data(), rows, 2 * Dv, dstate.data(), Dv);
    const std::vector<float> gk2 = download(kc2), gv2 = download(vc2), new_state = download(dstate);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t d = 0; d < Dv; ++d) {
            const size_t at = size_t((2 + r) * 2 * Dv + d), own = size_t(r * 2 * Dv + d);
            EXPECT_EQ(gk2[at], kk[own]);
            EXPECT_EQ(gk2[at + size_t(Dv)], kk[own + size_t(Dv)]);
            EXPECT_EQ(gv2[at], vv[own]);
            EXPECT_EQ(gv2[at + size_t(Dv)], r == 0 ? state[size_t(d)] : vv[size_t((r - 1) * 2 * Dv + Dv + d)]);
        }
    for (int64_t d = 0; d < Dv; ++d) EXPECT_EQ(new_state[size_t(d)], vv[size_t((rows - 1) * 2 * Dv + Dv + d)]);
    EXPECT_TRUE(std::isnan(gv2[size_t(5 * 2 * Dv)])); // past the new rows: untouched
    // The conv state's move: the last `keep` of keep + shift rows to the front, in place (shift below and above
    // keep: overlapping and not).
    for (int64_t shift : {1, 3}) {
        const int64_t keep = 2, cols = 5;
        const std::vector<float> rows_in = random_vec(size_t((keep + shift) * cols), 18 + uint64_t(shift));
        auto buf = upload(rows_in);
        cuda::shift_rows_up(buf.data(), keep, shift, cols);
        const std::vector<float> moved = download(buf);
        for (int64_t i = 0; i < keep * cols; ++i) EXPECT_EQ(moved[size_t(i)], rows_in[size_t(shift * cols + i)]);
    }
}

// append_kv into a bf16 cache: each key and value rounded to nearest even (the delayed columns from the state as in
// fp32), the rows around untouched, the state kept in fp32.
TEST_F(CudaOps, DecodeAppendIntoBf16Cache) {
    const int64_t Dv = 3, W = 2 * Dv, rows = 3, at = 2, cap = 6;
    const std::vector<float> k = random_vec(size_t(rows * W), 15), v = random_vec(size_t(rows * W), 12),
                             state = random_vec(size_t(Dv), 13);
    auto dk = upload(k), dv = upload(v), dstate = upload(state);
    const std::vector<uint16_t> poison(size_t(cap * W), 0xFFFF); // bf16 NaN
    auto kc = upload(poison), vc = upload(poison);
    auto len = upload(std::vector<int32_t>{int32_t(at)});
    cuda::append_kv(kc.data(), vc.data(), dk.data(), dv.data(), len.data(), rows, W, dstate.data(), Dv);
    const std::vector<uint16_t> gk = download(kc), gv = download(vc);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t col = 0; col < W; ++col) {
            const size_t c = size_t((at + r) * W + col), own = size_t(r * W + col);
            const float value = col < Dv ? v[own] : r == 0 ? state[size_t(col - Dv)] : v[size_t((r - 1) * W + col)];
            EXPECT_EQ(gk[c], f32_to_bf16(k[own])) << "key row " << r << " column " << col;
            EXPECT_EQ(gv[c], f32_to_bf16(value)) << "value row " << r << " column " << col;
        }
    for (int64_t i = 0; i < cap * W; ++i) {
        if (i >= at * W && i < (at + rows) * W) continue; // the new rows
        EXPECT_EQ(gk[size_t(i)], 0xFFFF) << "key element " << i << " written";
        EXPECT_EQ(gv[size_t(i)], 0xFFFF) << "value element " << i << " written";
    }
    const std::vector<float> new_state = download(dstate);
    for (int64_t d = 0; d < Dv; ++d) EXPECT_EQ(new_state[size_t(d)], v[size_t((rows - 1) * W + Dv + d)]);
}

// The fused GELU epilogue (the router MLP's): the exact erf GELU of the biased output.
TEST_F(CudaOps, DecodeLinearGeluEpilogue) {
    const int64_t N = 2, I = 32, O = 9;
    const std::vector<float> x = random_vec(size_t(N * I), 15), W = random_vec(size_t(O * I), 16, 0.3),
                             b = random_vec(size_t(O), 17);
    std::vector<float> ref(size_t(N * O));
    ref_linear(ref, O, x, W.data(), b.data(), N, I, O);
    for (float &r : ref) r = float(0.5 * r * (1.0 + std::erf(double(r) / std::sqrt(2.0))));
    auto dx = upload(x), dW = upload(W), db = upload(b);
    auto dy = poisoned(size_t(N * O));
    cuda::linear_rows_f32(dy.data(), O, dx.data(), dW.data(), db.data(), N, I, O, cuda::Epilogue::Gelu);
    EXPECT_LT(rel_err(download(dy), ref), kFp32Tol);
}

// Attention with the KV append (attention_decode_slots), slots of lengths[s] and active[s]: slot s's query at position
// lengths[s] over its own cache, whose row lengths[s] (and every row past it) holds NaN — the new key and value are
// read from their rows, the delayed value columns from the slot's state, as the cache keeps them — against the CPU's
// one-sequence attention over the cache with the new row in place; then the append and the conv-state move.
template <class T>
void expect_slot_attention(const std::vector<int32_t> &lengths, const std::vector<int32_t> &active, int64_t max_len) {
    const int64_t S = int64_t(lengths.size());
    const int64_t nq = 4, nkv = 2, hd = 16, W = nkv * hd, Dq = nq * hd, ldq = 3 * Dq, ldk = 2 * W, Dv = hd;
    const cpu::AttnShape as{nq, nkv, hd, 0.25f, 3};
    const std::vector<float> q = random_vec(size_t(S * ldq), 55), k = random_vec(size_t(S * ldk), 51),
                             v = random_vec(size_t(S * W), 52), state = random_vec(size_t(S * Dv), 53);
    std::vector<float> kk = values_of(cache_of<T>(random_vec(size_t(S * max_len * W), 56))),
                       vv = values_of(cache_of<T>(random_vec(size_t(S * max_len * W), 57)));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t sl = 0; sl < S; ++sl)
        for (int64_t t = lengths[size_t(sl)]; t < max_len; ++t)
            for (int64_t col = 0; col < W; ++col) {
                const size_t at = size_t((sl * max_len + t) * W + col);
                kk[at] = vv[at] = nan;
            }
    // The new row of each slot as the cache keeps it: k, the current value columns, then the state's delayed ones.
    auto new_k = [&](int64_t sl, int64_t col) { return kept<T>(k[size_t(sl * ldk + col)]); };
    auto new_v = [&](int64_t sl, int64_t col) {
        return kept<T>(col < W - Dv ? v[size_t(sl * W + col)] : state[size_t(sl * Dv + col - (W - Dv))]);
    };
    // The conv-state move per slot with it (regions of 4 rows of 5 columns, keep 2), inactive slot 1 untouched.
    const int64_t cols = 5;
    const std::vector<float> rows_in = random_vec(size_t(S * 4 * cols), 54);
    auto dq = upload(q), dk = upload(k), dv = upload(v), dstate = upload(state);
    auto dkk = upload(cache_of<T>(kk)), dvv = upload(cache_of<T>(vv));
    auto dlen = upload(lengths), dact = upload(active);
    auto buf = upload(rows_in);
    auto out = poisoned(size_t(S * Dq)), po = poisoned(size_t(2 * S * Dq)), pml = poisoned(size_t(2 * S * nq * 2));
    auto counters = zeroed_counters(size_t(S * (nq + 1)));
    cuda::attention_decode_slots(out.data(), po.data(), pml.data(), dq.data(), ldq, dlen.data(), dact.data(), S,
                                 max_len, as, 2, counters.data(),
                                 cuda::KvAppendT<T>{dkk.data(), dvv.data(), dk.data(), ldk, dv.data(), dstate.data(),
                                                    Dv, cuda::ConvStateMove{buf.data(), 2, cols, 4}});
    expect_counters_zero(counters, cache_name<T>());
    const std::vector<float> got = download(out), gk = values_of(download(dkk)), gv = values_of(download(dvv)),
                             gs = download(dstate);
    for (int64_t sl = 0; sl < S; ++sl) {
        std::vector<float> ref(static_cast<size_t>(Dq), 0.0f);
        const int64_t p = lengths[size_t(sl)];
        if (active[size_t(sl)]) {
            std::vector<float> kc(kk.begin() + sl * max_len * W, kk.begin() + (sl + 1) * max_len * W),
                vc(vv.begin() + sl * max_len * W, vv.begin() + (sl + 1) * max_len * W);
            for (int64_t col = 0; col < W; ++col)
                kc[size_t(p * W + col)] = new_k(sl, col), vc[size_t(p * W + col)] = new_v(sl, col);
            cpu_cached_attention<T>(ref.data(), q.data() + sl * ldq, kc, vc, 1, p, as);
        }
        expect_attention_close<T>(std::vector<float>(got.begin() + sl * Dq, got.begin() + (sl + 1) * Dq), ref, hd,
                                  fmt::format("{} slot {}", cache_name<T>(), sl));
        // The append: the new row at lengths[s] of an active slot's cache; an inactive slot's row keeps its NaN.
        for (int64_t col = 0; col < W; ++col) {
            const size_t at = size_t((sl * max_len + p) * W + col);
            if (!active[size_t(sl)]) {
                EXPECT_TRUE(std::isnan(gk[at]) && std::isnan(gv[at]))
                    << cache_name<T>() << " inactive slot " << sl << " written";
                continue;
            }
            EXPECT_EQ(gk[at], new_k(sl, col)) << cache_name<T>();
            EXPECT_EQ(gv[at], new_v(sl, col)) << cache_name<T>();
        }
        for (int64_t d = 0; d < Dv; ++d) // the state takes this token's delayed projection
            EXPECT_EQ(gs[size_t(sl * Dv + d)],
                      active[size_t(sl)] ? v[size_t(sl * W + W - Dv + d)] : state[size_t(sl * Dv + d)]);
    }
    const std::vector<float> moved = download(buf);
    for (int64_t sl = 0; sl < S; ++sl)
        for (int64_t r = 0; r < 4; ++r)
            for (int64_t col = 0; col < cols; ++col)
                EXPECT_EQ(moved[size_t((sl * 4 + r) * cols + col)],
                          rows_in[size_t((sl * 4 + r + (active[size_t(sl)] && r < 2 ? 1 : 0)) * cols + col)])
                    << fmt::format("{} slot {} row {} column {}", cache_name<T>(), sl, r, col);
}

// The slot forms (one new token per slot; inactive slots change nothing): positions, lengths, the conv-state move,
// the KV append with the delayed values, attention over each slot's own cache (inactive rows: zeros), row argmax.
TEST_F(CudaOps, DecodeSlotHelpers) {
    const int64_t S = 3, max_len = 6;
    const std::vector<int32_t> lengths = {2, 0, 4}, active = {1, 0, 1};
    auto dlen = upload(lengths), dact = upload(active);
    cuda::DeviceArray<int32_t> pos(static_cast<size_t>(S * 3));
    cuda::decode_positions(pos.data(), dlen.data(), 3, -1, S);
    EXPECT_EQ(download(pos), (std::vector<int32_t>{1, 2, 3, -1, 0, 1, 3, 4, 5}));
    expect_slot_attention<float>(lengths, active, max_len);
    expect_slot_attention<uint16_t>(lengths, active, max_len);
    auto counters = zeroed_counters(size_t(S));
    // A linear over the slots' rows: the inactive row gets zeros, the others x·Wᵀ + b.
    {
        const int64_t In = 24, O = 10;
        const std::vector<float> lx = random_vec(size_t(S * In), 59), lw = random_vec(size_t(O * In), 60),
                                 lb = random_vec(size_t(O), 61);
        std::vector<float> ref(size_t(S * O));
        ref_linear(ref, O, lx, lw.data(), lb.data(), S, In, O);
        for (int64_t o = 0; o < O; ++o) ref[size_t(1 * O + o)] = 0.0f;
        auto dlx = upload(lx), dlw = upload(lw), dlb = upload(lb);
        auto dy = poisoned(size_t(S * O));
        cuda::linear_rows_f32(dy.data(), O, dlx.data(), dlw.data(), dlb.data(), S, In, O, cuda::Epilogue::None,
                              dact.data());
        EXPECT_LT(rel_err(download(dy), ref), kFp32Tol);
    }
    // Lengths advance for the active slots only; the argmax of each row.
    cuda::advance_length(dlen.data(), 1, S, dact.data());
    EXPECT_EQ(download(dlen), (std::vector<int32_t>{3, 0, 5}));
    const std::vector<float> x = random_vec(size_t(S * 700), 58);
    auto dx = upload(x);
    cuda::DeviceArray<int32_t> best(static_cast<size_t>(S)), part_i(static_cast<size_t>(S * cuda::kArgmaxPartials));
    cuda::DeviceArray<float> part_v(static_cast<size_t>(S * cuda::kArgmaxPartials));
    cuda::argmax(best.data(), part_v.data(), part_i.data(), dx.data(), 700, S, counters.data());
    expect_counters_zero(counters, "argmax over slots");
    const std::vector<int32_t> gb = download(best);
    for (int64_t r = 0; r < S; ++r)
        EXPECT_EQ(gb[size_t(r)], int32_t(std::max_element(x.begin() + r * 700, x.begin() + (r + 1) * 700) -
                                         (x.begin() + r * 700)))
            << "row " << r;
}

// The device argmax against the host's first maximum: one element, a block's worth, several elements per thread,
// ties inside one thread, across threads and across blocks (the lowest index wins), NaNs (never win), all -inf.
TEST_F(CudaOps, DecodeArgmaxIsTheFirstMaximum) {
    auto host_argmax = [](const std::vector<float> &x) {
        int32_t best = 0;
        for (size_t i = 0; i < x.size(); ++i)
            if (x[i] > x[size_t(best)] || std::isnan(x[size_t(best)])) best = int32_t(i);
        return best;
    };
    cuda::DeviceArray<int32_t> out(1), part_i(static_cast<size_t>(cuda::kArgmaxPartials));
    cuda::DeviceArray<float> part_v(static_cast<size_t>(cuda::kArgmaxPartials));
    auto counters = zeroed_counters(1); // one array for every case: each launch leaves it zero for the next
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    for (int64_t n : {1, 300, 40000}) {
        const std::vector<float> base = random_vec(size_t(n), 31 + uint64_t(n));
        std::vector<std::vector<float>> cases = {base};
        if (n > 1) {
            std::vector<float> last = base;
            last.back() = 10.0f; // the maximum at the end
            cases.push_back(last);
            std::vector<float> nans = base;
            for (size_t i = 0; i < nans.size(); i += 7) nans[i] = nan;
            cases.push_back(nans);
            cases.push_back(std::vector<float>(size_t(n), -inf));
        }
        if (n > 2 * cuda::kArgmaxPartials * 256) { // ties: the same thread, neighbouring threads, different blocks
            for (int64_t stride : {int64_t(cuda::kArgmaxPartials) * 256, int64_t(1), int64_t(256), int64_t(9001)}) {
                std::vector<float> ties = base;
                ties[size_t(n - 1)] = 5.0f, ties[size_t(n - 1 - stride)] = 5.0f;
                cases.push_back(ties);
            }
        }
        for (size_t k = 0; k < cases.size(); ++k) {
            auto dx = upload(cases[k]);
            cuda::argmax(out.data(), part_v.data(), part_i.data(), dx.data(), n, 1, counters.data());
            EXPECT_EQ(download(out)[0], host_argmax(cases[k])) << fmt::format("n={} case {}", n, k);
        }
    }
}

// The router in one kernel against the CPU ops in turn (eda_forward, rmsnorm_forward, linear + gelu_forward twice,
// the output linear, router_select_forward): R = 40 leaves lanes idle, with and without the previous layer's EDA
// state, fp32 and bf16 matrices (the reference on the same bf16 values, each linear's input rounded to bf16).
TEST_F(CudaOps, DecodeRouterMatchesCpuChain) {
    const int64_t n = 3, R = 40, K = 5;
    const float eps = 1e-6f;
    const std::vector<float> h1 = random_vec(size_t(n * R), 40), prev = random_vec(size_t(n * R), 41),
                             scale = random_vec(size_t(R), 42), norm_w = random_vec(size_t(R), 43, 0.2, 1.0),
                             fc1_b = random_vec(size_t(R), 44, 0.1), fc2_b = random_vec(size_t(R), 45, 0.1),
                             bias = random_vec(size_t(K), 46, 0.05);
    const std::vector<uint16_t> fc1_16 = to_bf16_bits(random_vec(size_t(R * R), 47, 0.3)),
                                fc2_16 = to_bf16_bits(random_vec(size_t(R * R), 48, 0.3)),
                                out_16 = to_bf16_bits(random_vec(size_t(K * R), 49, 0.5));
    const std::vector<float> fc1 = widened(fc1_16), fc2 = widened(fc2_16), out = widened(out_16);
    struct Routed {
        std::vector<float> rho, probs, p_sel;
        std::vector<int32_t> choice;
    };
    for (bool with_prev : {false, true}) {
        auto reference = [&](bool bf16) {
            Routed r{std::vector<float>(size_t(n * R)), std::vector<float>(size_t(n * K)),
                     std::vector<float>(size_t(n)), std::vector<int32_t>(size_t(n))};
            std::vector<float> rn(static_cast<size_t>(n * R)), rstd(static_cast<size_t>(n)),
                a1(static_cast<size_t>(n * R)), a2(static_cast<size_t>(n * R)), logits(static_cast<size_t>(n * K));
            cpu::eda_forward(r.rho.data(), h1.data(), with_prev ? scale.data() : nullptr,
                             with_prev ? prev.data() : nullptr, n, R);
            cpu::rmsnorm_forward(rn.data(), rstd.data(), r.rho.data(), norm_w.data(), n, R, eps);
            ref_linear(a1, R, operand_rows(rn, bf16), fc1.data(), fc1_b.data(), n, R, R);
            cpu::gelu_forward(a1.data(), a1.data(), n * R);
            ref_linear(a2, R, operand_rows(a1, bf16), fc2.data(), fc2_b.data(), n, R, R);
            cpu::gelu_forward(a2.data(), a2.data(), n * R);
            ref_linear(logits, K, operand_rows(a2, bf16), out.data(), nullptr, n, R, K);
            cpu::router_select_forward(r.probs.data(), r.choice.data(), r.p_sel.data(), logits.data(), bias.data(), n,
                                       K);
            return r;
        };
        auto dh1 = upload(h1), dprev = upload(prev), dscale = upload(scale), dnorm = upload(norm_w),
             db1 = upload(fc1_b), db2 = upload(fc2_b), dbias = upload(bias);
        auto check = [&](auto fc1_d, auto fc2_d, auto out_d, const char *what) {
            using T = std::remove_cv_t<std::remove_pointer_t<decltype(fc1_d.data())>>;
            const Routed ref = reference(std::is_same_v<T, uint16_t>);
            auto drho = poisoned(size_t(n * R)), dprobs = poisoned(size_t(n * K)), dpsel = poisoned(size_t(n));
            cuda::DeviceArray<int32_t> dchoice(static_cast<size_t>(n));
            cuda::router_decode(cuda::RouterDecode<T>{drho.data(), dprobs.data(), dchoice.data(), dpsel.data(),
                                                      dh1.data(), with_prev ? dscale.data() : nullptr,
                                                      with_prev ? dprev.data() : nullptr, dnorm.data(), fc1_d.data(),
                                                      db1.data(), fc2_d.data(), db2.data(), out_d.data(), dbias.data(),
                                                      R, K, eps},
                                n);
            const std::string ctx = fmt::format("{} weights, previous state {}", what, with_prev);
            EXPECT_LT(rel_err(download(drho), ref.rho), kFp32Tol) << ctx;
            EXPECT_LT(rel_err(download(dprobs), ref.probs), kFp32Tol) << ctx;
            EXPECT_LT(rel_err(download(dpsel), ref.p_sel), kFp32Tol) << ctx;
            EXPECT_EQ(download(dchoice), ref.choice) << ctx;
        };
        check(upload(fc1), upload(fc2), upload(out), "fp32");
        check(upload(fc1_16), upload(fc2_16), upload(out_16), "bf16");
    }
}

// The bits of a float vector (NaN poison included), for bit-for-bit comparisons.
std::vector<uint32_t> bits_of(const std::vector<float> &v) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
    return b;
}

// The down projection with the router in its last block (router_down_decode) against the two kernels it replaces
// (linear_rows, then router_decode, itself checked against the CPU above), bit for bit: one pass and two (each
// pass's last block routes its own rows), rows not stepped (zero h1, the skip slot), x rows needing more shared
// memory than the router and fewer; fp32 and bf16 matrices.
TEST_F(CudaOps, DecodeRouterDownFusedEqualsTwoKernels) {
    const int64_t R = 40, K = 5;
    const float eps = 1e-6f;
    for (int64_t n : {3, 11})
        for (int64_t I : {24, 2048}) {
            const std::vector<float> x = random_vec(size_t(n * I), 90), Wd = random_vec(size_t(R * I), 91, 0.1),
                                     bd = random_vec(size_t(R), 92), prev = random_vec(size_t(n * R), 93),
                                     scale = random_vec(size_t(R), 94), norm_w = random_vec(size_t(R), 95, 0.2, 1.0),
                                     fc1_b = random_vec(size_t(R), 96, 0.1), fc2_b = random_vec(size_t(R), 97, 0.1),
                                     bias = random_vec(size_t(K), 98, 0.05), fc1 = random_vec(size_t(R * R), 99, 0.3),
                                     fc2 = random_vec(size_t(R * R), 100, 0.3), out = random_vec(size_t(K * R), 101);
            std::vector<int32_t> active(size_t(n), 1);
            active[1] = 0;
            if (n > 8) active[8] = 0;
            auto dx = upload(x), dbd = upload(bd), dprev = upload(prev), dscale = upload(scale),
                 dnorm = upload(norm_w), db1 = upload(fc1_b), db2 = upload(fc2_b), dbias = upload(bias);
            auto dact = upload(active);
            auto counters = zeroed_counters(1);
            auto run = [&](auto Wd_d, auto fc1_d, auto fc2_d, auto out_d, bool fused) {
                using T = std::remove_cv_t<std::remove_pointer_t<decltype(fc1_d.data())>>;
                auto h1 = poisoned(size_t(n * R)), rho = poisoned(size_t(n * R)), probs = poisoned(size_t(n * K)),
                     psel = poisoned(size_t(n));
                cuda::DeviceArray<int32_t> choice(static_cast<size_t>(n));
                const cuda::RouterDecode<T> a{rho.data(),   probs.data(),  choice.data(), psel.data(), h1.data(),
                                              dscale.data(), dprev.data(), dnorm.data(),  fc1_d.data(), db1.data(),
                                              fc2_d.data(), db2.data(),    out_d.data(),  dbias.data(), R,
                                              K,            eps,           dact.data()};
                if (fused) {
                    cuda::router_down_decode(h1.data(), dx.data(), Wd_d.data(), dbd.data(), n, I, dact.data(), a,
                                             counters.data());
                } else {
                    if constexpr (std::is_same_v<T, uint16_t>)
                        cuda::linear_rows_bf16(h1.data(), R, dx.data(), Wd_d.data(), dbd.data(), n, I, R,
                                               cuda::Epilogue::None, dact.data());
                    else
                        cuda::linear_rows_f32(h1.data(), R, dx.data(), Wd_d.data(), dbd.data(), n, I, R,
                                              cuda::Epilogue::None, dact.data());
                    cuda::router_decode(a, n);
                }
                std::vector<uint32_t> all = bits_of(download(h1));
                for (const auto &part : {bits_of(download(rho)), bits_of(download(probs)), bits_of(download(psel))})
                    all.insert(all.end(), part.begin(), part.end());
                for (int32_t c : download(choice)) all.push_back(uint32_t(c));
                return all;
            };
            const std::string ctx = fmt::format("n={} I={}", n, I);
            EXPECT_EQ(run(upload(Wd), upload(fc1), upload(fc2), upload(out), true),
                      run(upload(Wd), upload(fc1), upload(fc2), upload(out), false))
                << "fp32 " << ctx;
            auto b16 = [](const std::vector<float> &v) { return upload(to_bf16_bits(v)); };
            EXPECT_EQ(run(b16(Wd), b16(fc1), b16(fc2), b16(out), true),
                      run(b16(Wd), b16(fc1), b16(fc2), b16(out), false))
                << "bf16 " << ctx;
            expect_counters_zero(counters, ctx);
        }
}

// ---- the decoder ----

// The tiny preset with a sliding-window layer, every optional bias, an untied head and the skip passthrough.
ZayaConfig decode_config(bool all_options) {
    ZayaConfig c = config_preset("tiny");
    c.layer_types[1] = LayerType::HybridSliding;
    c.sliding_window = 4;
    if (all_options) {
        c.attention_bias = true;
        c.tie_word_embeddings = false;
        c.lm_head_bias = true;
        c.skip_passthrough = true;
    }
    c.validate();
    return c;
}

// DecodeWeights over a Model's parameters: fp32 in place, or bf16 copies — in which case the model's matrices are
// rounded to bf16 in place too, so that the CPU reference computes with the very weights the GPU reads.
struct HostWeights {
    Mat embed, lm_head;
    std::vector<LayerMats> layers;
    std::vector<std::vector<uint16_t>> owned;

    HostWeights(Model &m, DType dtype) {
        const ZayaConfig &c = m.config;
        const int64_t D = c.hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
        auto get = [&](const std::string &name) {
            const ParamView *v = m.layout.find(name);
            const int64_t rows = v->shape[0], cols = int64_t(v->numel) / rows;
            float *p = m.param(name);
            if (dtype == DType::F32) return Mat{p, DType::F32, rows, cols};
            owned.emplace_back(v->numel);
            for (size_t i = 0; i < v->numel; ++i)
                owned.back()[i] = f32_to_bf16(p[i]), p[i] = bf16_to_f32(owned.back()[i]);
            return Mat{owned.back().data(), DType::BF16, rows, cols};
        };
        owned.reserve(1000);
        embed = get("model.embed_tokens.weight");
        lm_head = c.tie_word_embeddings ? embed : get("lm_head.weight");
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
            const std::string p = fmt::format("model.layers.{}.", l), qkv = p + "self_attn.qkv_proj.",
                              g = p + "mlp.gate.";
            LayerMats M;
            M.q_proj = get(qkv + "q_proj.weight"), M.k_proj = get(qkv + "k_proj.weight");
            M.v_cur = get(qkv + "v_proj_current.weight"), M.v_del = get(qkv + "v_proj_delayed.weight");
            M.o_proj = get(p + "self_attn.o_proj.weight"), M.router_down = get(g + "down_proj.weight");
            M.router_fc1 = get(g + "router_mlp.fc1.weight"), M.router_fc2 = get(g + "router_mlp.fc2.weight");
            M.router_out = get(g + "router_mlp.out_proj.weight");
            const Mat gu = get(p + "mlp.experts.gate_up_proj"), dn = get(p + "mlp.experts.down_proj");
            const size_t es = dtype_size(dtype);
            for (int64_t e = 0; e < E; ++e) { // [E, rows, cols]: E consecutive matrices
                M.gate_up.push_back(
                    Mat{static_cast<const uint8_t *>(gu.data) + size_t(e * 2 * I * D) * es, dtype, 2 * I, D});
                M.down.push_back(Mat{static_cast<const uint8_t *>(dn.data) + size_t(e * D * I) * es, dtype, D, I});
            }
            layers.push_back(std::move(M));
        }
    }
};

// Full-sequence logits [T, V] of the CPU model.
std::vector<float> cpu_logits(const Model &m, const std::vector<int32_t> &tokens) {
    const Batch batch = Batch::from_sequences({tokens});
    Activations acts = Activations::plan(m.config, batch.num_tokens(), 1, false, cpu_backend());
    model_forward(m, batch, acts);
    return std::vector<float>(acts.logits, acts.logits + batch.num_tokens() * m.config.vocab_size);
}

std::vector<int32_t> test_tokens(int64_t n, int64_t V) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    uint64_t x = 3;
    for (auto &v : t) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v = int32_t((x >> 33) % uint64_t(V));
    }
    return t;
}

// A prompt of 12 tokens in two prefill calls (7, then 5 more: a prefill that extends a sequence), then 3 single
// steps, past the sliding window (4), keys split 3 ways: the logits of each call's last token and of each step against
// the full-sequence logits at that position. GEMV passes take max_chunk = 2 rows; with prefill_chunk = 4 the first
// call runs GEMM passes of 4 and 3 rows, the second one of 4 and a GEMV pass of 1 (prefill_chunk 0: GEMV passes only).
// kv: the cache's element (unset: the decoder's default, bf16 for bf16 weights).
void expect_decoder_matches_cpu(bool all_options, DType dtype, double tol, int64_t prefill_chunk,
                                std::optional<DType> kv = std::nullopt) {
    Model m = Model::create(decode_config(all_options));
    model_init_random(m, 21);
    HostWeights hw(m, dtype);
    const ZayaConfig &c = m.config;
    const int64_t V = c.vocab_size, first = 7, prompt = 12, steps = 3;
    const std::vector<int32_t> tokens = test_tokens(prompt + steps, V);
    const std::vector<float> ref = cpu_logits(m, tokens);
    auto ref_row = [&](int64_t t) { return std::vector<float>(ref.begin() + t * V, ref.begin() + (t + 1) * V); };
    CudaDecoder dec(DecodeWeights{c, m.w, hw.embed, hw.lm_head, hw.layers},
                    CudaDecoder::Options{.max_len = 16,
                                         .max_chunk = 2,
                                         .prefill_chunk = prefill_chunk,
                                         .attn_splits = 3,
                                         .kv_dtype = kv});
    EXPECT_EQ(dec.kv_dtype(), kv.value_or(dtype)); // the default follows the weights
    std::vector<float> got(static_cast<size_t>(V));
    dec.prefill(std::span(tokens).first(size_t(first)), got.data());
    EXPECT_LT(rel_err(got, ref_row(first - 1)), tol) << "first prefill";
    dec.prefill(std::span(tokens).subspan(size_t(first), size_t(prompt - first)), got.data());
    EXPECT_LT(rel_err(got, ref_row(prompt - 1)), tol) << "second prefill";
    for (int64_t t = prompt; t < prompt + steps; ++t) {
        dec.step(tokens[size_t(t)], got.data());
        EXPECT_LT(rel_err(got, ref_row(t)), tol) << "step at position " << t;
    }
    EXPECT_EQ(dec.length(), prompt + steps);
    std::vector<int32_t> too_long(17, 1);
    dec.reset();
    EXPECT_THROW(dec.prefill(too_long, got.data()), Error);
}

// prefill_rows (a prompt's log-probabilities): every token's logits against the full-sequence ones, for a prompt
// then 3 more tokens: 9 in GEMV passes of 2 rows, or 100 in GEMM passes of up to 80 rows (the head's 64-row blocks:
// 64 + 16, then 20, then 3), f32 and bf16 weights. bf16 weights multiply rows rounded to bf16, the reference's fp32
// rows: ~4e-3 apart, and a router choice near a tie can go the other way (row 21 of 103 here, 3e-2); so for bf16
// nine rows in ten within 1e-2 and every one within 1e-1.
TEST_F(CudaOps, DecoderPrefillRowsMatchCpu) {
    for (const auto &[dtype, prefill_chunk, tol] : {std::tuple{DType::F32, int64_t(0), 1e-4},
                                                    std::tuple{DType::F32, int64_t(80), 1e-4},
                                                    std::tuple{DType::BF16, int64_t(80), 1e-2}}) {
        Model m = Model::create(decode_config(true));
        model_init_random(m, 23);
        HostWeights hw(m, dtype);
        const int64_t V = m.config.vocab_size, first = prefill_chunk > 0 ? 100 : 9, total = first + 3;
        const std::vector<int32_t> tokens = test_tokens(total, V);
        const std::vector<float> ref = cpu_logits(m, tokens);
        CudaDecoder dec(DecodeWeights{m.config, m.w, hw.embed, hw.lm_head, hw.layers},
                        CudaDecoder::Options{.max_len = 128, .max_chunk = 2, .prefill_chunk = prefill_chunk,
                                             .attn_splits = 3, .max_seqs = 2});
        std::vector<float> rows(static_cast<size_t>(total * V), std::nanf(""));
        dec.prefill_rows(1, std::span(tokens).first(size_t(first)), rows.data());
        dec.prefill_rows(1, std::span(tokens).subspan(size_t(first)), rows.data() + first * V);
        EXPECT_EQ(dec.length(1), total);
        int64_t within = 0;
        for (int64_t t = 0; t < total; ++t) {
            const std::vector<float> got(rows.begin() + t * V, rows.begin() + (t + 1) * V),
                want(ref.begin() + t * V, ref.begin() + (t + 1) * V);
            const double err = rel_err(got, want);
            within += err < tol;
            EXPECT_LT(err, dtype == DType::BF16 ? 1e-1 : tol)
                << "row " << t << ", " << dtype_name(dtype) << ", prefill chunk " << prefill_chunk;
        }
        EXPECT_GE(within, dtype == DType::BF16 ? total * 9 / 10 : total) << dtype_name(dtype);
    }
}

TEST_F(CudaOps, DecoderMatchesCpuF32) { expect_decoder_matches_cpu(false, DType::F32, 1e-4, 0); }
TEST_F(CudaOps, DecoderEveryOptionMatchesCpuF32) { expect_decoder_matches_cpu(true, DType::F32, 1e-4, 0); }
// bf16 weights on both sides (the reference's rounded the same), an fp32 cache: the GPU rounds the rows the weights
// multiply to bf16 (as the CPU decoder does by default, and transformers running a bf16 checkpoint; the reference
// here takes them in fp32), which moves these logits by 2e-3 to 3e-3.
TEST_F(CudaOps, DecoderMatchesCpuBf16) { expect_decoder_matches_cpu(true, DType::BF16, 1e-2, 0, DType::F32); }
// The bf16 cache (the default for bf16 weights) rounds every key and value too, which the CPU reference does not.
TEST_F(CudaOps, DecoderBf16CacheMatchesCpuBf16) { expect_decoder_matches_cpu(true, DType::BF16, 1e-2, 0); }
// Prefill in GEMM passes: fp32 GEMMs are true fp32; bf16 ones multiply the rows' bf16 copies (as the training
// forward does, and the GEMV passes), which the CPU reference's fp32 rows do not, hence the looser bound (with the
// bf16 cache).
TEST_F(CudaOps, DecoderGemmPrefillMatchesCpuF32) { expect_decoder_matches_cpu(true, DType::F32, 1e-4, 4); }
TEST_F(CudaOps, DecoderGemmPrefillMatchesCpuBf16) { expect_decoder_matches_cpu(true, DType::BF16, 1e-2, 4); }
// fp32 weights over a bf16 cache: the fp32 decode kernels reading bf16 keys and values, in GEMV and GEMM passes.
TEST_F(CudaOps, DecoderBf16CacheMatchesCpuF32) {
    expect_decoder_matches_cpu(true, DType::F32, 1e-2, 0, DType::BF16);
    expect_decoder_matches_cpu(true, DType::F32, 1e-2, 4, DType::BF16);
}

// A bf16 cache keeps each key and value rounded. A decode step reads its own new key and value before they are
// appended, rounded the same way, so its logits equal those of a prefill of the same tokens (which reads them from
// the cache) up to summation order: far inside the cache's rounding (~1e-3). fp32 weights, so that only the cache
// rounds; the prefills in GEMV passes and in GEMM passes.
TEST_F(CudaOps, DecoderBf16CacheStepsEqualPrefill) {
    Model m = Model::create(decode_config(true));
    model_init_random(m, 24);
    HostWeights hw(m, DType::F32);
    const DecodeWeights w{m.config, m.w, hw.embed, hw.lm_head, hw.layers};
    const int64_t V = m.config.vocab_size, prompt = 6, steps = 3;
    const std::vector<int32_t> tokens = test_tokens(prompt + steps, V);
    auto options = [](int64_t prefill_chunk) {
        return CudaDecoder::Options{.max_len = 12,
                                    .max_chunk = 2,
                                    .prefill_chunk = prefill_chunk,
                                    .attn_splits = 3,
                                    .kv_dtype = DType::BF16};
    };
    CudaDecoder stepped(w, options(0)), gemv(w, options(0)), gemm(w, options(4));
    std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
    stepped.prefill(std::span(tokens).first(size_t(prompt)), a.data());
    for (int64_t t = prompt; t < prompt + steps; ++t) {
        stepped.step(tokens[size_t(t)], a.data());
        for (CudaDecoder *whole : {&gemv, &gemm}) {
            whole->reset();
            whole->prefill(std::span(tokens).first(size_t(t + 1)), b.data());
            EXPECT_LT(rel_err(a, b), 1e-5) << "position " << t << (whole == &gemm ? ", GEMM prefill" : "");
        }
    }
}

TEST_F(CudaOps, DecoderRejectsBadOptions) {
    Model m = Model::create(decode_config(false));
    HostWeights hw(m, DType::F32);
    const DecodeWeights w{m.config, m.w, hw.embed, hw.lm_head, hw.layers};
    EXPECT_THROW(CudaDecoder(w, CudaDecoder::Options{.prefill_chunk = -1}), Error);
    EXPECT_THROW(CudaDecoder(w, CudaDecoder::Options{.prefill_chunk = 65536}), Error);
    EXPECT_THROW(CudaDecoder(w, CudaDecoder::Options{.max_chunk = 0}), Error);
    EXPECT_THROW(CudaDecoder(w, CudaDecoder::Options{.attn_splits = 0}), Error);
    EXPECT_THROW(CudaDecoder(w, CudaDecoder::Options{.kv_dtype = DType::F16}), Error);
}

// Decode steps replayed from a CUDA graph (in the emulator: recorded launches replayed in order) against eager
// steps: the same kernels in the same order, deterministic, so the logits are bit for bit the same.
TEST_F(CudaOps, DecoderGraphStepsEqualEager) {
    Model m = Model::create(decode_config(true));
    model_init_random(m, 22);
    HostWeights hw(m, DType::BF16);
    const DecodeWeights w{m.config, m.w, hw.embed, hw.lm_head, hw.layers};
    CudaDecoder graph(w, CudaDecoder::Options{.max_len = 12, .max_chunk = 4, .attn_splits = 3, .graph = true});
    CudaDecoder eager(w, CudaDecoder::Options{.max_len = 12, .max_chunk = 4, .attn_splits = 3, .graph = false});
    const std::vector<int32_t> tokens = test_tokens(8, m.config.vocab_size);
    const size_t V = size_t(m.config.vocab_size);
    std::vector<float> a(V), b(V);
    graph.prefill(std::span(tokens).first(5), a.data());
    eager.prefill(std::span(tokens).first(5), b.data());
    EXPECT_EQ(a, b);
    for (size_t t = 5; t < tokens.size(); ++t) {
        graph.step(tokens[t], a.data());
        eager.step(tokens[t], b.data());
        EXPECT_EQ(a, b) << "step at position " << t;
    }
    // The greedy steps (the argmax on the device, 4 bytes downloaded) pick the eager logits' first maximum, and
    // continue the same sequence.
    graph.reset(), eager.reset();
    const int32_t first = graph.prefill_greedy(std::span(tokens).first(5));
    eager.prefill(std::span(tokens).first(5), b.data());
    EXPECT_EQ(first, int32_t(std::max_element(b.begin(), b.end()) - b.begin()));
    int32_t next = first;
    for (int i = 0; i < 2; ++i) {
        const int32_t got = graph.step_greedy(next);
        eager.step(next, b.data());
        EXPECT_EQ(got, int32_t(std::max_element(b.begin(), b.end()) - b.begin())) << "greedy step " << i;
        next = got;
    }
    EXPECT_EQ(graph.length(), eager.length());
    // The step graph holds the fused layer's kernels, 7 per layer (the q‖k‖v projection, the CCA chain, attention
    // with the KV append, the output projection with the residual norm, the router's down projection with the
    // router, the gate-up and the down projection with the residual norm), and 8 around them: positions, the two
    // RoPE tables, the embedding, the first input norm, the length advance, the LM head and the argmax.
    const size_t step_kernels = size_t(7 * m.config.num_hidden_layers + 8);
    EXPECT_EQ(eager.step_kernels(), 0u);
    EXPECT_EQ(graph.step_kernels(), step_kernels);
    // The graph captured again with ordinary launches (no PDL) steps the same.
    EXPECT_TRUE(graph.dependent_launch()); // the emulated device is sm_90
    graph.set_dependent_launch(false);
    EXPECT_FALSE(graph.dependent_launch());
    EXPECT_EQ(graph.step_kernels(), 0u); // dropped, captured at the next step
    graph.reset(), eager.reset();
    graph.prefill(std::span(tokens).first(5), a.data());
    eager.prefill(std::span(tokens).first(5), b.data());
    for (size_t t = 5; t < tokens.size(); ++t) {
        graph.step(tokens[t], a.data());
        eager.step(tokens[t], b.data());
        EXPECT_EQ(a, b) << "step without PDL at position " << t;
    }
    EXPECT_EQ(graph.step_kernels(), step_kernels);
}

// Three sequences in three slots, prefilled at different times and stepped in different groups (two together, one
// alone, all three), every option on (sliding window past its width, biases, untied head, passthrough): each
// sequence's logits at each position against the CPU's full-sequence logits, and the greedy steps against the
// argmax of the same state's logits. A slot not stepped must keep its state exactly.
TEST_F(CudaOps, DecoderSlotsMatchCpuPerSequence) {
    Model m = Model::create(decode_config(true));
    model_init_random(m, 23);
    HostWeights hw(m, DType::F32);
    const ZayaConfig &c = m.config;
    const int64_t V = c.vocab_size;
    std::vector<std::vector<int32_t>> seqs = {test_tokens(11, V), test_tokens(7, V), test_tokens(8, V)};
    seqs[1][0] = 5, seqs[2][0] = 11; // three different sequences (test_tokens is deterministic)
    std::vector<std::vector<float>> ref;
    for (const auto &t : seqs) ref.push_back(cpu_logits(m, t));
    auto row = [&](size_t seq, int64_t pos) {
        return std::vector<float>(ref[seq].begin() + pos * V, ref[seq].begin() + (pos + 1) * V);
    };
    CudaDecoder dec(DecodeWeights{c, m.w, hw.embed, hw.lm_head, hw.layers},
                    CudaDecoder::Options{.max_len = 12, .max_chunk = 3, .attn_splits = 2, .max_seqs = 3});
    std::vector<float> one(static_cast<size_t>(V)), rows(static_cast<size_t>(3 * V));
    // Slot 0: 5 prompt tokens; slot 2: 3; then slots 0 and 2 step together twice.
    dec.prefill(0, std::span(seqs[0]).first(5), one.data());
    EXPECT_LT(rel_err(one, row(0, 4)), 1e-4);
    dec.prefill(2, std::span(seqs[2]).first(3), one.data());
    EXPECT_LT(rel_err(one, row(2, 2)), 1e-4);
    int64_t at[3] = {5, 0, 3};
    auto step = [&](std::vector<int> which) {
        std::vector<int32_t> toks(3, -1);
        for (int sl : which) toks[size_t(sl)] = seqs[size_t(sl)][size_t(at[sl])];
        std::fill(rows.begin(), rows.end(), std::numeric_limits<float>::quiet_NaN());
        dec.step(toks, rows.data(), nullptr);
        for (int sl : which) {
            const std::vector<float> got(rows.begin() + sl * V, rows.begin() + (sl + 1) * V);
            EXPECT_LT(rel_err(got, row(size_t(sl), at[sl])), 1e-4) << "slot " << sl << " position " << at[sl];
            ++at[sl];
        }
        for (int sl = 0; sl < 3; ++sl) EXPECT_EQ(dec.length(sl), at[sl]) << "slot " << sl;
    };
    step({0, 2});
    step({0, 2});
    step({0}); // slot 2 left as it is
    dec.prefill(1, std::span(seqs[1]).first(4), one.data()); // slot 1 joins
    EXPECT_LT(rel_err(one, row(1, 3)), 1e-4);
    at[1] = 4;
    step({0, 1, 2});
    step({1, 2});
    // Greedy: the same state's argmax (slot 0 and 1 step; compare with their reference rows' first maximum).
    std::vector<int32_t> toks = {seqs[0][size_t(at[0])], seqs[1][size_t(at[1])], -1}, best(3, -7);
    dec.step(toks, nullptr, best.data());
    for (int sl : {0, 1}) {
        const std::vector<float> r = row(size_t(sl), at[sl]);
        EXPECT_EQ(best[size_t(sl)], int32_t(std::max_element(r.begin(), r.end()) - r.begin())) << "slot " << sl;
        ++at[sl];
    }
    EXPECT_EQ(best[2], -7); // not stepped: not written
    // A reset slot starts a fresh sequence; the others go on.
    dec.reset(2);
    EXPECT_EQ(dec.length(2), 0);
    dec.prefill(2, std::span(seqs[2]).first(3), one.data());
    EXPECT_LT(rel_err(one, row(2, 2)), 1e-4);
    at[2] = 3;
    step({0, 2});
    std::vector<int32_t> bad = {1, -1, -1, -1};
    EXPECT_THROW(dec.step(bad, rows.data(), nullptr), Error); // four tokens for three slots
    EXPECT_THROW(dec.prefill(3, std::span(seqs[0]).first(1), one.data()), Error);
}

// Prompts arriving together (the engine's step): chunks of several slots prefilled in one GEMM pass, each over its
// own slot's state. Slots 1 and 3 hold 5 and 2 tokens first; then slots 3, 0 and 1 take 7, 12 and 1 tokens in one
// pass (slot 0's reaching past the sliding window), then steps of the three, then a greedy pass of two, then 38
// tokens in all, more than one pass takes (each chunk on its own). Each sequence's logits against the CPU's
// full-sequence rows (bf16: the rows rounded, as in DecoderGemmPrefillMatchesCpuBf16, and as in
// DecoderPrefillRowsMatchCpu a router choice near a tie may go the other way: 3e-2 at slot 1's position 20, so all
// chunks but one within 1e-2, every one within 1e-1); passes() counts the passes.
TEST_F(CudaOps, DecoderPrefillsSeveralSlotsInOnePass) {
    for (const auto &[dtype, tol] : {std::pair{DType::F32, 1e-4}, std::pair{DType::BF16, 1e-2}}) {
        SCOPED_TRACE(dtype_name(dtype));
        Model m = Model::create(decode_config(true));
        model_init_random(m, 25);
        HostWeights hw(m, dtype);
        const int64_t V = m.config.vocab_size;
        std::vector<std::vector<int32_t>> seqs;
        for (int i = 0; i < 4; ++i) {
            seqs.push_back(test_tokens(30, V));
            seqs.back()[0] = 3 + 5 * i; // four different sequences (test_tokens is deterministic)
        }
        std::vector<std::vector<float>> ref;
        for (const auto &t : seqs) ref.push_back(cpu_logits(m, t));
        auto row = [&](size_t seq, int64_t pos) {
            return std::vector<float>(ref[seq].begin() + pos * V, ref[seq].begin() + (pos + 1) * V);
        };
        CudaDecoder dec(DecodeWeights{m.config, m.w, hw.embed, hw.lm_head, hw.layers},
                        CudaDecoder::Options{.max_len = 40, .max_chunk = 2, .prefill_chunk = 32, .attn_splits = 3,
                                             .max_seqs = 4});
        int64_t at[4] = {0, 0, 0, 0}, checked = 0, beyond = 0;
        std::vector<float> rows(static_cast<size_t>(4 * V));
        // Feeds `count` more tokens of each listed sequence (its slot's) in one prefill call; checks each chunk's
        // last logits (or greedy token) and how many passes the call ran.
        auto feed = [&](const std::vector<std::pair<int64_t, int64_t>> &chunks, bool greedy, int64_t want_passes) {
            std::vector<int64_t> slots;
            std::vector<std::span<const int32_t>> spans;
            for (const auto &[sl, count] : chunks) {
                slots.push_back(sl);
                spans.push_back(std::span(seqs[size_t(sl)]).subspan(size_t(at[sl]), size_t(count)));
            }
            std::fill(rows.begin(), rows.end(), std::numeric_limits<float>::quiet_NaN());
            std::vector<int32_t> best(chunks.size(), -1);
            const int64_t before = dec.passes();
            dec.prefill(slots, spans, greedy ? nullptr : rows.data(), best.data());
            EXPECT_EQ(dec.passes() - before, want_passes);
            for (size_t i = 0; i < chunks.size(); ++i) {
                const auto &[sl, count] = chunks[i];
                at[sl] += count;
                EXPECT_EQ(dec.length(sl), at[sl]) << "slot " << sl;
                const std::vector<float> want = row(size_t(sl), at[sl] - 1);
                if (greedy) {
                    EXPECT_EQ(best[i], int32_t(std::max_element(want.begin(), want.end()) - want.begin()))
                        << "slot " << sl;
                } else {
                    const std::vector<float> got(rows.begin() + int64_t(i) * V, rows.begin() + int64_t(i + 1) * V);
                    const double err = rel_err(got, want);
                    EXPECT_LT(err, dtype == DType::BF16 ? 1e-1 : tol) << "slot " << sl << " position " << at[sl] - 1;
                    ++checked, beyond += err >= tol;
                }
            }
        };
        feed({{1, 5}}, false, 1); // alone: a GEMM pass
        feed({{3, 2}}, false, 1); // a GEMV pass
        feed({{3, 7}, {0, 12}, {1, 1}}, false, 1);
        for (int s = 0; s < 2; ++s) { // the three step together: each slot's state is its own
            std::vector<int32_t> toks(4, -1);
            for (int sl : {0, 1, 3}) toks[size_t(sl)] = seqs[size_t(sl)][size_t(at[sl])];
            dec.step(toks, rows.data(), nullptr);
            for (int sl : {0, 1, 3}) {
                const std::vector<float> got(rows.begin() + sl * V, rows.begin() + (sl + 1) * V);
                EXPECT_LT(rel_err(got, row(size_t(sl), at[sl])), tol) << "step, slot " << sl << " at " << at[sl];
                ++at[sl];
            }
        }
        feed({{0, 4}, {2, 9}}, true, 1);
        feed({{1, 13}, {2, 17}, {3, 8}}, false, 3); // 38 > 32 tokens: a GEMM pass each
        dec.step(std::vector<int32_t>{seqs[0][size_t(at[0])], -1, seqs[2][size_t(at[2])], -1}, rows.data(), nullptr);
        for (int sl : {0, 2}) {
            const std::vector<float> got(rows.begin() + sl * V, rows.begin() + (sl + 1) * V);
            EXPECT_LT(rel_err(got, row(size_t(sl), at[sl])), tol) << "last step, slot " << sl;
        }
        // A slot twice, or slots and chunks that differ in number: refused before anything runs.
        const std::vector<int32_t> two = {1, 2};
        const std::vector<std::span<const int32_t>> chunks = {two, two};
        EXPECT_THROW(dec.prefill(std::vector<int64_t>{1, 1}, chunks, rows.data(), nullptr), Error);
        EXPECT_THROW(dec.prefill(std::vector<int64_t>{1}, chunks, rows.data(), nullptr), Error);
        EXPECT_EQ(dec.length(1), at[1]);
        EXPECT_LE(beyond, dtype == DType::BF16 ? 1 : 0) << checked << " chunks' last logits";
    }
}

} // namespace
} // namespace zaya
