// ZayaConfig: parsing of HF config.json (native and legacy schema), validation errors, presets and
// parameter counts (spec §1.1, §1.2, A.8).
#include "core/error.h"
#include "io/config_json.h"
#include "model/config.h"
#include "model/params.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>

using namespace zaya;
using nlohmann::json;

namespace {

// Zyphra/ZAYA1-8B config.json (native 40-layer schema), every field of spec §1.1, verbatim values.
const char *const kZaya8bNative = R"({
  "architectures": ["ZayaForCausalLM"],
  "model_type": "zaya",
  "vocab_size": 262272,
  "hidden_size": 2048,
  "num_hidden_layers": 40,
  "layer_types": ["hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid",
                  "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid",
                  "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid",
                  "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid", "hybrid"],
  "num_attention_heads": 8,
  "num_key_value_heads": 2,
  "head_dim": 128,
  "attention_bias": false,
  "attention_dropout": 0.0,
  "cca_time0": 2,
  "cca_time1": 2,
  "hidden_act": "silu",
  "moe_intermediate_size": 2048,
  "num_experts": 16,
  "num_experts_per_tok": 1,
  "router_hidden_size": 256,
  "rms_norm_eps": 1e-05,
  "max_position_embeddings": 131072,
  "partial_rotary_factor": 0.5,
  "rope_parameters": {
    "hybrid": {"rope_type": "default", "rope_theta": 5000000, "partial_rotary_factor": 0.5},
    "hybrid_sliding": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "rope_type": "default"
  },
  "sliding_window": null,
  "tie_word_embeddings": true,
  "lm_head_bias": false,
  "initializer_range": 0.02,
  "output_router_logits": false,
  "use_cache": true,
  "pad_token_id": 0,
  "bos_token_id": 2,
  "eos_token_id": 106,
  "dtype": "bfloat16"
})";

// Zyphra/ZAYA1-8B-legacy config.json (80 Megatron half-layers), the fields of spec §1.2. §1.2 does not list
// `architectures` / `model_type`; every HF config carries them and zaya requires model_type "zaya".
const char *const kZaya8bLegacy = R"({
  "architectures": ["ZayaForCausalLM"],
  "model_type": "zaya",
  "activation_func": "swiglu",
  "activation_func_fp8_input_store": false,
  "add_bias_linear": false,
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bias_activation_fusion": true,
  "bos_token_id": 2,
  "cca": true,
  "dtype": "bfloat16",
  "eos_token_id": 106,
  "ffn_hidden_size": 4096,
  "gated_linear_unit": true,
  "hidden_size": 2048,
  "head_dim": 128,
  "kv_channels": 128,
  "lm_head_bias": false,
  "mamba_cache_dtype": "float32",
  "max_position_embeddings": 131072,
  "moe_router_topk": 1,
  "norm_epsilon": 1e-05,
  "normalization": "RMSNorm",
  "num_attention_heads": 8,
  "num_experts": 16,
  "num_hidden_layers": 80,
  "num_key_value_heads": 2,
  "num_query_groups": 2,
  "pad_token_id": 0,
  "partial_rotary_factor": 0.5,
  "residual_in_fp32": true,
  "rope_scaling": false,
  "rope_theta": 5000000,
  "scale_residual_merge": true,
  "sliding_window": null,
  "use_cache": true,
  "vocab_size": 262272,
  "zaya_mlp_expansion": 256,
  "zaya_use_eda": true,
  "zaya_use_mod": true
})";

const std::string kSource = "ZAYA1-8B/config.json";

json native_8b() { return json::parse(kZaya8bNative); }
json legacy_8b() { return json::parse(kZaya8bLegacy); }

using test::error_of;

// Applies `edit` to `base`, parses, and expects a zaya::Error naming the source file and every needle.
void expect_config_error(json base, const std::function<void(json &)> &edit,
                         std::initializer_list<std::string> needles) {
    edit(base);
    std::string msg = error_of([&] { config_from_json(base, kSource); });
    SCOPED_TRACE(msg);
    if (msg.empty()) return;
    EXPECT_NE(msg.find(kSource), std::string::npos) << "source not named in: " << msg;
    for (const auto &n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
}
void expect_native_error(const std::function<void(json &)> &edit, std::initializer_list<std::string> needles) {
    expect_config_error(native_8b(), edit, needles);
}

// Every field of ZayaConfig is equal.
void expect_same_config(const ZayaConfig &a, const ZayaConfig &b) {
    EXPECT_EQ(a.vocab_size, b.vocab_size);
    EXPECT_EQ(a.hidden_size, b.hidden_size);
    EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
    EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
    EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
    EXPECT_EQ(a.head_dim, b.head_dim);
    EXPECT_EQ(a.attention_bias, b.attention_bias);
    EXPECT_EQ(a.attention_dropout, b.attention_dropout);
    EXPECT_EQ(a.cca_time0, b.cca_time0);
    EXPECT_EQ(a.cca_time1, b.cca_time1);
    EXPECT_EQ(a.hidden_act, b.hidden_act);
    EXPECT_EQ(a.moe_intermediate_size, b.moe_intermediate_size);
    EXPECT_EQ(a.num_experts, b.num_experts);
    EXPECT_EQ(a.num_experts_per_tok, b.num_experts_per_tok);
    EXPECT_EQ(a.router_hidden_size, b.router_hidden_size);
    EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
    EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
    EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
    EXPECT_EQ(a.layer_types, b.layer_types);
    for (auto [ra, rb] : {std::pair{&a.rope_hybrid, &b.rope_hybrid}, std::pair{&a.rope_sliding, &b.rope_sliding}}) {
        EXPECT_EQ(ra->rope_type, rb->rope_type);
        EXPECT_EQ(ra->rope_theta, rb->rope_theta);
        EXPECT_EQ(ra->partial_rotary_factor, rb->partial_rotary_factor);
    }
    EXPECT_EQ(a.sliding_window, b.sliding_window);
    EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
    EXPECT_EQ(a.lm_head_bias, b.lm_head_bias);
    EXPECT_EQ(a.initializer_range, b.initializer_range);
    EXPECT_EQ(a.pad_token_id, b.pad_token_id);
    EXPECT_EQ(a.bos_token_id, b.bos_token_id);
    EXPECT_EQ(a.eos_token_id, b.eos_token_id);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.skip_passthrough, b.skip_passthrough);
    EXPECT_EQ(a.legacy_layout, b.legacy_layout);
}

// The ZAYA1-8B geometry shared by the native and the legacy config.
void expect_8b_geometry(const ZayaConfig &c) {
    EXPECT_EQ(c.vocab_size, 262272);
    EXPECT_EQ(c.hidden_size, 2048);
    EXPECT_EQ(c.num_hidden_layers, 40);
    ASSERT_EQ(c.layer_types.size(), 40u);
    for (LayerType t : c.layer_types) EXPECT_EQ(t, LayerType::Hybrid);
    EXPECT_EQ(c.num_attention_heads, 8);
    EXPECT_EQ(c.num_key_value_heads, 2);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.attention_dropout, 0.0);
    EXPECT_EQ(c.cca_time0, 2);
    EXPECT_EQ(c.cca_time1, 2);
    EXPECT_EQ(c.hidden_act, "silu");
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.num_experts, 16);
    EXPECT_EQ(c.num_experts_per_tok, 1);
    EXPECT_EQ(c.router_hidden_size, 256);
    EXPECT_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_EQ(c.max_position_embeddings, 131072);
    EXPECT_EQ(c.partial_rotary_factor, 0.5);
    EXPECT_EQ(c.rope_hybrid.rope_type, "default");
    EXPECT_EQ(c.rope_hybrid.rope_theta, 5e6);
    EXPECT_EQ(c.rope_hybrid.partial_rotary_factor, 0.5);
    EXPECT_EQ(c.rope_sliding.rope_type, "default");
    EXPECT_EQ(c.rope_sliding.rope_theta, 1e4);
    EXPECT_EQ(c.rope_sliding.partial_rotary_factor, 0.5);
    EXPECT_FALSE(c.sliding_window.has_value());
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_FALSE(c.lm_head_bias);
    EXPECT_EQ(c.pad_token_id, 0);
    EXPECT_EQ(c.bos_token_id, 2);
    EXPECT_EQ(c.eos_token_id, 106);
    EXPECT_EQ(c.dtype, "bfloat16");
    EXPECT_FALSE(c.skip_passthrough);
    // Derived sizes of spec §1.4.
    EXPECT_EQ(c.q_dim(), 1024);
    EXPECT_EQ(c.kv_dim(), 256);
    EXPECT_EQ(c.conv_channels(), 1280);
    EXPECT_EQ(c.conv_padding(), 2);
    EXPECT_EQ(c.router_classes(), 17);
    for (int64_t l = 0; l < 40; ++l) EXPECT_EQ(c.rotary_dim(l), 64);
}

// A config that differs from every default: sliding layers, biases, untied head, per-type rope, ...
ZayaConfig unusual_config() {
    ZayaConfig c = config_preset("tiny");
    c.num_hidden_layers = 3;
    c.layer_types = {LayerType::Hybrid, LayerType::HybridSliding, LayerType::Hybrid};
    c.sliding_window = 7;
    c.attention_bias = true;
    c.attention_dropout = 0.125;
    c.cca_time0 = 3;
    c.cca_time1 = 4;
    c.rms_norm_eps = 1e-6;
    c.max_position_embeddings = 777;
    c.rope_hybrid = {"default", 12345.5, 1.0};
    c.rope_sliding = {"default", 500.0, 0.25};
    c.partial_rotary_factor = 1.0;
    c.tie_word_embeddings = false;
    c.lm_head_bias = true;
    c.initializer_range = 0.0123;
    c.pad_token_id = 1;
    c.bos_token_id = 3;
    c.eos_token_id = 7;
    c.dtype = "float32";
    c.skip_passthrough = true;
    c.validate();
    return c;
}

} // namespace

// ---- the real ZAYA1-8B configs ----

TEST(ConfigTest, Zaya8bNativeParses) {
    ZayaConfig c = config_from_json(native_8b(), kSource);
    expect_8b_geometry(c);
    EXPECT_FALSE(c.legacy_layout);
    EXPECT_EQ(c.initializer_range, 0.02);
}

TEST(ConfigTest, Zaya8bParamCounts) {
    ParamCounts pc = param_counts(config_from_json(native_8b(), kSource));
    // Spec A.8. Per layer: CCA 5,575,682 + router 660,992 + 16 experts 201,326,592 + norms/res-scales 20,480
    // = 207,583,746; ×40 = 8,303,349,840; layer 0 has no router_states_scale (−256); plus the input
    // scale+bias (2·2048) and the final norm (2048): 8,303,349,840 − 256 + 6,144 = 8,303,355,728.
    EXPECT_EQ(pc.non_embedding, 8'303'355'728);
    EXPECT_EQ(pc.embedding, 537'133'056); // 262272 × 2048
    EXPECT_EQ(pc.lm_head, 0);             // tied
    EXPECT_EQ(pc.total, 8'303'355'728 + 537'133'056);
    EXPECT_EQ(pc.experts, int64_t(40) * 201'326'592);
    // Active per token: attention 5,575,682 + router 660,992 + one expert 12,582,912 + norms 20,480
    // = 18,840,066 per layer; ×40 = 753,602,640; − 256 (layer 0's router_states_scale) + 6,144 (input
    // scale/bias, final norm) = 753,608,528 (spec: "753.6M").
    EXPECT_EQ(pc.active_non_embedding, 753'608'528);
    // Same thing from the totals: all experts out, one back in.
    EXPECT_EQ(pc.active_non_embedding, pc.non_embedding - pc.experts + pc.experts / 16);
}

TEST(ConfigTest, Zaya8bLegacyParsesToTheSameGeometry) {
    ZayaConfig legacy = config_from_json(legacy_8b(), kSource);
    expect_8b_geometry(legacy);
    EXPECT_TRUE(legacy.legacy_layout);
    ZayaConfig native = config_from_json(native_8b(), kSource);
    legacy.legacy_layout = false;
    expect_same_config(legacy, native);
    ParamCounts a = param_counts(legacy), b = param_counts(native);
    EXPECT_EQ(a.total, b.total);
    EXPECT_EQ(a.active_non_embedding, b.active_non_embedding);
}

TEST(ConfigTest, Zaya8bPresetMatchesTheRealConfig) {
    ZayaConfig preset = config_preset("zaya1-8b");
    ZayaConfig real = config_from_json(native_8b(), kSource);
    preset.dtype = real.dtype; // the preset trains in float32
    expect_same_config(preset, real);
}

TEST(ConfigTest, EosTokenIdMayBeAList) {
    json j = native_8b();
    j["eos_token_id"] = {1, 106};
    EXPECT_EQ(config_from_json(j, kSource).eos_token_id, 1);
}

TEST(ConfigTest, TorchDtypeIsAcceptedForDtype) {
    json j = native_8b();
    j.erase("dtype");
    j["torch_dtype"] = "float32";
    EXPECT_EQ(config_from_json(j, kSource).dtype, "float32");
}

// ---- round trip ----

TEST(ConfigTest, RoundTripPreservesEveryField) {
    ZayaConfig c = unusual_config();
    json j = config_to_json(c);
    EXPECT_EQ(j.at("model_type"), "zaya");
    EXPECT_EQ(j.at("layer_types"), json({"hybrid", "hybrid_sliding", "hybrid"}));
    EXPECT_EQ(j.at("rope_parameters").at("hybrid_sliding").at("rope_theta"), 500.0);
    expect_same_config(config_from_json(j, "roundtrip"), c);
    // Through text and a file too.
    expect_same_config(config_from_json(json::parse(j.dump(2)), "roundtrip"), c);
    zaya::test::TempDir tmp;
    config_save(c, tmp.str("config.json"));
    expect_same_config(config_load(tmp.str("config.json")), c);
}

TEST(ConfigTest, RoundTripOfNativeAndLegacy8b) {
    ZayaConfig native = config_from_json(native_8b(), kSource);
    expect_same_config(config_from_json(config_to_json(native), "roundtrip"), native);
    // config_to_json writes the native schema: the legacy config comes back as the native one.
    ZayaConfig legacy = config_from_json(legacy_8b(), kSource);
    ZayaConfig back = config_from_json(config_to_json(legacy), "roundtrip");
    EXPECT_FALSE(back.legacy_layout);
    expect_same_config(back, native);
}

TEST(ConfigTest, RoundTripOfGoldenConfigs) {
    for (const char *name : {"tiny_f32", "tiny_bf16", "skip_slot", "variants", "long", "legacy"}) {
        SCOPED_TRACE(name);
        ZayaConfig c = config_load(zaya::test::golden_dir(name) + "/config.json");
        ZayaConfig back = config_from_json(config_to_json(c), "roundtrip");
        EXPECT_EQ(back.legacy_layout, false);
        back.legacy_layout = c.legacy_layout;
        expect_same_config(back, c);
    }
}

// ---- presets ----

TEST(ConfigTest, EveryPresetValidatesAndRoundTrips) {
    std::vector<std::string> names = config_preset_names();
    ASSERT_FALSE(names.empty());
    for (const auto &name : names) {
        SCOPED_TRACE(name);
        ZayaConfig c = config_preset(name);
        EXPECT_NO_THROW(c.validate());
        EXPECT_EQ(int64_t(c.layer_types.size()), c.num_hidden_layers);
        expect_same_config(config_from_json(config_to_json(c), name), c);
    }
}

TEST(ConfigTest, UnknownPresetListsTheKnownNames) {
    std::string msg = error_of([] { config_preset("llama-7b"); });
    EXPECT_NE(msg.find("llama-7b"), std::string::npos) << msg;
    for (const auto &name : config_preset_names()) EXPECT_NE(msg.find(name), std::string::npos) << msg;
}

// ---- errors: model type and required fields ----

TEST(ConfigErrorTest, ModelTypeMissing) {
    expect_native_error([](json &j) { j.erase("model_type"); }, {"model_type", "(missing)"});
}

TEST(ConfigErrorTest, ModelTypeLlama) {
    expect_native_error([](json &j) { j["model_type"] = "llama"; }, {"model_type", "llama"});
}

TEST(ConfigErrorTest, NotAnObject) {
    expect_config_error(json::array({1, 2}), [](json &) {}, {"object"});
}

TEST(ConfigErrorTest, EachRequiredFieldMissing) {
    for (const char *field : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                              "num_key_value_heads", "num_experts", "moe_intermediate_size"}) {
        SCOPED_TRACE(field);
        expect_native_error([&](json &j) { j.erase(field); }, {field, "missing"});
        // null counts as missing
        expect_native_error([&](json &j) { j[field] = nullptr; }, {field, "missing"});
    }
}

// ---- errors: wrong JSON types ----

TEST(ConfigErrorTest, StringForAnInteger) {
    expect_native_error([](json &j) { j["vocab_size"] = "262272"; }, {"vocab_size", "integer"});
}

TEST(ConfigErrorTest, FloatForAnInteger) {
    expect_native_error([](json &j) { j["hidden_size"] = 2048.5; }, {"hidden_size", "integer"});
}

TEST(ConfigErrorTest, BoolForAnInteger) {
    expect_native_error([](json &j) { j["num_experts"] = true; }, {"num_experts", "integer"});
}

TEST(ConfigErrorTest, StringForANumber) {
    expect_native_error([](json &j) { j["rms_norm_eps"] = "1e-5"; }, {"rms_norm_eps", "number"});
}

TEST(ConfigErrorTest, StringForABool) {
    expect_native_error([](json &j) { j["tie_word_embeddings"] = "true"; }, {"tie_word_embeddings", "true or false"});
}

TEST(ConfigErrorTest, NumberForAString) {
    expect_native_error([](json &j) { j["hidden_act"] = 1; }, {"hidden_act", "string"});
}

TEST(ConfigErrorTest, StringForTokenId) {
    expect_native_error([](json &j) { j["eos_token_id"] = "106"; }, {"eos_token_id"});
    expect_native_error([](json &j) { j["eos_token_id"] = json::array(); }, {"eos_token_id"});
}

TEST(ConfigErrorTest, LayerTypesNotAList) {
    expect_native_error([](json &j) { j["layer_types"] = "hybrid"; }, {"layer_types", "list"});
}

TEST(ConfigErrorTest, SlidingWindowNotAnInteger) {
    expect_native_error([](json &j) { j["sliding_window"] = "4096"; }, {"sliding_window", "integer"});
}

TEST(ConfigErrorTest, RopeParametersWrongTypes) {
    expect_native_error([](json &j) { j["rope_parameters"] = json::array(); }, {"rope_parameters", "object"});
    expect_native_error([](json &j) { j["rope_parameters"]["hybrid"] = 5; }, {"rope_parameters.hybrid", "object"});
    expect_native_error([](json &j) { j["rope_parameters"]["hybrid"]["rope_theta"] = "5e6"; },
                        {"rope_parameters.hybrid.rope_theta", "number"});
    expect_native_error([](json &j) { j["rope_parameters"]["hybrid_sliding"]["rope_type"] = 1; },
                        {"rope_parameters.hybrid_sliding.rope_type", "string"});
}

// ---- errors: values ----

TEST(ConfigErrorTest, ZeroOrNegativeSizes) {
    for (const char *field : {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                              "num_key_value_heads", "head_dim", "moe_intermediate_size", "num_experts",
                              "router_hidden_size", "max_position_embeddings", "cca_time0", "cca_time1"}) {
        for (int64_t v : {int64_t(0), int64_t(-1), int64_t(-2048)}) {
            SCOPED_TRACE(std::string(field) + " = " + std::to_string(v));
            expect_native_error(
                [&](json &j) {
                    j[field] = v;
                    if (std::string(field) == "num_hidden_layers") j.erase("layer_types");
                },
                {field, "positive"});
        }
    }
}

TEST(ConfigErrorTest, HeadsNotDivisibleByKvHeads) {
    expect_native_error([](json &j) { j["num_key_value_heads"] = 3; }, {"num_attention_heads", "num_key_value_heads"});
}

TEST(ConfigErrorTest, OddHeadDim) {
    expect_native_error([](json &j) { j["head_dim"] = 127; }, {"head_dim", "even"});
}

TEST(ConfigErrorTest, TwoExpertsPerToken) {
    expect_native_error([](json &j) { j["num_experts_per_tok"] = 2; }, {"num_experts_per_tok"});
}

TEST(ConfigErrorTest, LayerTypesLengthMismatch) {
    expect_native_error([](json &j) { j["layer_types"].erase(0); }, {"layer_types", "39", "40"});
    expect_native_error([](json &j) { j["num_hidden_layers"] = 41; }, {"layer_types", "41"});
}

TEST(ConfigErrorTest, LayerTypesUnknownEntry) {
    expect_native_error([](json &j) { j["layer_types"][3] = "full_attention"; }, {"layer_types[3]", "full_attention"});
    expect_native_error([](json &j) { j["layer_types"][5] = 1; }, {"layer_types[5]"});
}

TEST(ConfigErrorTest, HybridSlidingWithoutSlidingWindow) {
    expect_native_error([](json &j) { j["layer_types"][1] = "hybrid_sliding"; }, {"sliding_window", "hybrid_sliding"});
    expect_native_error(
        [](json &j) {
            j["layer_types"][1] = "hybrid_sliding";
            j["sliding_window"] = 0;
        },
        {"sliding_window"});
    json j = native_8b();
    j["layer_types"][1] = "hybrid_sliding";
    j["sliding_window"] = 4096;
    ZayaConfig c = config_from_json(j, kSource);
    EXPECT_EQ(c.layer_types[1], LayerType::HybridSliding);
    EXPECT_EQ(c.sliding_window, 4096);
    EXPECT_EQ(c.rope_for_layer(1).rope_theta, 1e4);
    EXPECT_EQ(c.rope_for_layer(0).rope_theta, 5e6);
}

TEST(ConfigErrorTest, UnsupportedRopeType) {
    expect_native_error([](json &j) { j["rope_parameters"]["hybrid"]["rope_type"] = "yarn"; },
                        {"rope_parameters.hybrid.rope_type", "yarn"});
    expect_native_error([](json &j) { j["rope_parameters"]["hybrid_sliding"]["rope_type"] = "llama3"; },
                        {"rope_parameters.hybrid_sliding.rope_type", "llama3"});
}

TEST(ConfigErrorTest, NonPositiveRopeTheta) {
    for (double theta : {0.0, -10000.0}) {
        expect_native_error([&](json &j) { j["rope_parameters"]["hybrid"]["rope_theta"] = theta; },
                            {"rope_parameters.hybrid.rope_theta"});
        expect_native_error([&](json &j) { j["rope_parameters"]["hybrid_sliding"]["rope_theta"] = theta; },
                            {"rope_parameters.hybrid_sliding.rope_theta"});
    }
    // The older flat schema: a top-level rope_theta.
    expect_native_error(
        [](json &j) {
            j.erase("rope_parameters");
            j["rope_theta"] = 0;
        },
        {"rope_theta"});
}

TEST(ConfigErrorTest, PartialRotaryFactorOutOfRange) {
    for (double p : {0.0, 1.5, -0.5}) {
        SCOPED_TRACE(p);
        expect_native_error([&](json &j) { j["rope_parameters"]["hybrid"]["partial_rotary_factor"] = p; },
                            {"rope_parameters.hybrid.partial_rotary_factor"});
        expect_native_error([&](json &j) { j["rope_parameters"]["hybrid_sliding"]["partial_rotary_factor"] = p; },
                            {"rope_parameters.hybrid_sliding.partial_rotary_factor"});
    }
    // Full rotation (1.0) is fine.
    json j = native_8b();
    j["rope_parameters"]["hybrid"]["partial_rotary_factor"] = 1.0;
    EXPECT_EQ(config_from_json(j, kSource).rotary_dim(0), 128);
}

TEST(ConfigErrorTest, HiddenActGelu) {
    expect_native_error([](json &j) { j["hidden_act"] = "gelu"; }, {"hidden_act", "gelu"});
}

TEST(ConfigErrorTest, NonPositiveRmsNormEps) {
    expect_native_error([](json &j) { j["rms_norm_eps"] = 0; }, {"rms_norm_eps"});
}

// Absurd sizes must be a zaya::Error naming the field (not std::bad_alloc from allocating 1e15 layer types).
TEST(ConfigErrorTest, HugeLayerCountIsAnError) {
    expect_native_error(
        [](json &j) {
            j.erase("layer_types");
            j["num_hidden_layers"] = int64_t(1'000'000'000'000'000);
        },
        {"num_hidden_layers"});
}

// Sizes whose products would overflow are rejected by validate()'s upper bounds.
TEST(ConfigErrorTest, SizesWhoseProductOverflowsAreAnError) {
    expect_native_error([](json &j) { j["vocab_size"] = std::numeric_limits<int64_t>::max(); }, {"vocab_size"});
    expect_native_error([](json &j) { j["cca_time0"] = int64_t(1) << 62; }, {"cca_time0"});
    expect_native_error([](json &j) { j["num_experts"] = int64_t(1) << 62; }, {"num_experts"});
}

// ---- errors: legacy schema ----

TEST(ConfigErrorTest, LegacyOddHalfLayerCount) {
    expect_config_error(legacy_8b(), [](json &j) { j["num_hidden_layers"] = 79; }, {"num_hidden_layers", "79"});
}

TEST(ConfigErrorTest, LegacyClampTemp) {
    expect_config_error(legacy_8b(), [](json &j) { j["clamp_temp"] = true; }, {"clamp_temp"});
    // false is the default and fine.
    json j = legacy_8b();
    j["clamp_temp"] = false;
    EXPECT_NO_THROW(config_from_json(j, kSource));
}

TEST(ConfigErrorTest, LegacyOddFfnHiddenSize) {
    expect_config_error(legacy_8b(), [](json &j) { j["ffn_hidden_size"] = 4095; }, {"ffn_hidden_size"});
}

TEST(ConfigErrorTest, LegacyUnsupportedFeatures) {
    expect_config_error(legacy_8b(), [](json &j) { j["zaya_use_eda"] = false; }, {"zaya_use_eda"});
    expect_config_error(legacy_8b(), [](json &j) { j["activation_func"] = "gelu"; }, {"activation_func", "gelu"});
    expect_config_error(legacy_8b(), [](json &j) { j["rope_scaling"] = json{{"type", "yarn"}}; }, {"rope_scaling"});
    expect_config_error(legacy_8b(), [](json &j) { j["moe_router_topk"] = 2; }, {"num_experts_per_tok"});
}

// Megatron configs name the KV-head count `num_query_groups`; a legacy config carrying only that key (no HF
// `num_key_value_heads`) parses.
TEST(ConfigErrorTest, LegacyNumQueryGroupsAlone) {
    json j = legacy_8b();
    j.erase("num_key_value_heads");
    ZayaConfig c = config_from_json(j, kSource);
    EXPECT_EQ(c.num_key_value_heads, 2);
}

// ---- errors: files ----

TEST(ConfigErrorTest, FileNotJson) {
    zaya::test::TempDir tmp;
    const std::string path = tmp.str("config.json");
    std::ofstream(path) << "{\"model_type\": \"zaya\", \"vocab_size\": 12,,}";
    std::string msg = error_of([&] { config_load(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("JSON"), std::string::npos) << msg;
}

TEST(ConfigErrorTest, EmptyFile) {
    zaya::test::TempDir tmp;
    const std::string path = tmp.str("config.json");
    std::ofstream(path) << "";
    std::string msg = error_of([&] { config_load(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(ConfigErrorTest, MissingFile) {
    zaya::test::TempDir tmp;
    const std::string path = tmp.str("no/such/config.json");
    std::string msg = error_of([&] { config_load(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

TEST(ConfigErrorTest, ErrorsFromAFileNameTheFile) {
    zaya::test::TempDir tmp;
    const std::string path = tmp.str("config.json");
    json j = native_8b();
    j["num_experts_per_tok"] = 2;
    std::ofstream(path) << j.dump();
    std::string msg = error_of([&] { config_load(path); });
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("num_experts_per_tok"), std::string::npos) << msg;
}
