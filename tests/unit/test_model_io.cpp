// model_save / model_load: round trips (F32, BF16) and the validation of checkpoints on load: every error
// names the tensor or file at fault. Broken checkpoints are golden dirs copied into a TempDir with one change.
#include "core/dtype.h"
#include "core/error.h"
#include "io/config_json.h"
#include "io/model_io.h"
#include "io/safetensors.h"
#include "model/init.h"
#include "model/params.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;
using namespace zaya;
using zaya::test::TempDir;

namespace {

// One tensor of a checkpoint held in memory (values as fp32, stored dtype kept).
struct Stored {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    std::vector<float> data;
};

std::vector<Stored> read_all(const std::string &file) {
    auto f = SafetensorsFile::open(file);
    std::vector<Stored> out;
    for (const TensorInfo &t : f->tensors()) {
        Stored s{t.name, t.dtype, t.shape, std::vector<float>(size_t(t.numel()))};
        tensor_read_f32(t, s.data.data());
        out.push_back(std::move(s));
    }
    return out;
}

void write_all(const std::string &file, const std::vector<Stored> &tensors) {
    std::vector<TensorToWrite> w;
    for (const Stored &s : tensors) w.push_back({s.name, s.dtype, s.shape, s.data.data()});
    safetensors_write(file, w, {{"format", "pt"}});
}

Stored &find_tensor(std::vector<Stored> &ts, const std::string &name) {
    auto it = std::find_if(ts.begin(), ts.end(), [&](const Stored &s) { return s.name == name; });
    if (it == ts.end()) fail("test: no tensor '{}'", name);
    return *it;
}

void erase_tensor(std::vector<Stored> &ts, const std::string &name) {
    size_t before = ts.size();
    std::erase_if(ts, [&](const Stored &s) { return s.name == name; });
    if (ts.size() != before - 1) fail("test: no tensor '{}' to erase", name);
}

// Copies golden dir `name` (config.json + model.safetensors) to `<tmp>/model`, applies `edit` to its tensors
// and rewrites model.safetensors. Returns the model directory.
std::string broken_copy(const TempDir &tmp, const std::string &name,
                        const std::function<void(std::vector<Stored> &)> &edit) {
    const fs::path src = zaya::test::golden_dir(name), dir = tmp.path / "model";
    fs::create_directories(dir);
    fs::copy_file(src / "config.json", dir / "config.json");
    std::vector<Stored> ts = read_all((src / "model.safetensors").string());
    edit(ts);
    write_all((dir / "model.safetensors").string(), ts);
    return dir.string();
}

using test::error_of;

void expect_load_error(const std::string &dir, std::initializer_list<std::string> needles) {
    std::string msg = error_of([&] { model_load(dir); });
    SCOPED_TRACE(msg);
    for (const auto &n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}

// Both models have the same config geometry and bit-identical parameters.
void expect_same_params(const Model &a, const Model &b) {
    ASSERT_EQ(a.layout.views.size(), b.layout.views.size());
    for (size_t i = 0; i < a.layout.views.size(); ++i) {
        const ParamView &va = a.layout.views[i], &vb = b.layout.views[i];
        ASSERT_EQ(va.name, vb.name);
        ASSERT_EQ(va.shape, vb.shape);
        const auto *pa = a.params.data() + va.offset;
        const auto *pb = b.params.data() + vb.offset;
        for (size_t k = 0; k < va.numel; ++k)
            ASSERT_EQ(pa[k], pb[k]) << va.name << "[" << k << "]";
    }
}

// A tiny random model whose balancing biases are not representable in bf16.
Model random_model(const ZayaConfig &c, uint64_t seed) {
    Model m = Model::create(c);
    model_init_random(m, seed);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        auto *b = m.w.layers[size_t(l)].balancing_biases;
        for (int64_t e = 0; e <= c.num_experts; ++e) b[e] = 0.1234567f * float(e + 1) - 0.3f + 1e-3f * float(l);
        EXPECT_NE(bf16_to_f32(f32_to_bf16(b[0])), b[0]); // the test needs a value bf16 cannot hold
    }
    return m;
}

ZayaConfig tiny_with_everything() {
    ZayaConfig c = config_preset("tiny");
    c.tie_word_embeddings = false;
    c.lm_head_bias = true;
    c.attention_bias = true;
    c.num_hidden_layers = 3;
    c.layer_types = {LayerType::Hybrid, LayerType::HybridSliding, LayerType::Hybrid};
    c.sliding_window = 5;
    c.validate();
    return c;
}

} // namespace

// ---- round trips ----

TEST(ModelIoTest, RoundTripF32IsExact) {
    TempDir tmp;
    Model m = random_model(config_preset("tiny"), 7);
    model_save(m, tmp.str("m"), DType::F32);
    EXPECT_TRUE(fs::exists(tmp.str("m/config.json")));
    EXPECT_TRUE(fs::exists(tmp.str("m/model.safetensors")));
    Model back = model_load(tmp.str("m"));
    EXPECT_EQ(back.config.dtype, "float32");
    expect_same_params(m, back);
    auto f = SafetensorsFile::open(tmp.str("m/model.safetensors"));
    EXPECT_EQ(f->tensors().size(), m.layout.views.size());
    for (const TensorInfo &t : f->tensors()) EXPECT_EQ(t.dtype, DType::F32) << t.name;
}

TEST(ModelIoTest, RoundTripF32WithOptionalTensors) {
    TempDir tmp;
    Model m = random_model(tiny_with_everything(), 8);
    // Make the optional biases non-zero so a swap would show.
    for (const ParamView &v : m.layout.views)
        if (v.name.ends_with("proj.bias") || v.name == "lm_head.bias")
            for (size_t k = 0; k < v.numel; ++k) m.params.data()[v.offset + k] = 0.01f * float(k % 7) - 0.02f;
    model_save(m, tmp.str("m"), DType::F32);
    Model back = model_load(tmp.str("m"));
    EXPECT_FALSE(back.config.tie_word_embeddings);
    EXPECT_TRUE(back.config.lm_head_bias);
    EXPECT_TRUE(back.config.attention_bias);
    EXPECT_EQ(back.config.sliding_window, 5);
    expect_same_params(m, back);
    auto f = SafetensorsFile::open(tmp.str("m/model.safetensors"));
    EXPECT_NE(f->find("lm_head.weight"), nullptr);
    EXPECT_NE(f->find("lm_head.bias"), nullptr);
    EXPECT_NE(f->find("model.layers.0.self_attn.qkv_proj.q_proj.bias"), nullptr);
}

TEST(ModelIoTest, RoundTripBf16RoundsWeightsAndKeepsBalancingBiasesExact) {
    TempDir tmp;
    Model m = random_model(config_preset("tiny"), 9);
    model_save(m, tmp.str("m"), DType::BF16);
    Model back = model_load(tmp.str("m"));
    EXPECT_EQ(back.config.dtype, "bfloat16");
    ASSERT_EQ(back.layout.views.size(), m.layout.views.size());
    size_t changed = 0;
    for (size_t i = 0; i < m.layout.views.size(); ++i) {
        const ParamView &v = m.layout.views[i];
        const auto *a = m.params.data() + v.offset;
        const auto *b = back.params.data() + v.offset;
        for (size_t k = 0; k < v.numel; ++k) {
            if (!v.trainable) {
                ASSERT_EQ(b[k], a[k]) << v.name << "[" << k << "] must stay exact fp32";
            } else {
                // Round to nearest even: the loaded value is the bf16 rounding of the saved one, which is
                // within half a bf16 ulp (2^-9 relative).
                ASSERT_EQ(b[k], bf16_to_f32(f32_to_bf16(a[k]))) << v.name << "[" << k << "]";
                ASSERT_LE(std::fabs(b[k] - a[k]), std::ldexp(std::fabs(a[k]), -8)) << v.name << "[" << k << "]";
                changed += b[k] != a[k];
            }
        }
    }
    EXPECT_GT(changed, 0u); // random weights are not all bf16-representable
    auto f = SafetensorsFile::open(tmp.str("m/model.safetensors"));
    for (const TensorInfo &t : f->tensors())
        EXPECT_EQ(t.dtype, t.name.ends_with("balancing_biases") ? DType::F32 : DType::BF16) << t.name;
    // Saving the loaded bf16 model again in bf16 changes nothing.
    model_save(back, tmp.str("m2"), DType::BF16);
    expect_same_params(back, model_load(tmp.str("m2")));
}

TEST(ModelIoTest, SaveOverwritesAnExistingModel) {
    TempDir tmp;
    model_save(random_model(config_preset("tiny"), 1), tmp.str("m"), DType::F32);
    Model m2 = random_model(config_preset("tiny"), 2);
    model_save(m2, tmp.str("m"), DType::F32);
    expect_same_params(m2, model_load(tmp.str("m")));
    for (const auto &e : fs::directory_iterator(tmp.str("m"))) // no temp files left behind
        EXPECT_TRUE(e.path().filename() == "config.json" || e.path().filename() == "model.safetensors") << e.path();
}

TEST(ModelIoTest, GoldenCopyLoadsLikeTheGolden) {
    // The rewrite helper itself must not change anything.
    TempDir tmp;
    std::string dir = broken_copy(tmp, "tiny_f32", [](std::vector<Stored> &) {});
    expect_same_params(model_load(zaya::test::golden_dir("tiny_f32")), model_load(dir));
}

// ---- broken checkpoints ----

TEST(ModelIoTest, MissingTensor) {
    TempDir tmp;
    const std::string name = "model.layers.1.self_attn.o_proj.weight";
    std::string dir = broken_copy(tmp, "tiny_f32", [&](std::vector<Stored> &ts) { erase_tensor(ts, name); });
    expect_load_error(dir, {dir, "missing", name, "[64, 128]"});
}

TEST(ModelIoTest, MissingFinalNorm) {
    TempDir tmp;
    std::string dir = broken_copy(tmp, "tiny_f32", [](std::vector<Stored> &ts) { erase_tensor(ts, "model.norm.weight"); });
    expect_load_error(dir, {"missing", "model.norm.weight"});
}

TEST(ModelIoTest, WrongShape) {
    TempDir tmp;
    const std::string name = "model.layers.2.self_attn.qkv_proj.q_proj.weight"; // [128, 64]
    std::string dir = broken_copy(tmp, "tiny_f32", [&](std::vector<Stored> &ts) { find_tensor(ts, name).shape = {64, 128}; });
    expect_load_error(dir, {"model.safetensors", name, "[64, 128]", "[128, 64]"});
}

TEST(ModelIoTest, WrongRank) {
    TempDir tmp;
    const std::string name = "model.layers.0.mlp.experts.down_proj"; // [4, 64, 32]
    std::string dir = broken_copy(tmp, "tiny_f32", [&](std::vector<Stored> &ts) { find_tensor(ts, name).shape = {256, 32}; });
    expect_load_error(dir, {"model.safetensors", name, "[256, 32]", "[4, 64, 32]"});
}

TEST(ModelIoTest, ExtraUnknownTensor) {
    TempDir tmp;
    const std::string name = "model.layers.0.self_attn.rotary_emb.inv_freq";
    std::string dir = broken_copy(tmp, "tiny_f32",
                                  [&](std::vector<Stored> &ts) { ts.push_back({name, DType::F32, {8}, std::vector<float>(8, 1.0f)}); });
    expect_load_error(dir, {"unexpected", name, "model.safetensors"});
}

TEST(ModelIoTest, TensorOfAbsentOptionalFeature) {
    // attention_bias is false in tiny_f32: a q_proj.bias is an unknown tensor, not silently dropped.
    TempDir tmp;
    const std::string name = "model.layers.0.self_attn.qkv_proj.q_proj.bias";
    std::string dir = broken_copy(tmp, "tiny_f32", [&](std::vector<Stored> &ts) {
        ts.push_back({name, DType::F32, {128}, std::vector<float>(128, 0.0f)});
    });
    expect_load_error(dir, {"unexpected", name});
}

TEST(ModelIoTest, TiedLmHeadEqualToEmbeddingIsAccepted) {
    TempDir tmp;
    std::string dir = broken_copy(tmp, "tiny_f32", [](std::vector<Stored> &ts) {
        Stored head = find_tensor(ts, "model.embed_tokens.weight");
        head.name = "lm_head.weight";
        ts.push_back(std::move(head));
    });
    Model m = model_load(dir);
    EXPECT_TRUE(m.config.tie_word_embeddings);
    expect_same_params(model_load(zaya::test::golden_dir("tiny_f32")), m);
}

TEST(ModelIoTest, TiedLmHeadDifferentFromEmbedding) {
    TempDir tmp;
    std::string dir = broken_copy(tmp, "tiny_f32", [](std::vector<Stored> &ts) {
        Stored head = find_tensor(ts, "model.embed_tokens.weight");
        head.name = "lm_head.weight";
        head.data[1000] += 0.5f;
        ts.push_back(std::move(head));
    });
    expect_load_error(dir, {"lm_head.weight", "model.embed_tokens.weight", "tie_word_embeddings", "model.safetensors"});
}

TEST(ModelIoTest, TiedLmHeadWrongShape) {
    TempDir tmp;
    std::string dir = broken_copy(tmp, "tiny_f32", [](std::vector<Stored> &ts) {
        ts.push_back({"lm_head.weight", DType::F32, {64, 256}, find_tensor(ts, "model.embed_tokens.weight").data});
    });
    expect_load_error(dir, {"lm_head.weight", "[64, 256]", "[256, 64]"});
}

TEST(ModelIoTest, UntiedModelMissingLmHead) {
    TempDir tmp;
    std::string dir = broken_copy(tmp, "variants", [](std::vector<Stored> &ts) { erase_tensor(ts, "lm_head.weight"); });
    expect_load_error(dir, {"missing", "lm_head.weight"});
}

TEST(ModelIoTest, NaNValue) {
    TempDir tmp;
    const std::string name = "model.layers.1.mlp.experts.gate_up_proj";
    std::string dir = broken_copy(tmp, "tiny_f32", [&](std::vector<Stored> &ts) {
        find_tensor(ts, name).data[123] = std::numeric_limits<float>::quiet_NaN();
    });
    expect_load_error(dir, {"model.safetensors", name, "non-finite", "123"});
}

TEST(ModelIoTest, InfValueInBf16Checkpoint) {
    TempDir tmp;
    const std::string name = "model.layers.0.input_layernorm.weight";
    std::string dir = broken_copy(tmp, "tiny_bf16", [&](std::vector<Stored> &ts) {
        Stored &t = find_tensor(ts, name);
        ASSERT_EQ(t.dtype, DType::BF16);
        t.data[3] = -std::numeric_limits<float>::infinity();
    });
    expect_load_error(dir, {"model.safetensors", name, "non-finite", "3"});
}

TEST(ModelIoTest, NaNInBalancingBiases) {
    TempDir tmp;
    const std::string name = "model.layers.2.mlp.gate.balancing_biases";
    std::string dir = broken_copy(tmp, "tiny_f32", [&](std::vector<Stored> &ts) {
        find_tensor(ts, name).data[0] = std::numeric_limits<float>::quiet_NaN();
    });
    expect_load_error(dir, {name, "non-finite"});
}

TEST(ModelIoTest, LegacyGoldenCopyLoads) {
    TempDir tmp;
    std::string dir = broken_copy(tmp, "legacy", [](std::vector<Stored> &) {});
    Model m = model_load(dir);
    EXPECT_TRUE(m.config.legacy_layout);
    expect_same_params(model_load(zaya::test::golden_dir("legacy")), m);
}

TEST(ModelIoTest, LegacyMissingOneExpertMatrix) {
    TempDir tmp;
    const std::string name = "model.layers.3.zaya_block.experts.local_experts.2.linear_fc1.weight";
    std::string dir = broken_copy(tmp, "legacy", [&](std::vector<Stored> &ts) { erase_tensor(ts, name); });
    expect_load_error(dir, {"missing", name, "[64, 64]"});
}

TEST(ModelIoTest, LegacyExpertWrongShape) {
    TempDir tmp;
    const std::string name = "model.layers.5.zaya_block.experts.local_experts.0.linear_fc2.weight"; // [64, 32]
    std::string dir = broken_copy(tmp, "legacy", [&](std::vector<Stored> &ts) { find_tensor(ts, name).shape = {32, 64}; });
    expect_load_error(dir, {"model.safetensors", name, "[32, 64]", "[64, 32]"});
}

TEST(ModelIoTest, LegacyCheckpointWithANativeName) {
    // A native name in a legacy checkpoint is unknown there.
    TempDir tmp;
    const std::string name = "model.norm.weight";
    std::string dir = broken_copy(tmp, "legacy", [&](std::vector<Stored> &ts) {
        ts.push_back({name, DType::F32, {64}, std::vector<float>(64, 1.0f)});
    });
    expect_load_error(dir, {"unexpected", name});
}

// ---- directories ----

TEST(ModelIoTest, DirectoryWithoutConfig) {
    TempDir tmp;
    fs::copy_file(zaya::test::golden_dir("tiny_f32") + "/model.safetensors", tmp.str("model.safetensors"));
    expect_load_error(tmp.str(), {tmp.str(), "config.json"});
}

TEST(ModelIoTest, DirectoryWithoutWeights) {
    TempDir tmp;
    fs::copy_file(zaya::test::golden_dir("tiny_f32") + "/config.json", tmp.str("config.json"));
    expect_load_error(tmp.str(), {tmp.str(), "model.safetensors"});
}

TEST(ModelIoTest, NonExistentDirectory) {
    TempDir tmp;
    const std::string dir = tmp.str("does/not/exist");
    expect_load_error(dir, {dir});
}

TEST(ModelIoTest, FileInsteadOfDirectory) {
    const std::string file = zaya::test::golden_dir("tiny_f32") + "/model.safetensors";
    expect_load_error(file, {file});
}

TEST(ModelIoTest, BadConfigInDirectory) {
    TempDir tmp;
    std::string dir = broken_copy(tmp, "tiny_f32", [](std::vector<Stored> &) {});
    std::ofstream(dir + "/config.json") << "{\"model_type\": \"zaya\"";
    expect_load_error(dir, {dir + "/config.json", "JSON"});
}

// ---- sharded checkpoints ----

namespace {

// Splits `tensors` into two shard files plus model.safetensors.index.json in `dir` (no model.safetensors).
void write_sharded(const std::string &dir, const std::vector<Stored> &tensors) {
    const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
    std::vector<Stored> a, b;
    nlohmann::json wm = nlohmann::json::object();
    for (size_t i = 0; i < tensors.size(); ++i) {
        // Not a contiguous split: every other tensor, so both shards hold parts of every layer.
        (i % 2 ? b : a).push_back(tensors[i]);
        wm[tensors[i].name] = i % 2 ? s2 : s1;
    }
    write_all(dir + "/" + s1, a);
    write_all(dir + "/" + s2, b);
    std::ofstream(dir + "/model.safetensors.index.json") << nlohmann::json{{"metadata", {{"total_size", 0}}}, {"weight_map", wm}}.dump(2);
}

} // namespace

TEST(ModelIoTest, ShardedCheckpointLoadsIdentically) {
    for (const char *golden : {"tiny_f32", "tiny_bf16", "legacy"}) {
        SCOPED_TRACE(golden);
        TempDir tmp;
        const fs::path src = zaya::test::golden_dir(golden);
        fs::copy_file(src / "config.json", tmp.path / "config.json");
        write_sharded(tmp.str(), read_all((src / "model.safetensors").string()));
        ASSERT_FALSE(fs::exists(tmp.path / "model.safetensors"));
        expect_same_params(model_load(src.string()), model_load(tmp.str()));
    }
}

TEST(ModelIoTest, ShardedCheckpointMissingShard) {
    TempDir tmp;
    const fs::path src = zaya::test::golden_dir("tiny_f32");
    fs::copy_file(src / "config.json", tmp.path / "config.json");
    write_sharded(tmp.str(), read_all((src / "model.safetensors").string()));
    fs::remove(tmp.path / "model-00002-of-00002.safetensors");
    expect_load_error(tmp.str(), {"model.safetensors.index.json", "model-00002-of-00002.safetensors"});
}

TEST(ModelIoTest, ShardedCheckpointMissingTensor) {
    TempDir tmp;
    const fs::path src = zaya::test::golden_dir("tiny_f32");
    fs::copy_file(src / "config.json", tmp.path / "config.json");
    std::vector<Stored> ts = read_all((src / "model.safetensors").string());
    const std::string name = "model.layers.0.mlp.gate.router_mlp.fc2.weight";
    erase_tensor(ts, name);
    write_sharded(tmp.str(), ts);
    expect_load_error(tmp.str(), {"missing", name});
}
