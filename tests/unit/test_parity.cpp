// Parity with the Hugging Face reference: goldens written by tools/gen_goldens.py from transformers'
// ZayaForCausalLM (fp32). Tolerance: 1e-4 max abs error on logits and on every layer's residual stream.
#include "io/legacy_names.h"
#include "io/model_io.h"
#include "model/backward.h"
#include "model/forward.h"
#include "test_helpers.h"

#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zaya {
namespace {

constexpr float kTol = 1e-4f;

struct Golden {
    std::string dir;
    nlohmann::json meta;
    std::vector<std::vector<int32_t>> tokens;
    std::string file() const { return dir + "/golden.safetensors"; }
};

Golden load_golden(const std::string &name) {
    Golden g;
    g.dir = test::golden_dir(name);
    std::ifstream in(g.dir + "/meta.json");
    g.meta = nlohmann::json::parse(in);
    g.tokens = g.meta.at("tokens").get<std::vector<std::vector<int32_t>>>();
    return g;
}

struct ModelRun {
    Batch batch;
    Activations acts;
    ForwardResult result;
};

ModelRun run_model(const Model &m, const std::vector<std::vector<int32_t>> &tokens) {
    ModelRun r{Batch::from_sequences(tokens), {}, {}};
    r.acts = Activations::plan(m.config, r.batch.num_tokens(), r.batch.num_sequences(), /*keep_all_layers=*/true);
    std::vector<int32_t> targets = r.batch.next_token_targets();
    r.result = model_forward(m, r.batch, r.acts, targets.data());
    return r;
}

void expect_matches_golden(const std::string &name, bool passthrough = false) {
    SCOPED_TRACE(name);
    Golden g = load_golden(name);
    Model m = model_load(g.dir);
    m.config.skip_passthrough = passthrough;
    ModelRun r = run_model(m, g.tokens);
    const int64_t N = r.batch.num_tokens(), D = m.config.hidden_size, V = m.config.vocab_size;

    auto logits = test::read_tensor(g.file(), passthrough ? "logits_passthrough" : "logits");
    ASSERT_EQ(logits.size(), size_t(N * V));
    EXPECT_LE(test::max_abs_diff(logits.data(), r.acts.logits, logits.size()), kTol);
    double loss = g.meta.at(passthrough ? "loss_passthrough" : "loss").get<double>();
    EXPECT_NEAR(r.result.loss, loss, 1e-5 * loss);

    for (int64_t l = 0; l < m.config.num_hidden_layers; ++l) {
        SCOPED_TRACE("layer " + std::to_string(l));
        auto choice = test::read_tensor(g.file(), "router_choice." + std::to_string(l));
        for (int64_t n = 0; n < N; ++n) ASSERT_EQ(int(choice[size_t(n)]), r.acts.layer(l).choice[n]) << "token " << n;
        if (passthrough) continue; // hidden states are recorded for the transformers semantics only
        auto hidden = test::read_tensor(g.file(), "hidden." + std::to_string(l));
        EXPECT_LE(test::max_abs_diff(hidden.data(), r.acts.layer(l).res2, size_t(N * D)), kTol);
    }
}

TEST(Parity, TinyF32) { expect_matches_golden("tiny_f32"); }
TEST(Parity, TinyBF16Batch) { expect_matches_golden("tiny_bf16"); }
TEST(Parity, SkipSlotZeroOutput) { expect_matches_golden("skip_slot"); }
TEST(Parity, SkipSlotPassthrough) { expect_matches_golden("skip_slot", /*passthrough=*/true); }
TEST(Parity, SlidingWindowBiasesUntiedHead) { expect_matches_golden("variants"); }
TEST(Parity, LegacyNames) { expect_matches_golden("legacy"); }
TEST(Parity, LongSequenceTiledAttentionWideConv) { expect_matches_golden("long"); }

TEST(Parity, GoldensExerciseWhatTheyClaim) {
    // The skip case must really choose the skip slot, and no case may sit on a near-tie (spec G).
    for (const char *name : {"tiny_f32", "tiny_bf16", "skip_slot", "variants", "legacy", "long"}) {
        Golden g = load_golden(name);
        EXPECT_GE(g.meta.at("min_router_margin").get<double>(), 1e-3) << name;
    }
    EXPECT_GT(load_golden("skip_slot").meta.at("skip_chosen").get<int>(), 0);
    EXPECT_GE(load_golden("tiny_bf16").tokens.size(), 2u);
}

TEST(Parity, LegacyNameMapIsTheReferenceBijection) {
    // name_map.json is written by the reference script (legacy name → native name, experts as "name[e]").
    Golden g = load_golden("legacy");
    std::ifstream in(g.dir + "/name_map.json");
    auto ref = nlohmann::json::parse(in).get<std::map<std::string, std::string>>();
    Model m = model_load(g.dir);
    std::map<std::string, std::string> ours;
    for (const NativeSources &ns : legacy_sources(m.config)) {
        if (ns.parts.size() == 1) {
            ours[ns.parts[0].stored_name] = ns.native_name;
            continue;
        }
        for (size_t e = 0; e < ns.parts.size(); ++e)
            ours[ns.parts[e].stored_name] = ns.native_name + "[" + std::to_string(e) + "]";
    }
    EXPECT_EQ(ours, ref);
}

TEST(Parity, BatchEqualsSequencesAlone) {
    // A varlen batch (different lengths) computes exactly what each sequence computes alone.
    Model m = model_load(test::golden_dir("variants"));
    std::vector<std::vector<int32_t>> seqs = {{5, 9, 200, 17, 3, 44, 81, 120, 7}, {11, 250}, {99, 98, 97, 96, 95, 94}};
    ModelRun batch = run_model(m, seqs);
    const int64_t V = m.config.vocab_size;
    for (size_t s = 0; s < seqs.size(); ++s) {
        ModelRun alone = run_model(m, {seqs[s]});
        const float *b = batch.acts.logits + batch.batch.seq_start[s] * V;
        EXPECT_LE(test::max_abs_diff(alone.acts.logits, b, seqs[s].size() * size_t(V)), 1e-5f) << "sequence " << s;
    }
}

TEST(Parity, ReusedActivationsGiveTheSameLogits) {
    // Inference reuses one layer's activation set; training keeps all. Both must compute the same thing.
    Golden g = load_golden("tiny_f32");
    Model m = model_load(g.dir);
    ModelRun all = run_model(m, g.tokens);
    Batch b = Batch::from_sequences(g.tokens);
    Activations one = Activations::plan(m.config, b.num_tokens(), 1, false);
    model_forward(m, b, one);
    const size_t n = size_t(b.num_tokens() * m.config.vocab_size);
    EXPECT_EQ(test::max_abs_diff(all.acts.logits, one.logits, n), 0.0f);
}

} // namespace
} // namespace zaya

namespace zaya {
namespace {

// Gradients against PyTorch autograd of the transformers model (grad.<name> in the goldens): for every trainable
// tensor, max|ours − ref| ≤ 1e-3 · max|ref|.
void expect_grads_match(const std::string &name, bool passthrough = false) {
    SCOPED_TRACE(name);
    Golden g = load_golden(name);
    Model m = model_load(g.dir);
    m.config.skip_passthrough = passthrough;
    Batch batch = Batch::from_sequences(g.tokens);
    std::vector<int32_t> targets = batch.next_token_targets();
    Activations acts = Activations::plan(m.config, batch.num_tokens(), batch.num_sequences(), true);
    model_forward(m, batch, acts, targets.data());
    GradScratch scratch = GradScratch::plan(m.config, batch.num_tokens(), batch.num_sequences());
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
    model_backward(m, batch, acts, targets.data(), scratch, grads.data());

    auto file = SafetensorsFile::open(g.file());
    int checked = 0;
    for (const ParamView &v : m.layout.views) {
        if (!v.trainable) continue;
        std::string key = (passthrough ? "grad_passthrough." : "grad.") + v.name;
        const TensorInfo *t = file->find(key);
        ASSERT_NE(t, nullptr) << "golden has no " << key;
        ASSERT_EQ(size_t(t->numel()), v.numel) << key;
        std::vector<real> ref(v.numel);
        tensor_read_f32(*t, ref.data());
        real ref_max = 0;
        for (real x : ref) ref_max = std::max(ref_max, std::fabs(x));
        const real err = test::max_abs_diff(ref.data(), grads.data() + v.offset, v.numel);
        EXPECT_LE(err, 1e-3f * ref_max + 1e-7f) << v.name << " (max |ref| " << ref_max << ")";
        ++checked;
    }
    EXPECT_EQ(checked, int(std::count_if(m.layout.views.begin(), m.layout.views.end(),
                                         [](const ParamView &v) { return v.trainable; })));
}

TEST(GradParity, TinyF32) { expect_grads_match("tiny_f32"); }
TEST(GradParity, SkipSlotZeroOutput) { expect_grads_match("skip_slot"); }
TEST(GradParity, SkipSlotPassthrough) { expect_grads_match("skip_slot", true); }
TEST(GradParity, SlidingWindowBiasesUntiedHead) { expect_grads_match("variants"); }

} // namespace
} // namespace zaya
