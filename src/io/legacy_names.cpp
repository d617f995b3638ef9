#include "io/legacy_names.h"

#include "model/params.h"

#include <fmt/format.h>
#include <map>

namespace zaya {

std::vector<NativeSources> legacy_sources(const ZayaConfig &c) {
    const int64_t L = c.num_hidden_layers, E = c.num_experts, I = c.moe_intermediate_size, D = c.hidden_size;
    // Whole-tensor renames: native → legacy.
    std::map<std::string, std::string> rename;
    const char *const res[4] = {"hidden_states_scale", "hidden_states_bias", "residual_scale", "residual_bias"};
    rename["model.embed_tokens.weight"] = "model.embed_tokens.weight";
    rename["model.norm.weight"] = "model.final_norm.weight";
    rename["model.input_hidden_states_scale"] = "model.layers.0.res_scale.hidden_states_scale";
    rename["model.input_hidden_states_bias"] = "model.layers.0.res_scale.hidden_states_bias";
    for (int64_t k = 0; k < L; ++k) {
        const std::string n = fmt::format("model.layers.{}.", k);
        const std::string a = fmt::format("model.layers.{}.", 2 * k);     // attention half-layer
        const std::string m = fmt::format("model.layers.{}.", 2 * k + 1); // MoE half-layer
        const std::string qkv = n + "self_attn.qkv_proj.", lq = a + "self_attn.qkv.";
        rename[n + "input_layernorm.weight"] = a + "input_norm.weight";
        rename[qkv + "q_proj.weight"] = lq + "linear_q.weight";
        rename[qkv + "k_proj.weight"] = lq + "linear_k.weight";
        rename[qkv + "v_proj_current.weight"] = lq + "val_proj1.weight";
        rename[qkv + "v_proj_delayed.weight"] = lq + "val_proj2.weight";
        rename[qkv + "q_proj.bias"] = lq + "linear_q.bias";
        rename[qkv + "k_proj.bias"] = lq + "linear_k.bias";
        rename[qkv + "v_proj_current.bias"] = lq + "val_proj1.bias";
        rename[qkv + "v_proj_delayed.bias"] = lq + "val_proj2.bias";
        rename[qkv + "conv_qk_depthwise.weight"] = lq + "conv_qk.0.weight";
        rename[qkv + "conv_qk_depthwise.bias"] = lq + "conv_qk.0.bias";
        rename[qkv + "conv_qk_grouped.weight"] = lq + "conv_qk.1.weight";
        rename[qkv + "conv_qk_grouped.bias"] = lq + "conv_qk.1.bias";
        rename[n + "self_attn.qk_norm.temp"] = lq + "temp";
        rename[n + "self_attn.o_proj.weight"] = a + "self_attn.o_proj.weight";
        rename[n + "self_attn.o_proj.bias"] = a + "self_attn.o_proj.bias";
        rename[n + "post_attention_layernorm.weight"] = m + "input_norm.weight";
        const std::string g = n + "mlp.gate.", r = m + "zaya_block.router.";
        rename[g + "down_proj.weight"] = r + "down_proj.weight";
        rename[g + "down_proj.bias"] = r + "down_proj.bias";
        rename[g + "router_states_scale"] = r + "router_states_scale";
        rename[g + "router_mlp.norm.weight"] = r + "rmsnorm_eda.weight";
        rename[g + "router_mlp.fc1.weight"] = r + "router_mlp.0.weight";
        rename[g + "router_mlp.fc1.bias"] = r + "router_mlp.0.bias";
        rename[g + "router_mlp.fc2.weight"] = r + "router_mlp.2.weight";
        rename[g + "router_mlp.fc2.bias"] = r + "router_mlp.2.bias";
        rename[g + "router_mlp.out_proj.weight"] = r + "router_mlp.4.weight";
        rename[g + "balancing_biases"] = r + "balancing_biases";
        // Residual scales move to the input side of the next half-layer.
        const std::string next = k + 1 < L ? fmt::format("model.layers.{}.res_scale.", 2 * k + 2) : "model.res_scale.";
        for (const char *v : res) {
            rename[n + "post_attention_residual_scale." + v] = m + "res_scale." + v;
            rename[n + "post_mlp_residual_scale." + v] = next + v;
        }
    }

    std::vector<NativeSources> out;
    for (const ParamView &v : ParamLayout::build(c).views) {
        NativeSources ns{v.name, {}};
        auto expert_split = [&](const std::string &suffix, int64_t rows, int64_t cols) {
            int64_t k = 0;
            std::sscanf(v.name.c_str(), "model.layers.%ld.", &k);
            for (int64_t e = 0; e < E; ++e)
                ns.parts.push_back({fmt::format("model.layers.{}.zaya_block.experts.local_experts.{}.{}", 2 * k + 1, e,
                                                suffix),
                                    {rows, cols},
                                    size_t(e * rows * cols)});
        };
        if (v.name.ends_with("mlp.experts.gate_up_proj")) expert_split("linear_fc1.weight", 2 * I, D);
        else if (v.name.ends_with("mlp.experts.down_proj")) expert_split("linear_fc2.weight", D, I);
        else if (v.name == "lm_head.weight" || v.name == "lm_head.bias") ns.parts.push_back({v.name, v.shape, 0});
        else ns.parts.push_back({rename.at(v.name), v.shape, 0});
        out.push_back(std::move(ns));
    }
    return out;
}

} // namespace zaya
