// The whole model on both backends: model_forward and model_backward (one source, ops/backend.h) run on the CPU
// backend and on the CUDA backend from the same random weights and varlen batch; loss, logits, routing choices
// and every parameter's gradient must agree. Without a GPU it skips and says why.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/init.h"
#include "ops/backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace zaya {
namespace {

using namespace test;

// The tiny preset with both layer types, every optional bias and an untied head with its bias: each branch of the
// model code that a backend could get wrong.
ZayaConfig full_config(bool all_options) {
    ZayaConfig c = config_preset("tiny");
    if (all_options) {
        c.layer_types[1] = LayerType::HybridSliding;
        c.sliding_window = 5;
        c.attention_bias = true;
        c.tie_word_embeddings = false;
        c.lm_head_bias = true;
        c.skip_passthrough = true;
        c.validate();
    }
    return c;
}

Batch test_batch(int64_t V) {
    std::vector<std::vector<int32_t>> seqs = {std::vector<int32_t>(13), std::vector<int32_t>(1),
                                              std::vector<int32_t>(21)};
    uint64_t x = 7;
    for (auto &s : seqs)
        for (auto &t : s) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            t = int32_t((x >> 33) % uint64_t(V));
        }
    return Batch::from_sequences(seqs);
}

struct ModelRun {
    double loss = 0;
    std::vector<float> logits, grads;
    std::vector<int32_t> choices;       // every layer's, in layer order
    std::vector<float> x_norm1, att;    // layer 0's (training activations)
    std::vector<uint16_t> x_norm1_16, att16; // their bf16 copies, where planned
};

// bf16_copies: training activations with the bf16 copies of the linears' inputs (Activations::plan).
ModelRun run_on(Backend &be, const Model &host, const Batch &batch, bool want_logits, bool bf16_copies = false) {
    const ZayaConfig &c = host.config;
    const int64_t N = batch.num_tokens(), B = batch.num_sequences();
    Model dev = model_on(host, be);
    std::vector<int32_t> targets = batch.next_token_targets();
    ModelRun r;
    if (want_logits) { // inference activations: logits stored
        Activations acts = Activations::plan(c, N, B, false, be);
        model_forward(dev, batch, acts, targets.data());
        r.logits.resize(size_t(N * c.vocab_size));
        be.download(r.logits.data(), acts.logits, r.logits.size() * sizeof(float));
    }
    Activations acts = Activations::plan(c, N, B, true, be, bf16_copies);
    GradScratch scratch = GradScratch::plan(c, N, B, be);
    RealBuffer grads = be.alloc(host.layout.total);
    r.loss = model_forward(dev, batch, acts, targets.data()).loss;
    const LayerActs &A = acts.layer(0);
    r.x_norm1.resize(size_t(N * c.hidden_size)), r.att.resize(size_t(N * c.q_dim()));
    be.download(r.x_norm1.data(), A.x_norm1, r.x_norm1.size() * sizeof(float));
    be.download(r.att.data(), A.att, r.att.size() * sizeof(float));
    if (bf16_copies) {
        r.x_norm1_16.resize(r.x_norm1.size()), r.att16.resize(r.att.size());
        be.download(r.x_norm1_16.data(), A.x_norm1_16, r.x_norm1_16.size() * sizeof(uint16_t));
        be.download(r.att16.data(), A.att16, r.att16.size() * sizeof(uint16_t));
    }
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        std::vector<int32_t> ch(static_cast<size_t>(N));
        be.download(ch.data(), acts.layer(l).choice, ch.size() * sizeof(int32_t));
        r.choices.insert(r.choices.end(), ch.begin(), ch.end());
    }
    model_backward(dev, batch, acts, targets.data(), scratch, grads.data(), 0.5f);
    r.grads.resize(host.layout.total);
    be.download(r.grads.data(), grads.data(), r.grads.size() * sizeof(float));
    return r;
}

void expect_backends_agree(bool all_options, cpu::MatmulPrecision cuda_precision, double tol) {
    Model m = Model::create(full_config(all_options));
    model_init_random(m, 11);
    const Batch batch = test_batch(m.config.vocab_size);
    Backend &gpu = cuda_backend();
    gpu.set_matmul_precision(cuda_precision);
    const ModelRun ref = run_on(cpu_backend(), m, batch, true), got = run_on(gpu, m, batch, true);
    gpu.set_matmul_precision(cpu::MatmulPrecision::F32);

    EXPECT_NEAR(got.loss, ref.loss, tol * ref.loss);
    EXPECT_EQ(got.choices, ref.choices) << "a routing decision differs";
    EXPECT_LT(rel_err(got.logits, ref.logits), tol);
    for (const ParamView &v : m.layout.views) {
        if (!v.trainable) continue;
        std::vector<float> g(got.grads.begin() + long(v.offset), got.grads.begin() + long(v.offset + v.numel));
        std::vector<float> r(ref.grads.begin() + long(v.offset), ref.grads.begin() + long(v.offset + v.numel));
        EXPECT_LT(rel_err(g, r), tol) << v.name;
    }
}

TEST_F(CudaOps, ModelForwardBackwardMatchesCpu) { expect_backends_agree(false, cpu::MatmulPrecision::F32, 1e-4); }

TEST_F(CudaOps, ModelWithEveryOptionMatchesCpu) { expect_backends_agree(true, cpu::MatmulPrecision::F32, 1e-4); }

// bf16 matmul operands on the GPU against the fp32 CPU: the bf16 level, routing kept (tiny model, clear margins).
TEST_F(CudaOps, ModelBf16MatmulsTrackFp32) { expect_backends_agree(false, cpu::MatmulPrecision::BF16, 3e-2); }

std::vector<uint16_t> rounded_bits(const std::vector<float> &v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
    return b;
}

// Under bf16 matmuls on the GPU, training's bf16 copies of the linears' inputs — written by the norms and the
// attention that produce them, read by the linears forward and backward instead of converting — hold exactly
// bf16(x), and change no bit of the loss, the routing or any gradient.
TEST_F(CudaOps, ModelBf16CopiesOfMatmulInputsChangeNothing) {
    Model m = Model::create(full_config(true));
    model_init_random(m, 13);
    const Batch batch = test_batch(m.config.vocab_size);
    Backend &gpu = cuda_backend();
    gpu.set_matmul_precision(cpu::MatmulPrecision::BF16);
    const ModelRun plain = run_on(gpu, m, batch, false), copies = run_on(gpu, m, batch, false, true);
    gpu.set_matmul_precision(cpu::MatmulPrecision::F32);
    EXPECT_EQ(copies.x_norm1_16, rounded_bits(copies.x_norm1));
    EXPECT_EQ(copies.att16, rounded_bits(copies.att));
    EXPECT_EQ(copies.loss, plain.loss);
    EXPECT_EQ(copies.choices, plain.choices);
    EXPECT_EQ(copies.grads, plain.grads);
}

// Training's loss_in_backward: on the GPU the forward skips the LM head (its backward recomputes the logits) and
// model_backward returns the loss the forward would have — the same value, and the same gradients bit for bit.
// The CPU reads the forward's stored logits, so it computes the loss in the forward as before.
TEST_F(CudaOps, TrainingLossFromTheBackward) {
    Model m = Model::create(full_config(false));
    model_init_random(m, 12);
    const Batch batch = test_batch(m.config.vocab_size);
    const std::vector<int32_t> targets = batch.next_token_targets();
    const int64_t N = batch.num_tokens(), B = batch.num_sequences();
    for (Backend *be : {&cpu_backend(), &cuda_backend()}) {
        const bool gpu = be == &cuda_backend();
        SCOPED_TRACE(gpu ? "cuda" : "cpu");
        Model dev = model_on(m, *be);
        Activations acts = Activations::plan(m.config, N, B, true, *be);
        GradScratch scratch = GradScratch::plan(m.config, N, B, *be);
        std::vector<float> grads[2];
        double forward_loss = 0, backward_loss[2] = {0, 0};
        for (int deferred = 0; deferred < 2; ++deferred) {
            RealBuffer g = be->alloc(m.layout.total);
            const ForwardResult f = model_forward(dev, batch, acts, targets.data(), deferred == 1);
            EXPECT_EQ(f.loss_deferred, gpu && deferred == 1);
            EXPECT_EQ(f.loss_tokens, N - B);
            if (deferred == 0) forward_loss = f.loss;
            backward_loss[deferred] = model_backward(dev, batch, acts, targets.data(), scratch, g.data());
            grads[deferred].resize(m.layout.total);
            be->download(grads[deferred].data(), g.data(), m.layout.total * sizeof(float));
        }
        if (gpu) {
            EXPECT_NEAR(backward_loss[1], forward_loss, 1e-6 * forward_loss);
            EXPECT_EQ(backward_loss[0], backward_loss[1]);
        } else {
            EXPECT_TRUE(std::isnan(backward_loss[0]) && std::isnan(backward_loss[1]));
        }
        EXPECT_GT(forward_loss, 1.0);
        EXPECT_EQ(grads[0], grads[1]);
    }
}

} // namespace
} // namespace zaya
