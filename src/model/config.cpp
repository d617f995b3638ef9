#include "model/config.h"

#include "core/error.h"

#include <cmath>

namespace zaya {

void ZayaConfig::validate() const {
    // Upper bounds keep every size product far from int64 overflow (and catch typos like 1e15 layers); they are
    // orders of magnitude above any real ZAYA1 shape.
    auto in_range = [](const char *field, int64_t v, int64_t max) {
        if (v <= 0) fail("config field '{}' must be positive, got {}", field, v);
        if (v > max) fail("config field '{}' = {} is larger than zaya supports ({})", field, v, max);
    };
    in_range("vocab_size", vocab_size, int64_t(1) << 24);
    in_range("hidden_size", hidden_size, int64_t(1) << 17);
    in_range("num_hidden_layers", num_hidden_layers, 4096);
    in_range("num_attention_heads", num_attention_heads, 1024);
    in_range("num_key_value_heads", num_key_value_heads, 1024);
    in_range("head_dim", head_dim, 4096);
    in_range("cca_time0", cca_time0, 64);
    in_range("cca_time1", cca_time1, 64);
    in_range("moe_intermediate_size", moe_intermediate_size, int64_t(1) << 17);
    in_range("num_experts", num_experts, 4096);
    in_range("router_hidden_size", router_hidden_size, int64_t(1) << 16);
    in_range("max_position_embeddings", max_position_embeddings, int64_t(1) << 26);
    if (sliding_window && *sliding_window <= 0)
        fail("config field 'sliding_window' must be a positive integer or null, got {}", *sliding_window);
    if (head_dim % 2 != 0) fail("config field 'head_dim' must be even (RoPE rotates pairs), got {}", head_dim);
    if (num_attention_heads % num_key_value_heads != 0)
        fail("config field 'num_attention_heads' ({}) must be a multiple of 'num_key_value_heads' ({})",
             num_attention_heads, num_key_value_heads);
    if (kv_dim() % 2 != 0)
        fail("config: num_key_value_heads*head_dim ({}) must be even (values split into current and delayed halves)",
             kv_dim());
    if (num_experts_per_tok != 1)
        fail("config field 'num_experts_per_tok' must be 1 (ZAYA1 routes top-1), got {}", num_experts_per_tok);
    if (hidden_act != "silu") fail("config field 'hidden_act' must be \"silu\", got \"{}\"", hidden_act);
    if (!(rms_norm_eps > 0) || !std::isfinite(rms_norm_eps))
        fail("config field 'rms_norm_eps' must be a positive number, got {}", rms_norm_eps);
    if (int64_t(layer_types.size()) != num_hidden_layers)
        fail("config field 'layer_types' has {} entries but num_hidden_layers is {}", layer_types.size(),
             num_hidden_layers);
    bool any_sliding = false;
    for (LayerType t : layer_types) any_sliding |= t == LayerType::HybridSliding;
    if (any_sliding && (!sliding_window || *sliding_window <= 0))
        fail("config field 'sliding_window' must be a positive integer when layer_types contains \"hybrid_sliding\"");
    for (int which = 0; which < 2; ++which) {
        const RopeParams &r = which == 0 ? rope_hybrid : rope_sliding;
        const char *name = which == 0 ? "hybrid" : "hybrid_sliding";
        if (r.rope_type != "default")
            fail("config field 'rope_parameters.{}.rope_type' = \"{}\" is not supported (only \"default\")", name,
                 r.rope_type);
        if (!(r.rope_theta > 0) || !std::isfinite(r.rope_theta))
            fail("config field 'rope_parameters.{}.rope_theta' must be positive, got {}", name, r.rope_theta);
        if (!(r.partial_rotary_factor > 0 && r.partial_rotary_factor <= 1))
            fail("config field 'rope_parameters.{}.partial_rotary_factor' must be in (0, 1], got {}", name,
                 r.partial_rotary_factor);
        int64_t rot = int64_t(double(head_dim) * r.partial_rotary_factor);
        if (rot % 2 != 0 || rot == 0)
            fail("config: head_dim*partial_rotary_factor of rope_parameters.{} is {}, must be a positive even number",
                 name, rot);
    }
}

static ZayaConfig make(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads, int64_t kv, int64_t head_dim,
                       int64_t experts, int64_t inter, int64_t router, int64_t max_pos) {
    ZayaConfig c;
    c.vocab_size = vocab;
    c.hidden_size = hidden;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv;
    c.head_dim = head_dim;
    c.num_experts = experts;
    c.moe_intermediate_size = inter;
    c.router_hidden_size = router;
    c.max_position_embeddings = max_pos;
    c.layer_types.assign(size_t(layers), LayerType::Hybrid);
    return c;
}

ZayaConfig config_preset(const std::string &name) {
    ZayaConfig c;
    if (name == "tiny") {
        c = make(512, 64, 2, 4, 2, 16, 4, 96, 32, 1024);
        c.rope_hybrid.rope_theta = 10000;
    } else if (name == "small") {
        c = make(4096, 256, 4, 8, 2, 32, 8, 384, 64, 4096);
        c.rope_hybrid.rope_theta = 10000;
    } else if (name == "base") {
        c = make(32768, 768, 12, 8, 2, 96, 16, 768, 128, 8192);
        c.rope_hybrid.rope_theta = 10000;
    } else if (name == "1b") { // ~1B total, ZAYA1-8B's head and router shapes: the GPU training benchmark
        c = make(32768, 1024, 20, 8, 2, 128, 16, 1024, 256, 8192);
    } else if (name == "zaya1-8b") {
        c = make(262272, 2048, 40, 8, 2, 128, 16, 2048, 256, 131072);
    } else {
        std::string names;
        for (const auto &n : config_preset_names()) names += (names.empty() ? "" : ", ") + n;
        fail("unknown model preset '{}' (known: {})", name, names);
    }
    c.dtype = "float32";
    c.validate();
    return c;
}

std::vector<std::string> config_preset_names() { return {"tiny", "small", "base", "1b", "zaya1-8b"}; }

} // namespace zaya
