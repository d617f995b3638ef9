#include "io/config_json.h"

#include "core/atomic_file.h"
#include "core/error.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace zaya {

using nlohmann::json;

namespace {

// Typed access to one config field; errors name the file and the field.
struct Fields {
    const json &j;
    const std::string &source;

    bool has(const char *key) const { return j.contains(key) && !j.at(key).is_null(); }

    int64_t integer(const char *key, std::optional<int64_t> dflt) const {
        if (!has(key)) {
            if (!dflt) fail("{}: required field '{}' is missing", source, key);
            return *dflt;
        }
        const json &v = j.at(key);
        if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, got {}", source, key, v.dump());
        return v.get<int64_t>();
    }
    double number(const char *key, double dflt) const {
        if (!has(key)) return dflt;
        const json &v = j.at(key);
        if (!v.is_number()) fail("{}: field '{}' must be a number, got {}", source, key, v.dump());
        return v.get<double>();
    }
    bool boolean(const char *key, bool dflt) const {
        if (!has(key)) return dflt;
        const json &v = j.at(key);
        if (!v.is_boolean()) fail("{}: field '{}' must be true or false, got {}", source, key, v.dump());
        return v.get<bool>();
    }
    std::string string(const char *key, const std::string &dflt) const {
        if (!has(key)) return dflt;
        const json &v = j.at(key);
        if (!v.is_string()) fail("{}: field '{}' must be a string, got {}", source, key, v.dump());
        return v.get<std::string>();
    }
    // eos_token_id may be an int or a list of ints (HF); we keep the first.
    int64_t token_id(const char *key, int64_t dflt) const {
        if (has(key) && j.at(key).is_array()) {
            const json &a = j.at(key);
            if (a.empty() || !a[0].is_number_integer()) fail("{}: field '{}' must be an integer or list of integers", source, key);
            return a[0].get<int64_t>();
        }
        return integer(key, dflt);
    }
};

RopeParams rope_from_json(const json &r, const std::string &source, const std::string &name, RopeParams dflt) {
    if (!r.is_object()) fail("{}: field 'rope_parameters.{}' must be an object", source, name);
    std::string where = "rope_parameters." + name;
    auto num = [&](const char *k, double d) {
        if (!r.contains(k) || r.at(k).is_null()) return d;
        if (!r.at(k).is_number()) fail("{}: field '{}.{}' must be a number", source, where, k);
        return r.at(k).get<double>();
    };
    if (r.contains("rope_type")) {
        if (!r.at("rope_type").is_string()) fail("{}: field '{}.rope_type' must be a string", source, where);
        dflt.rope_type = r.at("rope_type").get<std::string>();
    }
    dflt.rope_theta = num("rope_theta", dflt.rope_theta);
    dflt.partial_rotary_factor = num("partial_rotary_factor", dflt.partial_rotary_factor);
    return dflt;
}

// First non-zero entry of a per-half-layer list (ZAYA1-base's list-style legacy schema).
int64_t first_nonzero(const json &j, const char *key, const std::string &source) {
    if (!j.contains(key)) fail("{}: required legacy field '{}' is missing", source, key);
    const json &a = j.at(key);
    if (!a.is_array()) fail("{}: legacy field '{}' must be a list", source, key);
    for (const json &v : a)
        if (v.is_number_integer() && v.get<int64_t>() != 0) return v.get<int64_t>();
    fail("{}: legacy field '{}' has no non-zero entry", source, key);
}

// Maps the legacy 80-half-layer schema (spec §1.2, §1.3) onto native fields.
void legacy_from_json(const json &j, const Fields &f, ZayaConfig &c) {
    const std::string &source = f.source;
    c.legacy_layout = true;
    if (f.has("zaya_layers")) { // list-style schema of ZAYA1-base: ["a", 16, "a", 16, ...]
        const json &layers = j.at("zaya_layers");
        if (!layers.is_array()) fail("{}: legacy field 'zaya_layers' must be a list", source);
        int64_t attn = 0;
        bool alternates = layers.size() % 2 == 0;
        for (size_t i = 0; i < layers.size(); ++i) {
            const json &v = layers[i];
            bool is_attn = v.is_string() && v.get<std::string>() == "a";
            attn += is_attn;
            alternates &= i % 2 == 0 ? is_attn : v.is_number_integer();
        }
        if (attn == 0 || !alternates)
            fail("{}: legacy field 'zaya_layers' must alternate \"a\" and expert counts", source);
        c.num_hidden_layers = attn;
        c.num_attention_heads = first_nonzero(j, "cca_num_q_heads", source);
        c.num_key_value_heads = first_nonzero(j, "num_query_groups_list", source);
        int64_t ffn = first_nonzero(j, "ffn_hidden_size_list", source);
        if (ffn % 2 != 0) fail("{}: legacy field 'ffn_hidden_size_list' must hold even (gated) widths", source);
        c.moe_intermediate_size = ffn / 2;
        c.router_hidden_size = first_nonzero(j, "zaya_mlp_expansion", source);
        // head_dim = hidden / num_attention_heads, where num_attention_heads counts uncompressed heads (spec F.10).
        int64_t full_heads = f.integer("num_attention_heads", std::nullopt);
        if (full_heads <= 0 || c.hidden_size % full_heads != 0)
            fail("{}: legacy field 'num_attention_heads' ({}) must divide hidden_size ({})", source, full_heads,
                 c.hidden_size);
        c.head_dim = f.integer("kv_channels", c.hidden_size / full_heads);
    } else {
        int64_t half_layers = f.integer("num_hidden_layers", std::nullopt);
        if (half_layers <= 0 || half_layers % 2 != 0)
            fail("{}: legacy field 'num_hidden_layers' counts attention and MoE half-layers and must be even, got {}",
                 source, half_layers);
        c.num_hidden_layers = half_layers / 2;
        c.num_attention_heads = f.integer("num_attention_heads", std::nullopt);
        c.num_key_value_heads = f.has("num_query_groups") ? f.integer("num_query_groups", std::nullopt)
                                                          : f.integer("num_key_value_heads", std::nullopt);
        int64_t ffn = f.integer("ffn_hidden_size", std::nullopt);
        if (ffn % 2 != 0) fail("{}: legacy field 'ffn_hidden_size' must be even (gated fc1 width), got {}", source, ffn);
        c.moe_intermediate_size = ffn / 2;
        c.router_hidden_size = f.integer("zaya_mlp_expansion", 256);
        c.head_dim = f.integer("kv_channels", f.integer("head_dim", 128));
    }
    c.num_experts_per_tok = f.integer("moe_router_topk", 1);
    c.rms_norm_eps = f.number("norm_epsilon", f.number("rms_norm_eps", 1e-5));
    c.rope_hybrid.rope_theta = f.number("rope_theta", c.rope_hybrid.rope_theta);
    c.rope_hybrid.partial_rotary_factor = f.number("partial_rotary_factor", 0.5);
    c.attention_bias = f.boolean("add_bias_linear", false);
    if (f.boolean("clamp_temp", false))
        fail("{}: legacy field 'clamp_temp' = true (exp key temperature) is not supported", source);
    if (!f.boolean("zaya_use_eda", true)) fail("{}: legacy field 'zaya_use_eda' = false is not supported", source);
    if (f.has("swa_layers")) fail("{}: legacy field 'swa_layers' (sliding-window layers) is not supported", source);
    if (f.has("rope_scaling") && !(j.at("rope_scaling").is_boolean() && !j.at("rope_scaling").get<bool>()))
        fail("{}: legacy field 'rope_scaling' must be false (no RoPE scaling is supported)", source);
    std::string act = f.string("activation_func", "swiglu");
    if (act != "swiglu") fail("{}: legacy field 'activation_func' must be \"swiglu\", got \"{}\"", source, act);
    if (c.num_hidden_layers > 0 && c.num_hidden_layers <= 4096) // else validate() reports the count
        c.layer_types.assign(size_t(c.num_hidden_layers), LayerType::Hybrid);
}

} // namespace

ZayaConfig config_from_json(const json &j, const std::string &source) {
    if (!j.is_object()) fail("{}: config must be a JSON object", source);
    Fields f{j, source};
    std::string model_type = f.string("model_type", "");
    if (model_type != "zaya")
        fail("{}: field 'model_type' must be \"zaya\", got \"{}\"", source, model_type.empty() ? "(missing)" : model_type);

    ZayaConfig c;
    c.vocab_size = f.integer("vocab_size", std::nullopt);
    c.hidden_size = f.integer("hidden_size", std::nullopt);
    c.num_experts = f.integer("num_experts", std::nullopt);
    c.max_position_embeddings = f.integer("max_position_embeddings", c.max_position_embeddings);
    c.tie_word_embeddings = f.boolean("tie_word_embeddings", true);
    c.lm_head_bias = f.boolean("lm_head_bias", false);
    c.initializer_range = f.number("initializer_range", c.initializer_range);
    c.pad_token_id = f.token_id("pad_token_id", 0);
    c.bos_token_id = f.token_id("bos_token_id", 2);
    c.eos_token_id = f.token_id("eos_token_id", 106);
    c.dtype = f.string("dtype", f.string("torch_dtype", "bfloat16"));
    c.skip_passthrough = f.boolean("zaya_skip_passthrough", false);
    c.cca_time0 = f.integer("cca_time0", 2);
    c.cca_time1 = f.integer("cca_time1", 2);
    c.attention_dropout = f.number("attention_dropout", 0.0);

    bool legacy = f.has("ffn_hidden_size") || f.has("zaya_layers") || f.has("zaya_mlp_expansion");
    if (legacy) {
        legacy_from_json(j, f, c);
    } else {
        c.num_hidden_layers = f.integer("num_hidden_layers", std::nullopt);
        c.num_attention_heads = f.integer("num_attention_heads", std::nullopt);
        c.num_key_value_heads = f.integer("num_key_value_heads", std::nullopt);
        c.head_dim = f.integer("head_dim", 128);
        c.moe_intermediate_size = f.integer("moe_intermediate_size", std::nullopt);
        c.num_experts_per_tok = f.integer("num_experts_per_tok", 1);
        c.router_hidden_size = f.integer("router_hidden_size", 256);
        c.rms_norm_eps = f.number("rms_norm_eps", 1e-5);
        c.attention_bias = f.boolean("attention_bias", false);
        c.hidden_act = f.string("hidden_act", "silu");
        if (f.has("sliding_window")) c.sliding_window = f.integer("sliding_window", std::nullopt);

        if (f.has("layer_types")) {
            const json &lt = j.at("layer_types");
            if (!lt.is_array()) fail("{}: field 'layer_types' must be a list", source);
            for (size_t i = 0; i < lt.size(); ++i) {
                std::string t = lt[i].is_string() ? lt[i].get<std::string>() : lt[i].dump();
                if (t == "hybrid") c.layer_types.push_back(LayerType::Hybrid);
                else if (t == "hybrid_sliding") c.layer_types.push_back(LayerType::HybridSliding);
                else fail("{}: field 'layer_types[{}]' = {} is not \"hybrid\" or \"hybrid_sliding\"", source, i, t);
            }
        } else if (c.num_hidden_layers > 0 && c.num_hidden_layers <= 4096) { // else validate() reports the count
            c.layer_types.assign(size_t(c.num_hidden_layers), LayerType::Hybrid);
        }

        // Older configs carry a top-level rope_theta / partial_rotary_factor instead of per-type parameters.
        c.rope_hybrid.rope_theta = f.number("rope_theta", c.rope_hybrid.rope_theta);
        c.rope_hybrid.partial_rotary_factor = f.number("partial_rotary_factor", c.rope_hybrid.partial_rotary_factor);
        c.rope_sliding.partial_rotary_factor = c.rope_hybrid.partial_rotary_factor;
        if (f.has("rope_parameters")) {
            const json &rp = j.at("rope_parameters");
            if (!rp.is_object()) fail("{}: field 'rope_parameters' must be an object", source);
            if (rp.contains("hybrid") || rp.contains("hybrid_sliding")) {
                if (rp.contains("hybrid")) c.rope_hybrid = rope_from_json(rp.at("hybrid"), source, "hybrid", c.rope_hybrid);
                if (rp.contains("hybrid_sliding"))
                    c.rope_sliding = rope_from_json(rp.at("hybrid_sliding"), source, "hybrid_sliding", c.rope_sliding);
            } else { // one set of parameters for every layer type
                c.rope_hybrid = rope_from_json(rp, source, "hybrid", c.rope_hybrid);
            }
        }
    }
    c.partial_rotary_factor = c.rope_hybrid.partial_rotary_factor;
    try {
        c.validate();
    } catch (const Error &e) {
        fail("{}: {}", source, e.what());
    }
    return c;
}

ZayaConfig config_load(const std::string &path) {
    std::ifstream in(path);
    if (!in) fail("cannot open config '{}': {}", path, std::strerror(errno));
    json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) fail("{}: not valid JSON", path);
    return config_from_json(j, path);
}

std::vector<int64_t> eos_token_ids(const std::string &dir) {
    std::vector<int64_t> ids;
    for (const char *name : {"config.json", "generation_config.json"}) {
        const std::string path = (std::filesystem::path(dir) / name).string();
        std::ifstream in(path);
        if (!in) continue;
        const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
        if (j.is_discarded() || !j.is_object()) fail("{}: not a JSON object", path);
        if (!j.contains("eos_token_id") || j["eos_token_id"].is_null()) continue;
        const json &v = j["eos_token_id"];
        const json list = v.is_array() ? v : json::array({v});
        for (const json &id : list) {
            if (!id.is_number_integer() || id.get<int64_t>() < 0)
                fail("{}: field 'eos_token_id' must be a token id or a list of them, got {}", path, v.dump());
            if (std::find(ids.begin(), ids.end(), id.get<int64_t>()) == ids.end()) ids.push_back(id.get<int64_t>());
        }
    }
    return ids;
}

json config_to_json(const ZayaConfig &c) {
    json lt = json::array();
    for (LayerType t : c.layer_types) lt.push_back(t == LayerType::Hybrid ? "hybrid" : "hybrid_sliding");
    auto rope = [](const RopeParams &r) {
        return json{{"rope_type", r.rope_type}, {"rope_theta", r.rope_theta}, {"partial_rotary_factor", r.partial_rotary_factor}};
    };
    json j = {
        {"architectures", {"ZayaForCausalLM"}},
        {"model_type", "zaya"},
        {"vocab_size", c.vocab_size},
        {"hidden_size", c.hidden_size},
        {"num_hidden_layers", c.num_hidden_layers},
        {"layer_types", lt},
        {"num_attention_heads", c.num_attention_heads},
        {"num_key_value_heads", c.num_key_value_heads},
        {"head_dim", c.head_dim},
        {"attention_bias", c.attention_bias},
        {"attention_dropout", c.attention_dropout},
        {"cca_time0", c.cca_time0},
        {"cca_time1", c.cca_time1},
        {"hidden_act", c.hidden_act},
        {"moe_intermediate_size", c.moe_intermediate_size},
        {"num_experts", c.num_experts},
        {"num_experts_per_tok", c.num_experts_per_tok},
        {"router_hidden_size", c.router_hidden_size},
        {"rms_norm_eps", c.rms_norm_eps},
        {"max_position_embeddings", c.max_position_embeddings},
        {"partial_rotary_factor", c.rope_hybrid.partial_rotary_factor},
        {"rope_parameters", {{"hybrid", rope(c.rope_hybrid)}, {"hybrid_sliding", rope(c.rope_sliding)}}},
        {"sliding_window", c.sliding_window ? json(*c.sliding_window) : json(nullptr)},
        {"tie_word_embeddings", c.tie_word_embeddings},
        {"lm_head_bias", c.lm_head_bias},
        {"initializer_range", c.initializer_range},
        {"output_router_logits", false},
        {"use_cache", true},
        {"pad_token_id", c.pad_token_id},
        {"bos_token_id", c.bos_token_id},
        {"eos_token_id", c.eos_token_id},
        {"dtype", c.dtype},
    };
    if (c.skip_passthrough) j["zaya_skip_passthrough"] = true;
    return j;
}

void config_save(const ZayaConfig &c, const std::string &path) {
    write_file_atomic(path, config_to_json(c).dump(2) + "\n");
}

} // namespace zaya
