#include "model/params.h"

#include "core/error.h"
#include "ops/backend.h"

#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

namespace zaya {

namespace {

struct LayoutBuilder {
    ParamLayout &out;
    void add(std::string name, std::vector<int64_t> shape, bool trainable = true) {
        size_t n = 1;
        for (int64_t d : shape) n *= size_t(d);
        out.total = (out.total + 15) / 16 * 16;
        out.views.push_back({std::move(name), std::move(shape), out.total, n, trainable});
        out.total += n;
    }
};

const char *const kResNames[4] = {"hidden_states_scale", "hidden_states_bias", "residual_scale", "residual_bias"};

} // namespace

ParamLayout ParamLayout::build(const ZayaConfig &c) {
    ParamLayout L;
    LayoutBuilder b{L};
    const int64_t D = c.hidden_size, Dq = c.q_dim(), Dk = c.kv_dim(), C = c.conv_channels(), hd = c.head_dim;
    const int64_t R = c.router_hidden_size, E = c.num_experts, I = c.moe_intermediate_size;
    b.add("model.embed_tokens.weight", {c.vocab_size, D});
    b.add("model.input_hidden_states_scale", {D});
    b.add("model.input_hidden_states_bias", {D});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        const std::string qkv = p + "self_attn.qkv_proj.";
        b.add(p + "input_layernorm.weight", {D});
        b.add(qkv + "q_proj.weight", {Dq, D});
        if (c.attention_bias) b.add(qkv + "q_proj.bias", {Dq});
        b.add(qkv + "k_proj.weight", {Dk, D});
        if (c.attention_bias) b.add(qkv + "k_proj.bias", {Dk});
        b.add(qkv + "v_proj_current.weight", {Dk / 2, D});
        if (c.attention_bias) b.add(qkv + "v_proj_current.bias", {Dk / 2});
        b.add(qkv + "v_proj_delayed.weight", {Dk / 2, D});
        if (c.attention_bias) b.add(qkv + "v_proj_delayed.bias", {Dk / 2});
        b.add(qkv + "conv_qk_depthwise.weight", {C, 1, c.cca_time0});
        b.add(qkv + "conv_qk_depthwise.bias", {C});
        b.add(qkv + "conv_qk_grouped.weight", {C, hd, c.cca_time1});
        b.add(qkv + "conv_qk_grouped.bias", {C});
        b.add(p + "self_attn.qk_norm.temp", {c.num_key_value_heads});
        b.add(p + "self_attn.o_proj.weight", {D, Dq});
        if (c.attention_bias) b.add(p + "self_attn.o_proj.bias", {D});
        for (const char *r : kResNames) b.add(p + "post_attention_residual_scale." + r, {D});
        b.add(p + "post_attention_layernorm.weight", {D});
        const std::string g = p + "mlp.gate.";
        b.add(g + "down_proj.weight", {R, D});
        b.add(g + "down_proj.bias", {R});
        if (l != 0) b.add(g + "router_states_scale", {R});
        b.add(g + "router_mlp.norm.weight", {R});
        b.add(g + "router_mlp.fc1.weight", {R, R});
        b.add(g + "router_mlp.fc1.bias", {R});
        b.add(g + "router_mlp.fc2.weight", {R, R});
        b.add(g + "router_mlp.fc2.bias", {R});
        b.add(g + "router_mlp.out_proj.weight", {E + 1, R});
        b.add(g + "balancing_biases", {E + 1}, /*trainable=*/false);
        b.add(p + "mlp.experts.gate_up_proj", {E, 2 * I, D});
        b.add(p + "mlp.experts.down_proj", {E, D, I});
        for (const char *r : kResNames) b.add(p + "post_mlp_residual_scale." + r, {D});
    }
    b.add("model.norm.weight", {D});
    if (!c.tie_word_embeddings) b.add("lm_head.weight", {c.vocab_size, D});
    if (c.lm_head_bias) b.add("lm_head.bias", {c.vocab_size});
    L.total = (L.total + 15) / 16 * 16;
    return L;
}

const ParamView *ParamLayout::find(const std::string &name) const {
    for (const ParamView &v : views)
        if (v.name == name) return &v;
    return nullptr;
}

size_t ParamLayout::offset_of(const std::string &name) const {
    const ParamView *v = find(name);
    if (!v) fail("no parameter named '{}'", name);
    return v->offset;
}

ModelWeights ModelWeights::bind(const ZayaConfig &c, const ParamLayout &layout, real *base) {
    auto at = [&](const std::string &name) { return base + layout.offset_of(name); };
    auto opt = [&](const std::string &name) -> real * {
        const ParamView *v = layout.find(name);
        return v ? base + v->offset : nullptr;
    };
    ModelWeights w{};
    w.embed = at("model.embed_tokens.weight");
    w.input_scale = at("model.input_hidden_states_scale");
    w.input_bias = at("model.input_hidden_states_bias");
    w.final_norm = at("model.norm.weight");
    w.lm_head = c.tie_word_embeddings ? w.embed : at("lm_head.weight");
    w.lm_head_bias = opt("lm_head.bias");
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        const std::string qkv = p + "self_attn.qkv_proj.", g = p + "mlp.gate.";
        LayerWeights L{};
        L.input_norm = at(p + "input_layernorm.weight");
        L.q_proj = at(qkv + "q_proj.weight");
        L.q_bias = opt(qkv + "q_proj.bias");
        L.k_proj = at(qkv + "k_proj.weight");
        L.k_bias = opt(qkv + "k_proj.bias");
        L.v_cur = at(qkv + "v_proj_current.weight");
        L.v_cur_bias = opt(qkv + "v_proj_current.bias");
        L.v_del = at(qkv + "v_proj_delayed.weight");
        L.v_del_bias = opt(qkv + "v_proj_delayed.bias");
        L.conv_dw = at(qkv + "conv_qk_depthwise.weight");
        L.conv_dw_bias = at(qkv + "conv_qk_depthwise.bias");
        L.conv_g = at(qkv + "conv_qk_grouped.weight");
        L.conv_g_bias = at(qkv + "conv_qk_grouped.bias");
        L.temp = at(p + "self_attn.qk_norm.temp");
        L.o_proj = at(p + "self_attn.o_proj.weight");
        L.o_bias = opt(p + "self_attn.o_proj.bias");
        for (int i = 0; i < 4; ++i) L.attn_res[i] = at(p + "post_attention_residual_scale." + kResNames[i]);
        L.post_norm = at(p + "post_attention_layernorm.weight");
        L.router_down = at(g + "down_proj.weight");
        L.router_down_bias = at(g + "down_proj.bias");
        L.router_state_scale = opt(g + "router_states_scale");
        L.router_norm = at(g + "router_mlp.norm.weight");
        L.router_fc1 = at(g + "router_mlp.fc1.weight");
        L.router_fc1_bias = at(g + "router_mlp.fc1.bias");
        L.router_fc2 = at(g + "router_mlp.fc2.weight");
        L.router_fc2_bias = at(g + "router_mlp.fc2.bias");
        L.router_out = at(g + "router_mlp.out_proj.weight");
        L.balancing_biases = at(g + "balancing_biases");
        L.experts_gate_up = at(p + "mlp.experts.gate_up_proj");
        L.experts_down = at(p + "mlp.experts.down_proj");
        for (int i = 0; i < 4; ++i) L.mlp_res[i] = at(p + "post_mlp_residual_scale." + kResNames[i]);
        w.layers.push_back(L);
    }
    return w;
}

Model Model::create(const ZayaConfig &c) {
    c.validate();
    Model m;
    m.config = c;
    m.layout = ParamLayout::build(c);
    m.params = RealBuffer::zeros(m.layout.total);
    m.w = ModelWeights::bind(c, m.layout, m.params.data());
    return m;
}

Model model_on(const Model &host, Backend &backend) {
    Model m;
    m.config = host.config;
    m.layout = host.layout;
    m.params = backend.alloc(host.layout.total);
    m.w = ModelWeights::bind(m.config, m.layout, m.params.data());
    upload_params(m, host, backend);
    return m;
}

void upload_params(Model &dst, const Model &host, Backend &backend) {
    ZAYA_ASSERT(dst.layout.total == host.layout.total);
    backend.upload(dst.params.data(), host.params.data(), host.layout.total * sizeof(real));
}

ParamCounts param_counts(const ZayaConfig &c) {
    ParamCounts pc;
    ParamLayout L = ParamLayout::build(c);
    const int64_t E = c.num_experts;
    for (const ParamView &v : L.views) {
        if (!v.trainable) continue;
        int64_t n = int64_t(v.numel);
        pc.total += n;
        if (v.name == "model.embed_tokens.weight") pc.embedding += n;
        else if (v.name.rfind("lm_head.", 0) == 0) pc.lm_head += n;
        else {
            pc.non_embedding += n;
            bool expert = v.name.find("mlp.experts.") != std::string::npos;
            if (expert) pc.experts += n;
            pc.active_non_embedding += expert ? n / E : n;
        }
    }
    return pc;
}

} // namespace zaya
