// ZayaConfig: the hyper-parameters of a ZAYA1 model (Hugging Face `config.json`, model_type "zaya"),
// spec §1.1. Field names follow the HF config so the JSON maps one to one.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

struct RopeParams {
    std::string rope_type = "default";
    double rope_theta = 5e6;
    double partial_rotary_factor = 0.5;
};

enum class LayerType : uint8_t { Hybrid, HybridSliding };

struct ZayaConfig {
    int64_t vocab_size = 262272;
    int64_t hidden_size = 2048;
    int64_t num_hidden_layers = 40;
    int64_t num_attention_heads = 8;
    int64_t num_key_value_heads = 2;
    int64_t head_dim = 128;
    bool attention_bias = false;
    double attention_dropout = 0.0;
    int64_t cca_time0 = 2;
    int64_t cca_time1 = 2;
    std::string hidden_act = "silu";
    int64_t moe_intermediate_size = 2048;
    int64_t num_experts = 16;
    int64_t num_experts_per_tok = 1;
    int64_t router_hidden_size = 256;
    double rms_norm_eps = 1e-5;
    int64_t max_position_embeddings = 131072;
    double partial_rotary_factor = 0.5;
    std::vector<LayerType> layer_types; // one per layer
    RopeParams rope_hybrid{"default", 5e6, 0.5};
    RopeParams rope_sliding{"default", 1e4, 0.5};
    std::optional<int64_t> sliding_window;
    bool tie_word_embeddings = true;
    bool lm_head_bias = false;
    double initializer_range = 0.02;
    int64_t pad_token_id = 0;
    int64_t bos_token_id = 2;
    int64_t eos_token_id = 106;
    std::string dtype = "bfloat16";
    // zaya extension (spec F.1): a token routed to the skip slot outputs p_skip·u (Zyphra's original
    // semantics) instead of 0 (current transformers). Key "zaya_skip_passthrough", default false.
    bool skip_passthrough = false;
    // Set when the checkpoint uses the legacy 80-half-layer Megatron-export names (spec §A.7.2).
    bool legacy_layout = false;

    // Derived sizes (spec §1.4).
    int64_t q_dim() const { return num_attention_heads * head_dim; }   // Dq
    int64_t kv_dim() const { return num_key_value_heads * head_dim; }  // Dk
    int64_t conv_channels() const { return q_dim() + kv_dim(); }       // C
    int64_t conv_padding() const { return (cca_time0 - 1) + (cca_time1 - 1); }
    int64_t router_classes() const { return num_experts + 1; }         // + skip slot
    const RopeParams &rope_for_layer(int64_t l) const {
        return layer_types[l] == LayerType::HybridSliding ? rope_sliding : rope_hybrid;
    }
    int64_t rotary_dim(int64_t l) const {
        return int64_t(double(head_dim) * rope_for_layer(l).partial_rotary_factor);
    }

    // Throws zaya::Error naming the first inconsistent field.
    void validate() const;
};

// Built-in model shapes for tests, benchmarks and `zaya train --model`.
// Names: "tiny" (unit tests, ~120K), "small" (~11.3M, quick CPU training), "base" (~0.6B), "zaya1-8b" (the
// released shape). A preset's vocab_size is replaced by the tokenizer's when training on prepared data.
ZayaConfig config_preset(const std::string &name);
std::vector<std::string> config_preset_names();

} // namespace zaya
