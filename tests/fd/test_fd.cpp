// Finite-difference check of every backward op, in the fp64 build of the model and ops (ZAYA_DOUBLE).
// For sampled entries of every trainable tensor: (L(θ+h) − L(θ−h)) / 2h must equal the analytic gradient.
// Configs cover attention biases, sliding windows, untied LM head with bias, a wide conv, and both skip-slot
// semantics with the skip slot actually chosen.
#include "core/rng.h"
#include "model/backward.h"
#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>

static_assert(sizeof(zaya::real) == 8, "the finite-difference tests need the fp64 build (ZAYA_DOUBLE)");

namespace zaya {
namespace {

ZayaConfig fd_config(bool variants) {
    ZayaConfig c = config_preset("tiny");
    c.vocab_size = 97;
    c.num_hidden_layers = 3;
    c.moe_intermediate_size = 24;
    c.layer_types.assign(3, LayerType::Hybrid);
    if (variants) {
        c.layer_types[1] = LayerType::HybridSliding;
        c.sliding_window = 4;
        c.attention_bias = true;
        c.tie_word_embeddings = false;
        c.lm_head_bias = true;
        c.cca_time0 = 3;
        c.rope_hybrid.partial_rotary_factor = 1.0;
    }
    return c;
}

// Random init, then non-trivial values for every vector (norms, scales, biases, temperatures).
Model fd_model(const ZayaConfig &c, uint64_t seed, double skip_bias) {
    Model m = Model::create(c);
    model_init_random(m, seed);
    Rng rng(seed, 999);
    for (const ParamView &v : m.layout.views) {
        real *p = m.params.data() + v.offset;
        if (!v.trainable) {
            for (size_t i = 0; i + 1 < v.numel; ++i) p[i] = real(0.05 * (rng.uniform() - 0.5));
            p[v.numel - 1] = real(skip_bias);
        } else if (v.shape.size() == 1) {
            for (size_t i = 0; i < v.numel; ++i) p[i] += real(0.2 * rng.normal());
        } else {
            for (size_t i = 0; i < v.numel; ++i) p[i] *= real(4.0); // larger weights: O(1) activations
        }
        if (v.name.ends_with("router_mlp.out_proj.weight"))
            for (size_t i = 0; i < v.numel; ++i) p[i] *= real(10.0); // decisive routing: margins far above h
    }
    return m;
}

struct Case {
    Model m;
    Batch batch;
    std::vector<int32_t> targets;
};

double loss_of(Case &k, std::vector<std::vector<int32_t>> *choices = nullptr) {
    Activations a = Activations::plan(k.m.config, k.batch.num_tokens(), k.batch.num_sequences(), true);
    double loss = model_forward(k.m, k.batch, a, k.targets.data()).loss;
    if (choices) {
        choices->clear();
        for (int64_t l = 0; l < k.m.config.num_hidden_layers; ++l)
            choices->emplace_back(a.layer(l).choice, a.layer(l).choice + k.batch.num_tokens());
    }
    return loss;
}

void check_gradients(const ZayaConfig &c, uint64_t seed, double skip_bias, bool expect_skip) {
    Case k{fd_model(c, seed, skip_bias), {}, {}};
    Rng rng(seed, 7);
    std::vector<std::vector<int32_t>> seqs = {{}, {}};
    for (int t = 0; t < 11; ++t) seqs[0].push_back(int32_t(1 + rng.next() % uint64_t(c.vocab_size - 1)));
    for (int t = 0; t < 6; ++t) seqs[1].push_back(int32_t(1 + rng.next() % uint64_t(c.vocab_size - 1)));
    k.batch = Batch::from_sequences(seqs);
    k.targets = k.batch.next_token_targets();

    // Analytic gradient.
    Activations a = Activations::plan(c, k.batch.num_tokens(), k.batch.num_sequences(), true);
    model_forward(k.m, k.batch, a, k.targets.data());
    int skip = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        for (int64_t n = 0; n < k.batch.num_tokens(); ++n) skip += a.layer(l).choice[n] == c.num_experts;
    if (expect_skip) {
        ASSERT_GT(skip, 0) << "the skip slot must be chosen for this case to mean anything";
    }
    GradScratch s = GradScratch::plan(c, k.batch.num_tokens(), k.batch.num_sequences());
    RealBuffer g = RealBuffer::zeros(k.m.layout.total);
    model_backward(k.m, k.batch, a, k.targets.data(), s, g.data());

    std::vector<std::vector<int32_t>> base_choices;
    loss_of(k, &base_choices);
    const double h = 1e-5;
    int checked = 0;
    for (const ParamView &v : k.m.layout.views) {
        if (!v.trainable) continue;
        // A few entries of every tensor, always including its first and last.
        std::vector<size_t> idx = {0, v.numel - 1};
        for (int i = 0; i < 3; ++i) idx.push_back(size_t(rng.next() % v.numel));
        for (size_t i : idx) {
            real *p = k.m.params.data() + v.offset + i;
            const real saved = *p;
            std::vector<std::vector<int32_t>> cp, cm;
            *p = saved + h;
            double lp = loss_of(k, &cp);
            *p = saved - h;
            double lm = loss_of(k, &cm);
            *p = saved;
            ASSERT_EQ(cp, base_choices) << v.name << "[" << i << "] flips a routing decision; pick another seed";
            ASSERT_EQ(cm, base_choices) << v.name << "[" << i << "] flips a routing decision; pick another seed";
            const double fd = (lp - lm) / (2 * h), an = double(g.data()[v.offset + i]);
            EXPECT_NEAR(an, fd, 1e-7 + 1e-5 * std::fabs(fd)) << v.name << "[" << i << "]";
            ++checked;
        }
    }
    EXPECT_GT(checked, 100);
}

TEST(FiniteDifferences, TiedHybridLayers) { check_gradients(fd_config(false), 11, -1.0, false); }
TEST(FiniteDifferences, BiasesSlidingWindowUntiedHeadWideConv) { check_gradients(fd_config(true), 12, -1.0, false); }
TEST(FiniteDifferences, SkipSlotZeroOutput) { check_gradients(fd_config(false), 13, 0.3, true); }
TEST(FiniteDifferences, SkipSlotPassthrough) {
    ZayaConfig c = fd_config(true);
    c.skip_passthrough = true;
    check_gradients(c, 14, 0.3, true);
}

} // namespace
} // namespace zaya

#include "ops/cpu/attention.h"

namespace zaya {
namespace {

// Attention alone on sequences longer than a block (64 queries, 256 keys) with windows that cross block boundaries:
// the loss L = Σ out·G for a fixed random G, checked entry by entry against central differences.
void check_attention(int64_t window) {
    const int64_t nq = 4, nkv = 2, hd = 8;
    const std::vector<int64_t> seq_start = {0, 300, 307, 440};
    const int64_t B = 3, N = seq_start.back();
    Rng rng(21, uint64_t(window + 100));
    auto randv = [&](int64_t n) {
        std::vector<real> v(static_cast<size_t>(n));
        for (auto &x : v) x = real(rng.normal());
        return v;
    };
    std::vector<real> q = randv(N * nq * hd), k = randv(N * nkv * hd), v = randv(N * nkv * hd), G = randv(N * nq * hd);
    cpu::AttnShape as{nq, nkv, hd, real(1.0 / std::sqrt(double(hd))), window};
    std::vector<real> out(size_t(N * nq * hd)), lse(size_t(N * nq));
    auto loss = [&]() {
        cpu::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), seq_start.data(), B, as);
        double l = 0;
        for (size_t i = 0; i < out.size(); ++i) l += double(out[i]) * double(G[i]);
        return l;
    };
    loss();
    std::vector<real> dq(q.size()), dk(k.size()), dv(v.size());
    cpu::attention_backward(dq.data(), dk.data(), dv.data(), G.data(), out.data(), lse.data(), q.data(), k.data(),
                            v.data(), seq_start.data(), B, as);
    const double h = 1e-6;
    for (auto [x, g, name] : {std::tuple{&q, &dq, "q"}, {&k, &dk, "k"}, {&v, &dv, "v"}}) {
        for (int i = 0; i < 60; ++i) {
            size_t idx = size_t(rng.next() % x->size());
            if (i < 4) idx = i % 2 ? x->size() - 1 - size_t(i) : size_t(i); // the first and last rows too
            const real saved = (*x)[idx];
            (*x)[idx] = saved + real(h);
            double lp = loss();
            (*x)[idx] = saved - real(h);
            double lm = loss();
            (*x)[idx] = saved;
            const double fd = (lp - lm) / (2 * h);
            EXPECT_NEAR(double((*g)[idx]), fd, 1e-7 + 1e-6 * std::fabs(fd)) << name << "[" << idx << "]";
        }
    }
}

TEST(FiniteDifferences, AttentionAcrossTilesCausal) { check_attention(0); }
TEST(FiniteDifferences, AttentionAcrossTilesWindow40) { check_attention(40); }
TEST(FiniteDifferences, AttentionAcrossTilesWindow70) { check_attention(70); }
TEST(FiniteDifferences, AttentionAcrossTilesWindow270) { check_attention(270); }

} // namespace
} // namespace zaya
