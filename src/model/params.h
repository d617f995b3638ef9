// Parameters of a ZAYA1 model in one flat fp32 buffer, carved into named views in a fixed order.
// Hugging Face tensor names (native layout, spec A.7.1) are the canonical names. The same layout carves
// gradient and optimizer-state buffers, so all-reduce, sharding and checkpoints work on ranges of one buffer.
#pragma once
#include "model/config.h"

#include "core/buffer.h"
#include "core/real.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zaya {

struct ParamView {
    std::string name; // HF name, e.g. "model.layers.3.self_attn.o_proj.weight"
    std::vector<int64_t> shape;
    size_t offset = 0; // in floats from the start of the buffer
    size_t numel = 0;
    bool trainable = true; // false for buffers (balancing_biases)
};

struct ParamLayout {
    std::vector<ParamView> views;
    size_t total = 0; // floats, each view starts 16-real (64-byte) aligned

    static ParamLayout build(const ZayaConfig &c);
    const ParamView *find(const std::string &name) const;
    size_t offset_of(const std::string &name) const; // throws if absent
};

// Pointers of one decoder layer into a buffer laid out by ParamLayout (null where absent).
struct LayerWeights {
    real *input_norm;
    real *q_proj, *q_bias, *k_proj, *k_bias;
    real *v_cur, *v_cur_bias, *v_del, *v_del_bias;
    real *conv_dw, *conv_dw_bias, *conv_g, *conv_g_bias;
    real *temp;
    real *o_proj, *o_bias;
    real *attn_res[4]; // post_attention_residual_scale: hidden_states_scale, hidden_states_bias, residual_scale, residual_bias
    real *post_norm;
    real *router_down, *router_down_bias, *router_state_scale; // router_state_scale null on layer 0
    real *router_norm, *router_fc1, *router_fc1_bias, *router_fc2, *router_fc2_bias, *router_out;
    real *balancing_biases; // [E+1], not trainable
    real *experts_gate_up, *experts_down;
    real *mlp_res[4];
};

struct ModelWeights {
    real *embed, *input_scale, *input_bias, *final_norm;
    real *lm_head;      // == embed when tied
    real *lm_head_bias; // null unless lm_head_bias
    std::vector<LayerWeights> layers;

    static ModelWeights bind(const ZayaConfig &c, const ParamLayout &layout, real *base);
};

// A model's parameters: config, layout, storage and bound pointers.
struct Model {
    ZayaConfig config;
    ParamLayout layout;
    RealBuffer params;
    ModelWeights w;

    static Model create(const ZayaConfig &c); // zero-filled; see model_init_random
    real *param(const std::string &name) const { return params.data() + layout.offset_of(name); }
};

class Backend;
// A copy of `host` whose parameters live in `backend`'s memory: the same config, layout and views, pointers bound
// to the backend's buffer. upload_params refreshes such a copy from its host model.
Model model_on(const Model &host, Backend &backend);
void upload_params(Model &dst, const Model &host, Backend &backend);

// Parameter counts (spec A.8): total, embedding, and active per token (non-embedding, one expert per layer).
struct ParamCounts {
    int64_t total = 0, embedding = 0, lm_head = 0, non_embedding = 0, active_non_embedding = 0, experts = 0;
};
ParamCounts param_counts(const ZayaConfig &c);

} // namespace zaya
