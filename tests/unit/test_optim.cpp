// Optimizer tests: Muon, AdamW, clipping and the balancing controller against torch 2.15 goldens
// (tools/gen_optim_unit_goldens.py, tests/golden/optim_unit/), plus schedules, parameter groups, Newton–Schulz
// spectrum and the Optimizer as a whole on the `tiny` preset.
#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "core/rng.h"
#include "optim/balancing.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/sum_squares.h"
#include "test_helpers.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <numeric>
#include <omp.h>
#include <utility>

namespace zaya {
namespace {

const std::string &golden_file() {
    static const std::string f = test::golden_dir("optim_unit") + "/optim.safetensors";
    return f;
}

const nlohmann::json &meta() {
    static const nlohmann::json m = [] {
        std::ifstream in(test::golden_dir("optim_unit") + "/meta.json");
        return nlohmann::json::parse(in);
    }();
    return m;
}

// The generator's inputs, bit for bit: splitmix64(stream << 32 | i) → 24-bit value in [-1, 1), times `scale`.
std::vector<real> hashed(uint64_t stream, size_t n, double scale) {
    std::vector<real> v(n);
    for (size_t i = 0; i < n; ++i) {
        uint64_t x = (stream << 32) | uint64_t(i);
        const int64_t k = int64_t(splitmix64(x) >> 40);
        v[i] = real(double(2 * k - (int64_t(1) << 24)) / double(int64_t(1) << 24) * scale);
    }
    return v;
}

size_t numel_of(const nlohmann::json &shape) {
    size_t n = 1;
    for (const auto &d : shape) n *= d.get<size_t>();
    return n;
}

// max|a − b| ≤ rel · max|b| (relative to the tensor's scale, so near-zero entries do not dominate).
void expect_close(const real *a, const std::vector<float> &b, double rel, const std::string &what) {
    double diff = 0, scale = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        diff = std::max(diff, std::fabs(double(a[i]) - double(b[i])));
        scale = std::max(scale, std::fabs(double(b[i])));
    }
    EXPECT_LE(diff, rel * scale) << what << ": max abs diff " << diff << ", scale " << scale;
}

// Eigenvalues of a small symmetric matrix (cyclic Jacobi), for the Newton–Schulz spectrum check.
std::vector<double> symmetric_eigenvalues(std::vector<double> a, size_t k) {
    for (int sweep = 0; sweep < 100; ++sweep) {
        double off = 0;
        for (size_t p = 0; p < k; ++p)
            for (size_t q = p + 1; q < k; ++q) off += a[p * k + q] * a[p * k + q];
        if (off < 1e-24) break;
        for (size_t p = 0; p < k; ++p)
            for (size_t q = p + 1; q < k; ++q) {
                const double apq = a[p * k + q];
                if (std::fabs(apq) < 1e-300) continue;
                const double theta = (a[q * k + q] - a[p * k + p]) / (2 * apq);
                const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
                const double c = 1 / std::sqrt(t * t + 1), s = t * c;
                for (size_t r = 0; r < k; ++r) { // columns p, q
                    const double arp = a[r * k + p], arq = a[r * k + q];
                    a[r * k + p] = c * arp - s * arq;
                    a[r * k + q] = s * arp + c * arq;
                }
                for (size_t r = 0; r < k; ++r) { // rows p, q
                    const double apr = a[p * k + r], aqr = a[q * k + r];
                    a[p * k + r] = c * apr - s * aqr;
                    a[q * k + r] = s * apr + c * aqr;
                }
            }
    }
    std::vector<double> ev(k);
    for (size_t i = 0; i < k; ++i) ev[i] = a[i * k + i];
    return ev;
}

MuonHyper golden_muon_hyper(bool nesterov) {
    const auto &m = meta().at("muon");
    MuonHyper h;
    h.momentum = m.at("momentum").get<double>();
    h.nesterov = nesterov;
    h.ns_steps = m.at("ns_steps").get<int>();
    h.eps = m.at("eps").get<double>();
    h.lr_adjust = MuonLrAdjust::MatchRmsAdamW;
    h.ns_precision = NsPrecision::F32; // the goldens' NS is patched to fp32
    return h;
}

MuonHyper hyper_with(NsPrecision p) {
    MuonHyper h;
    h.ns_precision = p;
    return h;
}

// ---------------------------------------------------------------------------------------------------- Muon

TEST(Muon, MatchesTorchMuon) {
    const auto &m = meta().at("muon");
    const double lr = m.at("lr").get<double>(), wd = m.at("weight_decay").get<double>();
    const int steps = meta().at("steps").get<int>();
    const double ps = meta().at("param_scale").get<double>(), gs = meta().at("grad_scale").get<double>();
    for (const auto &[name, c] : meta().at("muon_cases").items()) {
        SCOPED_TRACE(name);
        const int64_t rows = c.at("shape")[0].get<int64_t>(), cols = c.at("shape")[1].get<int64_t>();
        const size_t n = size_t(rows * cols);
        const uint64_t stream = c.at("stream").get<uint64_t>();
        Muon muon(golden_muon_hyper(c.at("nesterov").get<bool>()), n, std::min(rows, cols));
        std::vector<real> p = hashed(stream, n, ps), p0 = p, buf(n, real(0));
        for (int t = 1; t <= steps; ++t) {
            std::vector<real> g = hashed(stream + uint64_t(t), n, gs);
            muon.step(p.data(), g.data(), buf.data(), rows, cols, lr, wd);
        }
        auto ref_p = test::read_tensor(golden_file(), "muon." + name + ".param");
        auto ref_m = test::read_tensor(golden_file(), "muon." + name + ".momentum");
        ASSERT_EQ(ref_p.size(), n);
        expect_close(p.data(), ref_p, 1e-5, "param");
        expect_close(buf.data(), ref_m, 1e-5, "momentum");
        // The accumulated update alone (param − initial) is a much stricter check than the parameters.
        std::vector<float> ref_delta(n);
        std::vector<real> delta(n);
        for (size_t i = 0; i < n; ++i) ref_delta[i] = ref_p[i] - float(p0[i]), delta[i] = p[i] - p0[i];
        expect_close(delta.data(), ref_delta, 1e-5, "update");
    }
}

// Newton–Schulz at precision p of a golden case's hashed input (the case's "shape" and "stream").
std::vector<real> ns_of_case(const nlohmann::json &c, NsPrecision p) {
    const int64_t rows = c.at("shape")[0].get<int64_t>(), cols = c.at("shape")[1].get<int64_t>();
    const size_t n = size_t(rows * cols);
    std::vector<real> x = hashed(c.at("stream").get<uint64_t>(), n, meta().at("grad_scale").get<double>());
    Muon(hyper_with(p), n, std::min(rows, cols)).orthogonalise(x.data(), x.data(), rows, cols);
    return x;
}

// ‖a − b‖ / ‖b‖ over all elements.
double rms_rel(const std::vector<real> &a, const std::vector<float> &b) {
    double se = 0, sr = 0;
    for (size_t i = 0; i < b.size(); ++i) se += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), sr += double(b[i]) * b[i];
    return std::sqrt(se / sr);
}

TEST(Muon, NewtonSchulzMatchesTorchFp32) {
    for (const auto &[name, c] : meta().at("ns_cases").items()) {
        SCOPED_TRACE(name);
        const std::vector<real> x = ns_of_case(c, NsPrecision::F32);
        expect_close(x.data(), test::read_tensor(golden_file(), "ns." + name), 1e-5, "ns");
    }
}

// torch's stock bf16 iteration. Every product is rounded to bf16 (8 bits of mantissa) where torch rounds, but the
// fp32 sums inside each product run in a different order (oneDNN vs torch's kernels), so an element can round to
// the neighbouring bf16 value and five steps carry such flips on. Measured: bit-identical for 17×32 and 40×24;
// 64×192 and 256×96 differ in 37 % / 6 % of the elements, by at most 3 bf16 ulps (1.8 % of the largest element),
// RMS 0.4 % / 0.08 %. Bounds: max 3 %, RMS 1 %; a wrong coefficient or a missing rounding step is far outside.
TEST(Muon, NewtonSchulzBf16MatchesTorchStock) {
    for (const auto &[name, c] : meta().at("ns_bf16_cases").items()) {
        SCOPED_TRACE(name);
        const std::vector<real> x = ns_of_case(c, NsPrecision::BF16), y = ns_of_case(c, NsPrecision::F32);
        const size_t n = x.size();
        const std::vector<float> ref = test::read_tensor(golden_file(), "ns_bf16." + name);
        expect_close(x.data(), ref, 3e-2, "ns bf16");
        EXPECT_LE(rms_rel(x, ref), 1e-2) << "RMS difference relative to the RMS of torch's result";
        // And it differs from the fp32 iteration by the bf16 level, not less: the rounding really happens.
        double d = 0, scale = 0;
        for (size_t i = 0; i < n; ++i) d = std::max(d, double(std::fabs(x[i] - y[i]))), scale = std::max(scale, double(std::fabs(ref[i])));
        EXPECT_GT(d, 1e-4 * scale);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(x[i], real(bf16_to_f32(f32_to_bf16(float(x[i]))))) << i; // bf16 values
    }
}

// Gram sides of 256 and more take the blocked symmetric products (muon.cpp), ragged last block included: the bf16
// iteration must still track the fp32 one at the bf16 level (a wrong mirror or block offset is an O(1) error).
TEST(Muon, NewtonSchulzBf16BlockedTracksFp32) {
    const std::pair<int64_t, int64_t> shapes[] = {{256, 320}, {300, 260}, {384, 400}};
    uint64_t stream = 7000;
    for (auto [rows, cols] : shapes) {
        SCOPED_TRACE(testing::Message() << rows << "x" << cols);
        const size_t n = size_t(rows * cols);
        std::vector<real> g = hashed(stream++, n, 1.0), x(n), y(n);
        Muon(hyper_with(NsPrecision::BF16), n, std::min(rows, cols)).orthogonalise(g.data(), x.data(), rows, cols);
        Muon(hyper_with(NsPrecision::F32), n, std::min(rows, cols)).orthogonalise(g.data(), y.data(), rows, cols);
        EXPECT_LE(rms_rel(x, std::vector<float>(y.begin(), y.end())), 2e-2);
    }
}

// torch.optim.Muon unpatched (bf16 Newton–Schulz), 5 steps: the accumulated update matches at the bf16 level.
TEST(Muon, Bf16MatchesTorchMuon) {
    const auto &m = meta().at("muon");
    const double lr = m.at("lr").get<double>(), wd = m.at("weight_decay").get<double>();
    const double ps = meta().at("param_scale").get<double>(), gs = meta().at("grad_scale").get<double>();
    for (const auto &[name, c] : meta().at("muon_bf16_cases").items()) {
        SCOPED_TRACE(name);
        const int64_t rows = c.at("shape")[0].get<int64_t>(), cols = c.at("shape")[1].get<int64_t>();
        const size_t n = size_t(rows * cols);
        const uint64_t stream = c.at("stream").get<uint64_t>();
        MuonHyper h = golden_muon_hyper(true);
        h.ns_precision = NsPrecision::BF16;
        Muon muon(h, n, std::min(rows, cols));
        std::vector<real> p = hashed(stream, n, ps), p0 = p, buf(n, real(0));
        for (int t = 1; t <= meta().at("steps").get<int>(); ++t) {
            std::vector<real> g = hashed(stream + uint64_t(t), n, gs);
            muon.step(p.data(), g.data(), buf.data(), rows, cols, lr, wd);
        }
        const std::vector<float> ref_p = test::read_tensor(golden_file(), "muon_bf16." + name + ".param");
        std::vector<float> ref_delta(n);
        std::vector<real> delta(n);
        for (size_t i = 0; i < n; ++i) ref_delta[i] = ref_p[i] - float(p0[i]), delta[i] = p[i] - p0[i];
        expect_close(delta.data(), ref_delta, 2e-2, "update"); // measured: identical to torch's bits
    }
}

// The quintic's five steps leave singular values in about [0.68, 1.17] (Jordan: "S' ≈ Uniform(0.5, 1.5)", the
// coefficients trade exactness for slope at 0); check the spectrum of X·Xᵀ and the loose ‖X‖_F² ≈ min(m, n).
TEST(Muon, NewtonSchulzSingularValuesNearOne) {
    const std::pair<int64_t, int64_t> shapes[] = {{8, 16}, {16, 8}, {17, 32}, {40, 24}, {24, 96}};
    uint64_t stream = 5000;
    for (NsPrecision prec : {NsPrecision::F32, NsPrecision::BF16})
    for (auto [rows, cols] : shapes) {
        SCOPED_TRACE(testing::Message() << rows << "x" << cols << " " << ns_precision_name(prec));
        const size_t n = size_t(rows * cols), k = size_t(std::min(rows, cols));
        Muon muon(hyper_with(prec), n, int64_t(k));
        // The input scale must not matter: NS normalises by the Frobenius norm first.
        std::vector<real> g = hashed(stream++, n, 37.0), x(n);
        muon.orthogonalise(g.data(), x.data(), rows, cols);
        std::vector<double> gram(k * k, 0.0);
        const bool tall = rows > cols;
        for (size_t i = 0; i < k; ++i)
            for (size_t j = 0; j < k; ++j)
                for (size_t r = 0; r < size_t(tall ? rows : cols); ++r)
                    gram[i * k + j] += tall ? double(x[r * k + i]) * double(x[r * k + j])
                                            : double(x[i * size_t(cols) + r]) * double(x[j * size_t(cols) + r]);
        double fro2 = 0;
        for (double ev : symmetric_eigenvalues(gram, k)) {
            const double sv = std::sqrt(std::max(ev, 0.0));
            EXPECT_GE(sv, 0.65);
            EXPECT_LE(sv, 1.2);
            fro2 += ev;
        }
        EXPECT_NEAR(fro2 / double(k), 1.0, 0.35);
    }
}

TEST(Muon, AdjustedLr) {
    EXPECT_DOUBLE_EQ(muon_adjusted_lr(1.0, MuonLrAdjust::MatchRmsAdamW, 16, 64), 0.2 * 8.0);
    EXPECT_DOUBLE_EQ(muon_adjusted_lr(1.0, MuonLrAdjust::MatchRmsAdamW, 64, 16), 0.2 * 8.0);
    EXPECT_DOUBLE_EQ(muon_adjusted_lr(2.0, MuonLrAdjust::Original, 64, 16), 4.0);
    EXPECT_DOUBLE_EQ(muon_adjusted_lr(2.0, MuonLrAdjust::Original, 16, 64), 2.0);
    EXPECT_DOUBLE_EQ(muon_adjusted_lr(1.0, MuonLrAdjust::SpectralUnclamped, 16, 64), 0.5);
}

TEST(Muon, RejectsMatrixLargerThanWorkspace) {
    Muon muon(MuonHyper{}, 100, 8);
    std::vector<real> g(128, real(1)), x(128);
    EXPECT_THROW(muon.orthogonalise(g.data(), x.data(), 8, 16), Error); // too many elements
    EXPECT_THROW(muon.orthogonalise(g.data(), x.data(), 9, 9), Error);  // Gram matrix too large
    EXPECT_NO_THROW(muon.orthogonalise(g.data(), x.data(), 25, 4));
}

// --------------------------------------------------------------------------------------------------- AdamW

TEST(AdamW, MatchesTorchAdamW) {
    const auto &a = meta().at("adamw");
    const AdamWHyper h{a.at("betas")[0].get<double>(), a.at("betas")[1].get<double>(), a.at("eps").get<double>()};
    const double lr = a.at("lr").get<double>();
    const double ps = meta().at("param_scale").get<double>(), gs = meta().at("grad_scale").get<double>();
    for (const auto &[name, c] : meta().at("adamw_cases").items()) {
        SCOPED_TRACE(name);
        const size_t n = numel_of(c.at("shape"));
        const uint64_t stream = c.at("stream").get<uint64_t>();
        std::vector<real> p = hashed(stream, n, ps), m(n, real(0)), v(n, real(0));
        for (int t = 1; t <= meta().at("steps").get<int>(); ++t) {
            std::vector<real> g = hashed(stream + uint64_t(t), n, gs);
            adamw_update(p.data(), g.data(), m.data(), v.data(), n, lr, c.at("weight_decay").get<double>(), h, t);
        }
        const std::string key = "adamw." + name;
        expect_close(p.data(), test::read_tensor(golden_file(), key + ".param"), 1e-6, "param");
        expect_close(m.data(), test::read_tensor(golden_file(), key + ".exp_avg"), 1e-6, "exp_avg");
        expect_close(v.data(), test::read_tensor(golden_file(), key + ".exp_avg_sq"), 1e-6, "exp_avg_sq");
    }
}

// ---------------------------------------------------------------------------------------------- clipping

// A hand-built layout: the clip shapes with a non-trainable view between them (as balancing_biases are).
ParamLayout clip_layout() {
    ParamLayout L;
    auto add = [&](std::string name, std::vector<int64_t> shape, bool trainable) {
        size_t n = 1;
        for (int64_t d : shape) n *= size_t(d);
        L.total = (L.total + 15) / 16 * 16;
        L.views.push_back({std::move(name), std::move(shape), L.total, n, trainable});
        L.total += n;
    };
    int k = 0;
    for (const auto &shape : meta().at("clip_shapes")) {
        add(fmt::format("g{}", k++), shape.get<std::vector<int64_t>>(), true);
        if (k == 1) add("buffer", {5}, false);
    }
    L.total = (L.total + 15) / 16 * 16;
    return L;
}

TEST(Clip, MatchesTorchClipGradNorm) {
    const ParamLayout L = clip_layout();
    for (const auto &[name, c] : meta().at("clip_cases").items()) {
        SCOPED_TRACE(name);
        std::vector<real> grads(L.total, real(7)); // padding and the buffer must be ignored and left alone
        std::vector<real> expected_flat;
        uint64_t stream = c.at("stream").get<uint64_t>();
        for (const ParamView &v : L.views) {
            if (!v.trainable) continue;
            std::vector<real> g = hashed(stream++, v.numel, 0.25);
            std::copy(g.begin(), g.end(), grads.begin() + std::ptrdiff_t(v.offset));
        }
        const double norm = clip_grad_norm(L, grads.data(), c.at("max_norm").get<double>());
        EXPECT_NEAR(norm, c.at("total_norm").get<double>(), 1e-6 * norm);
        std::vector<real> flat;
        for (const ParamView &v : L.views)
            if (v.trainable) flat.insert(flat.end(), grads.begin() + std::ptrdiff_t(v.offset),
                                         grads.begin() + std::ptrdiff_t(v.offset + v.numel));
        expect_close(flat.data(), test::read_tensor(golden_file(), "clip." + name + ".grads"), 1e-6, "grads");
        const ParamView *buffer = L.find("buffer");
        EXPECT_EQ(grads[buffer->offset], real(7));
        EXPECT_EQ(grads[L.total - 1], real(7)); // trailing padding
    }
}

TEST(Clip, CoefficientFormula) {
    EXPECT_DOUBLE_EQ(clip_coefficient(2.0, 1.0), 1.0 / (2.0 + 1e-6));
    EXPECT_DOUBLE_EQ(clip_coefficient(0.5, 1.0), 1.0);
    EXPECT_DOUBLE_EQ(clip_coefficient(1.0, 1.0), 1.0 / (1.0 + 1e-6)); // torch clips (slightly) at exactly max_norm
    EXPECT_DOUBLE_EQ(clip_coefficient(std::nan(""), 1.0), 1.0);
    EXPECT_DOUBLE_EQ(clip_coefficient(INFINITY, 1.0), 1.0);
}

TEST(Clip, SumOfSquaresIsIndependentOfThreadCount) {
    const size_t n = (size_t(1) << 20) + 12345;
    std::vector<real> x = hashed(42, n, 1.0);
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const double one = sum_squares(x.data(), n);
    omp_set_num_threads(std::max(2, threads));
    const double many = sum_squares(x.data(), n);
    omp_set_num_threads(threads);
    EXPECT_EQ(one, many);
    double ref = 0;
    for (real v : x) ref += double(v) * double(v);
    EXPECT_NEAR(one, ref, 1e-12 * ref);
}

// -------------------------------------------------------------------------------------------- schedules

TEST(Schedule, WarmupCosine) {
    ScheduleConfig c{ScheduleKind::Cosine, 10, 110, 0.1, 0.2};
    LrSchedule s(c, 1e-3);
    EXPECT_DOUBLE_EQ(s.lr(1), 1e-4);
    EXPECT_DOUBLE_EQ(s.lr(5), 5e-4);
    EXPECT_DOUBLE_EQ(s.lr(10), 1e-3);
    EXPECT_NEAR(s.lr(60), 1e-4 + 0.9e-3 * 0.5, 1e-15); // halfway through the cosine
    EXPECT_NEAR(s.lr(110), 1e-4, 1e-15);
    EXPECT_NEAR(s.lr(500), 1e-4, 1e-15);
    EXPECT_LT(s.lr(11), 1e-3);
    for (int64_t t = 11; t < 110; ++t) EXPECT_GE(s.lr(t), s.lr(t + 1));
}

TEST(Schedule, WarmupStableDecay) {
    ScheduleConfig c{ScheduleKind::Wsd, 10, 100, 0.0, 0.2}; // decay over the last 20 steps: 81..100
    LrSchedule s(c, 2e-3);
    EXPECT_DOUBLE_EQ(s.lr(1), 2e-4);
    EXPECT_DOUBLE_EQ(s.lr(10), 2e-3);
    EXPECT_DOUBLE_EQ(s.lr(11), 2e-3);
    EXPECT_DOUBLE_EQ(s.lr(80), 2e-3);
    EXPECT_DOUBLE_EQ(s.lr(90), 1e-3);
    EXPECT_DOUBLE_EQ(s.lr(100), 0.0);
    EXPECT_DOUBLE_EQ(s.lr(150), 0.0);
    LrSchedule floor(ScheduleConfig{ScheduleKind::Wsd, 0, 100, 0.1, 0.5}, 1.0);
    EXPECT_DOUBLE_EQ(floor.lr(1), 1.0);
    EXPECT_DOUBLE_EQ(floor.lr(75), 0.55);
    EXPECT_DOUBLE_EQ(floor.lr(100), 0.1);
}

TEST(Schedule, ConstantAndValidation) {
    LrSchedule s(ScheduleConfig{ScheduleKind::Constant, 4, 10, 0.1, 0.2}, 1.0);
    EXPECT_DOUBLE_EQ(s.lr(2), 0.5);
    EXPECT_DOUBLE_EQ(s.lr(4), 1.0);
    EXPECT_DOUBLE_EQ(s.lr(1000), 1.0);
    EXPECT_THROW(s.lr(0), Error);
    EXPECT_THROW(LrSchedule(ScheduleConfig{ScheduleKind::Cosine, 11, 10, 0.1, 0.2}, 1.0), Error);
    EXPECT_THROW(LrSchedule(ScheduleConfig{ScheduleKind::Wsd, 90, 100, 0.1, 0.2}, 1.0), Error);
    EXPECT_THROW(LrSchedule(ScheduleConfig{ScheduleKind::Cosine, 0, 10, 1.5, 0.2}, 1.0), Error);
    EXPECT_EQ(schedule_kind_from_string("wsd"), ScheduleKind::Wsd);
    EXPECT_THROW(schedule_kind_from_string("linear"), Error);
}

// ------------------------------------------------------------------------------------------ param groups

TEST(ParamGroups, TinyPresetClassification) {
    for (bool tied : {true, false}) {
        SCOPED_TRACE(tied ? "tied" : "untied");
        ZayaConfig c = config_preset("tiny");
        c.tie_word_embeddings = tied;
        const ParamLayout L = ParamLayout::build(c);
        const ParamGroups g = ParamGroups::classify(L, c);
        const int64_t E = c.num_experts, I = c.moe_intermediate_size, D = c.hidden_size;
        EXPECT_EQ(int64_t(g.muon.size()), c.num_hidden_layers * (9 + 2 * E));

        // Every trainable element is covered exactly once; balancing_biases never.
        std::vector<int> cover(L.total, 0);
        for (const MuonMatrix &m : g.muon)
            for (size_t i = 0; i < m.numel(); ++i) ++cover[m.offset + i];
        for (const AdamWRange &r : g.adamw)
            for (size_t i = 0; i < r.numel; ++i) ++cover[r.offset + i];
        for (const ParamView &v : L.views)
            for (size_t i = 0; i < v.numel; ++i) EXPECT_EQ(cover[v.offset + i], v.trainable ? 1 : 0) << v.name;

        size_t decayed = 0;
        for (const AdamWRange &r : g.adamw) {
            const ParamView *v = L.find(r.name);
            ASSERT_NE(v, nullptr);
            const bool head = r.name == "model.embed_tokens.weight" || r.name == "lm_head.weight";
            EXPECT_EQ(r.decay, head) << r.name;
            if (v->shape.size() == 1) {
                EXPECT_FALSE(r.decay) << r.name;
            }
            EXPECT_NE(v->shape.size(), 2u + (head ? 1u : 0u)) << r.name; // the only 2-D AdamW views are the heads
            decayed += r.decay ? 1 : 0;
        }
        EXPECT_EQ(decayed, tied ? 1u : 2u);
        EXPECT_TRUE(std::any_of(g.adamw.begin(), g.adamw.end(),
                                [](const AdamWRange &r) { return r.name.find("conv_qk_grouped.weight") != std::string::npos; }));

        // Experts: E matrices per stack, in order, with the per-expert shapes.
        const std::string gu = "model.layers.1.mlp.experts.gate_up_proj", dn = "model.layers.1.mlp.experts.down_proj";
        int64_t seen_gu = 0, seen_dn = 0;
        for (const MuonMatrix &m : g.muon) {
            if (m.name == gu) {
                EXPECT_EQ(m.expert, seen_gu);
                EXPECT_EQ(m.rows, 2 * I);
                EXPECT_EQ(m.cols, D);
                EXPECT_EQ(m.offset, L.offset_of(gu) + size_t(seen_gu++ * 2 * I * D));
            } else if (m.name == dn) {
                EXPECT_EQ(m.rows, D);
                EXPECT_EQ(m.cols, I);
                EXPECT_EQ(m.offset, L.offset_of(dn) + size_t(seen_dn++ * D * I));
            } else {
                EXPECT_EQ(m.expert >= 0, m.name.find(".mlp.experts.") != std::string::npos) << m.name;
            }
        }
        EXPECT_EQ(seen_gu, E);
        EXPECT_EQ(seen_dn, E);
        EXPECT_EQ(g.max_muon_numel(), size_t(2 * I * D));
        EXPECT_EQ(g.max_muon_min_dim(), std::max(D, c.router_hidden_size));
        size_t muon_state = 0, adamw_state = 0;
        for (const MuonMatrix &m : g.muon) EXPECT_EQ(m.state_offset, std::exchange(muon_state, muon_state + m.numel()));
        for (const AdamWRange &r : g.adamw) EXPECT_EQ(r.state_offset, std::exchange(adamw_state, adamw_state + r.numel));
        EXPECT_EQ(g.muon_state_size, muon_state);
        EXPECT_EQ(g.adamw_state_size, adamw_state);
    }
}

TEST(ParamGroups, SliceCoversEachElementOnce) {
    const ZayaConfig c = config_preset("tiny");
    const ParamLayout L = ParamLayout::build(c);
    const ParamGroups all = ParamGroups::classify(L, c);
    // Three arbitrary shards: every Muon matrix lands in exactly one, AdamW ranges are split at the boundaries.
    const size_t cuts[] = {0, L.total / 3 + 5, 2 * L.total / 3 + 7, L.total};
    size_t muon = 0, adamw = 0;
    for (int s = 0; s < 3; ++s) {
        const ParamGroups part = all.slice(cuts[s], cuts[s + 1]);
        muon += part.muon.size();
        for (const AdamWRange &r : part.adamw) {
            EXPECT_GE(r.offset, cuts[s]);
            EXPECT_LE(r.offset + r.numel, cuts[s + 1]);
            adamw += r.numel;
        }
        EXPECT_EQ(part.adamw_state_size, std::accumulate(part.adamw.begin(), part.adamw.end(), size_t(0),
                                                          [](size_t a, const AdamWRange &r) { return a + r.numel; }));
    }
    EXPECT_EQ(muon, all.muon.size());
    EXPECT_EQ(adamw, all.adamw_state_size);
}

// -------------------------------------------------------------------------------------------- optimizer

struct TinySetup {
    ZayaConfig c = config_preset("tiny");
    Model m = Model::create(c);
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
    TinySetup(double grad_scale) {
        Rng rng(7, 1);
        for (const ParamView &v : m.layout.views)
            for (size_t i = 0; i < v.numel; ++i) {
                m.params.data()[v.offset + i] = real(0.02 * rng.normal());
                grads.data()[v.offset + i] = real(grad_scale * rng.normal());
            }
    }
};

TEST(Optimizer, StepIsClipThenMuonAndAdamWPerGroup) {
    TinySetup s(0.01);
    OptimConfig oc;
    oc.lr = 1e-2;
    oc.schedule = {ScheduleKind::Constant, 0, 10, 0.1, 0.2};
    Optimizer opt(s.m.layout, s.c, oc);
    const ParamGroups &g = opt.groups();

    // Reference: clip by hand, then each group's kernel on copies.
    std::vector<real> p(s.m.params.data(), s.m.params.data() + s.m.layout.total);
    std::vector<real> gr(s.grads.data(), s.grads.data() + s.m.layout.total);
    const double norm = std::sqrt(grad_sum_squares(s.m.layout, gr.data()));
    ASSERT_GT(norm, oc.grad_clip); // this draw must exercise clipping
    scale_grads(s.m.layout, gr.data(), clip_coefficient(norm, oc.grad_clip));
    Muon muon(oc.muon_hyper(), g.max_muon_numel(), g.max_muon_min_dim());
    std::vector<real> mom(g.muon_state_size, 0), m1(g.adamw_state_size, 0), m2(g.adamw_state_size, 0);
    for (const MuonMatrix &mm : g.muon)
        muon.step(p.data() + mm.offset, gr.data() + mm.offset, mom.data() + mm.state_offset, mm.rows, mm.cols, oc.lr,
                  oc.weight_decay);
    for (const AdamWRange &r : g.adamw)
        adamw_update(p.data() + r.offset, gr.data() + r.offset, m1.data() + r.state_offset,
                     m2.data() + r.state_offset, r.numel, oc.lr, r.decay ? oc.weight_decay : 0.0, oc.adamw_hyper(), 1);

    std::vector<real> before(s.m.params.data(), s.m.params.data() + s.m.layout.total);
    const StepStats st = opt.step(s.m.params.data(), s.grads.data(), opt.scheduled_lr());
    EXPECT_FALSE(st.skipped);
    EXPECT_DOUBLE_EQ(st.grad_norm, norm);
    EXPECT_LT(st.clip_coef, 1.0);
    EXPECT_EQ(opt.step_count(), 1);
    for (size_t i = 0; i < p.size(); ++i) ASSERT_EQ(s.m.params.data()[i], p[i]) << i;
    for (const ParamView &v : s.m.layout.views) {
        bool changed = false;
        for (size_t i = 0; i < v.numel; ++i) changed |= s.m.params.data()[v.offset + i] != before[v.offset + i];
        EXPECT_EQ(changed, v.trainable) << v.name; // balancing_biases are not the optimizer's
    }
}

// Muon runs whole matrices per thread: the step's result must not depend on the number of threads.
TEST(Optimizer, SameResultForAnyThreadCount) {
    for (NsPrecision prec : {NsPrecision::BF16, NsPrecision::F32}) {
        SCOPED_TRACE(ns_precision_name(prec));
        std::vector<std::vector<real>> results;
        const int saved = omp_get_max_threads();
        for (int threads : {1, 2, 3}) {
            omp_set_num_threads(threads);
            TinySetup s(0.01);
            OptimConfig oc;
            oc.ns_precision = prec;
            Optimizer opt(s.m.layout, s.c, oc);
            for (int step = 0; step < 2; ++step) opt.step(s.m.params.data(), s.grads.data(), 1e-2);
            results.emplace_back(s.m.params.data(), s.m.params.data() + s.m.layout.total);
        }
        omp_set_num_threads(saved);
        for (size_t r = 1; r < results.size(); ++r)
            for (size_t i = 0; i < results[0].size(); ++i) ASSERT_EQ(results[r][i], results[0][i]) << r << " " << i;
    }
}

TEST(Optimizer, NonFiniteGradientSkipsTheStep) {
    TinySetup s(0.01);
    Optimizer opt(s.m.layout, s.c, OptimConfig{});
    s.grads.data()[s.m.layout.offset_of("model.layers.0.self_attn.o_proj.weight") + 3] = real(NAN);
    std::vector<real> before(s.m.params.data(), s.m.params.data() + s.m.layout.total);
    const StepStats st = opt.step(s.m.params.data(), s.grads.data(), 1e-3);
    EXPECT_TRUE(st.skipped);
    EXPECT_EQ(opt.step_count(), 0);
    for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(s.m.params.data()[i], before[i]);
}

TEST(Optimizer, MuonUpdateRmsMatchesAdamWScale) {
    // With match_rms_adamw the Muon update of an m×n matrix has RMS ≈ 0.2·lr·√max(m,n)·‖O‖_F/√(mn) ≈ 0.2·lr
    // (NS singular values ≈ 1): the property that lets Muon and AdamW share one lr.
    const int64_t rows = 96, cols = 32;
    const size_t n = size_t(rows * cols);
    MuonHyper h;
    Muon muon(h, n, cols);
    std::vector<real> p(n, 0), g = hashed(9, n, 1.0), buf(n, 0);
    const double lr = 0.01;
    muon.step(p.data(), g.data(), buf.data(), rows, cols, lr, 0.0);
    double ss = 0;
    for (real v : p) ss += double(v) * double(v);
    const double rms = std::sqrt(ss / double(n));
    EXPECT_GT(rms, 0.2 * lr * 0.7);
    EXPECT_LT(rms, 0.2 * lr * 1.2);
}

// -------------------------------------------------------------------------------------------- balancing

TEST(Balancing, MatchesTorchAdamWOnPseudoGradient) {
    const auto &b = meta().at("balancing");
    ZayaConfig c = config_preset("tiny");
    c.num_hidden_layers = b.at("layers").get<int64_t>();
    c.num_experts = b.at("experts").get<int64_t>();
    c.layer_types.assign(size_t(c.num_hidden_layers), LayerType::Hybrid);
    Model m = Model::create(c);
    const int64_t K = c.num_experts + 1;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) m.w.layers[size_t(l)].balancing_biases[c.num_experts] = -1;
    BalancingController ctl(m.layout, c);
    for (const auto &step : b.at("counts")) {
        std::vector<int64_t> counts;
        for (const auto &layer : step)
            for (const auto &v : layer) counts.push_back(v.get<int64_t>());
        ctl.update(m.params.data(), counts.data());
    }
    EXPECT_EQ(ctl.step_count(), 3);
    std::vector<real> got;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        got.insert(got.end(), m.w.layers[size_t(l)].balancing_biases, m.w.layers[size_t(l)].balancing_biases + K);
    expect_close(got.data(), test::read_tensor(golden_file(), "balancing.biases"), 1e-6, "biases");
}

TEST(Balancing, OverUsedExpertBiasFallsUnusedSkipStays) {
    const ZayaConfig c = config_preset("tiny"); // E = 4
    Model m = Model::create(c);
    for (auto &L : m.w.layers) L.balancing_biases[c.num_experts] = -1;
    BalancingController ctl(m.layout, c);
    // Layer 0: expert 0 over-used, expert 3 starved; layer 1: balanced.
    const std::vector<int64_t> counts = {70, 20, 10, 0, 0, /* layer 1 */ 25, 25, 25, 25, 0};
    for (int s = 0; s < 3; ++s) ctl.update(m.params.data(), counts.data());
    const real *b0 = m.w.layers[0].balancing_biases, *b1 = m.w.layers[1].balancing_biases;
    EXPECT_LT(b0[0], 0.0f);
    EXPECT_GT(b0[1], 0.0f); // 0.2 < 0.25: under-used too
    EXPECT_GT(b0[2], 0.0f);
    EXPECT_GT(b0[3], 0.0f);
    EXPECT_GE(b0[3], b0[2]); // Adam's steps are sign-like: equal up to eps
    EXPECT_NEAR(b0[0], -3e-3, 1e-5); // Adam's step is ≈ lr per step while the sign is steady
    EXPECT_EQ(b0[4], -1.0f);         // skip slot unused: zero error, zero update
    for (int e = 0; e < 4; ++e) EXPECT_EQ(b1[e], 0.0f);
    EXPECT_EQ(b1[4], -1.0f);

    EXPECT_DOUBLE_EQ(ctl.entropy()[1], 1.0);
    EXPECT_LT(ctl.entropy()[0], 1.0);
    const double p[3] = {0.7, 0.2, 0.1};
    double h = 0;
    for (double q : p) h -= q * std::log(q);
    EXPECT_NEAR(ctl.entropy()[0], h / std::log(4.0), 1e-12);
}

TEST(Balancing, ErrorAndEntropy) {
    const int64_t counts[5] = {10, 10, 10, 10, 60}; // 60% skipped
    real err[5];
    balancing_error(counts, 4, err);
    for (int e = 0; e < 4; ++e) EXPECT_FLOAT_EQ(err[e], 0.1f - 0.25f);
    EXPECT_FLOAT_EQ(err[4], 0.6f);
    EXPECT_DOUBLE_EQ(normalised_routing_entropy(counts, 4), 1.0); // over real experts only
    const int64_t one[5] = {0, 9, 0, 0, 0};
    EXPECT_DOUBLE_EQ(normalised_routing_entropy(one, 4), 0.0);
    const int64_t none[5] = {0, 0, 0, 0, 0};
    EXPECT_THROW(balancing_error(none, 4, err), Error);
}

// Muon runs its matrices in an OpenMP loop; an error there (a failed GEMM) must reach the caller as the Error it is,
// not end the process in std::terminate.
TEST(FirstError, CarriesTheFirstExceptionOutOfAnOpenMpLoopAfterEveryIterationRan) {
    constexpr int n = 64;
    std::vector<int> ran(n, 0);
    FirstError error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(4)
    for (int i = 0; i < n; ++i) {
        error.run([&] {
            ran[size_t(i)] = 1;
            if (i == 17) fail("matrix {} failed", i);
        });
    }
    try {
        error.rethrow();
        ADD_FAILURE() << "rethrow() did not throw";
    } catch (const Error &e) {
        EXPECT_STREQ(e.what(), "matrix 17 failed");
    }
    EXPECT_EQ(std::count(ran.begin(), ran.end(), 1), n);
    FirstError none;
    none.run([] {});
    EXPECT_NO_THROW(none.rethrow());
}

} // namespace
} // namespace zaya
