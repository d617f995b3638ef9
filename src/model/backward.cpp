#include "model/backward.h"

#include "core/error.h"
#include "model/chunk_exchange.h"
#include "ops/backend.h"

#include <algorithm>
#include <cmath>

namespace zaya {

namespace {
// The scratch arrays in order, with their sizes; plan() carves them, bytes_needed() only adds them up.
std::vector<std::pair<real **, int64_t>> scratch_parts(GradScratch &s, const ZayaConfig &c, int64_t N, int64_t B) {
    const int64_t D = c.hidden_size, Dq = c.q_dim(), Dk = c.kv_dim(), C = c.conv_channels();
    const int64_t R = c.router_hidden_size, K = c.router_classes(), I = c.moe_intermediate_size;
    const int64_t p_rows = cpu::cca_conv_p_rows(N, B, cpu::ConvShape{C, c.num_attention_heads + c.num_key_value_heads,
                                                           c.cca_time0, c.cca_time1});
    return {{&s.d_res[0], N * D}, {&s.d_res[1], N * D}, {&s.d_res1, N * D}, {&s.d_x, N * D},    {&s.d_tmp, N * D},
            {&s.d_att, N * Dq},   {&s.dq, N * Dq},        {&s.dk, N * Dk},    {&s.dv, N * Dk},     {&s.d_vdel, N * Dk / 2},
            {&s.q_pre, N * Dq},   {&s.k_pre, N * Dk},     {&s.dconv, N * C},  {&s.dz, N * C},      {&s.dp, p_rows * C},
            {&s.d_rho, N * R},    {&s.d_carry, N * R},    {&s.d_r1, N * R},   {&s.d_r2, N * R},    {&s.d_rlogits, N * K},
            {&s.dp_sel, N},       {&s.dy, N * D},         {&s.da, N * I},     {&s.dh, N * 2 * I},  {&s.dxg, N * D}};
}
size_t aligned(int64_t n) { return (size_t(n) + 15) / 16 * 16; }
} // namespace

size_t GradScratch::bytes_needed(const ZayaConfig &c, int64_t N, int64_t B) {
    GradScratch s;
    size_t total = 0;
    for (auto &p : scratch_parts(s, c, N, B)) total += aligned(p.second);
    return total * sizeof(real);
}

GradScratch GradScratch::plan(const ZayaConfig &c, int64_t N, int64_t B, Backend &backend) {
    GradScratch s;
    auto parts = scratch_parts(s, c, N, B);
    size_t total = 0;
    for (auto &p : parts) total += aligned(p.second);
    s.buf = backend.alloc(total);
    size_t at = 0;
    for (auto &p : parts) {
        *p.first = s.buf.data() + at;
        at += aligned(p.second);
    }
    return s;
}

namespace {

// Backward of the CCA attention sub-block: d_attn_out (s.d_tmp) → d_x_norm1 (s.d_x, written).
void cca_attention_backward(Backend &be, const ZayaConfig &c, int64_t l, const LayerWeights &w, LayerWeights &g,
                            const SeqBatch &batch, const LayerActs &A, Activations &acts, GradScratch &s) {
    ChunkExchange *cp = acts.context;
    SeqBatch sb = batch;
    if (cp) sb.prefix = cp->prefix(l); // the layer's halo and the gathered keys' layout
    const int64_t N = sb.N, D = c.hidden_size;
    const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
    const int64_t Dq = c.q_dim(), Dk = c.kv_dim(), C = c.conv_channels(), Dv = Dk / 2;
    const int type = c.layer_types[size_t(l)] == LayerType::HybridSliding ? 1 : 0;

    // 8. o_proj; 7. attention.
    be.linear_backward(s.d_att, g.o_proj, g.o_bias, s.d_tmp, D, {A.att, A.att16}, w.o_proj, N, Dq, D, false);
    cpu::AttnShape as{nq, nkv, hd, 1.0f / std::sqrt(real(hd)), type == 1 ? *c.sliding_window : 0};
    be.phase("bwd.attn.core");
    if (cp) { // against the gathered keys; their gradients summed onto their owners
        const auto [keys, values] = cp->gathered_kv(l);
        const auto [dkeys, dvalues] = cp->zeroed_kv_grads();
        be.attention_backward(s.dq, dkeys, dvalues, s.d_att, A.att, A.lse, A.q, keys, values, sb, as);
        cp->reduce_kv_grads(s.dk, s.dv);
    } else {
        be.attention_backward(s.dq, s.dk, s.dv, s.d_att, A.att, A.lse, A.q, A.k, A.v, sb, as);
    }
    // 6. RoPE; 5. QK-norm (needs the pre-norm q/k: recomputed from the saved conv output and z); 3. q-k mean paths,
    // as one op. 2. convs; dz collects both.
    be.phase("bwd.attn.conv");
    be.cca_qk_backward(s.dconv, s.dz, g.temp, s.dq, s.dk, s.q_pre, s.k_pre, A.conv, A.z, A.qn, A.kn, w.temp,
                       acts.rope_cos[type], acts.rope_sin[type], N, nq, nkv, hd, c.rotary_dim(l));
    cpu::ConvShape cs{C, nq + nkv, c.cca_time0, c.cca_time1};
    be.cca_conv_backward(s.dz, s.dp, g.conv_dw, g.conv_dw_bias, g.conv_g, g.conv_g_bias, s.dconv, A.z, A.p, sb, cs,
                         w.conv_dw, w.conv_g);
    // 4. values: current half straight through; delayed half shifted back by one token. The first token's
    // delayed value is the bias alone (zero input), the last token's delayed projection is unused.
    be.phase("bwd.attn.proj");
    be.delayed_values_backward(s.d_vdel, g.v_del_bias, s.dv + Dv, Dk, sb, Dv);
    if (cp) cp->return_halo_grads(s.dz, s.d_vdel); // the next chunk's conv and value shift read this one's end
    // 1. q‖k projections and 4. the value projections → d_x_norm1, as one op (they read the same x_norm1).
    const LinearGrad proj[] = {{s.dz, C, w.q_proj, Dq, g.q_proj, g.q_bias},
                               {s.dz + Dq, C, w.k_proj, Dk, g.k_proj, g.k_bias},
                               {s.dv, Dk, w.v_cur, Dv, g.v_cur, g.v_cur_bias},
                               {s.d_vdel, Dv, w.v_del, Dv, g.v_del, g.v_del_bias}};
    be.linears_backward(s.d_x, proj, {A.x_norm1, A.x_norm1_16}, N, D, false);
}

// Backward of the router: dp_sel (s.dp_sel) → d_x_norm2 (s.d_x, accumulated), and the EDA state gradient carried
// to the previous layer (s.d_carry, rewritten).
void router_backward(Backend &be, const ZayaConfig &c, const LayerWeights &w, LayerWeights &g, int64_t N,
                     const LayerActs &A, const real *rho_prev, GradScratch &s) {
    const int64_t D = c.hidden_size, R = c.router_hidden_size, K = c.router_classes();
    be.router_select_backward(s.d_rlogits, s.dp_sel, A.probs, A.choice, N, K);
    be.linear_backward(s.d_r2, g.router_out, nullptr, s.d_rlogits, K, A.a2, w.router_out, N, R, K, false);
    be.gelu_backward(s.d_r2, s.d_r2, A.h2, N * R);
    be.linear_backward(s.d_r1, g.router_fc2, g.router_fc2_bias, s.d_r2, R, A.a1, w.router_fc2, N, R, R, false);
    be.gelu_backward(s.d_r1, s.d_r1, A.h1, N * R);
    be.linear_backward(s.d_r2, g.router_fc1, g.router_fc1_bias, s.d_r1, R, A.r_norm, w.router_fc1, N, R, R, false);
    // d_rho = own path (router RMSNorm) + the next layer's EDA share (already in d_carry).
    be.rmsnorm_backward(s.d_carry, g.router_norm, s.d_r2, A.rho, w.router_norm, A.r_rstd, N, R, /*accumulate=*/true);
    std::swap(s.d_rho, s.d_carry);
    // ρ = down(x) + b + γ⊙ρ_prev
    be.linear_backward(s.d_x, g.router_down, g.router_down_bias, s.d_rho, R, {A.x_norm2, A.x_norm2_16}, w.router_down,
                       N, D, R, true);
    const bool mixes = w.router_state_scale && rho_prev;
    if (mixes) be.column_dot_add(g.router_state_scale, s.d_rho, R, rho_prev, R, N, R);
    be.eda_carry_backward(s.d_carry, mixes ? w.router_state_scale : nullptr, s.d_rho, N, R);
}

} // namespace

double model_backward(const Model &m, const Batch &batch, Activations &acts, const int32_t *targets, GradScratch &s,
                      real *grads, real loss_scale, const std::function<void(int64_t)> &layer_done) {
    const ZayaConfig &c = m.config;
    if (!acts.keep_all_layers) fail("model_backward needs activations planned with keep_all_layers");
    const int64_t N = batch.num_tokens(), D = c.hidden_size, V = c.vocab_size;
    const int64_t L = c.num_hidden_layers;
    Backend &be = *acts.backend;
    ModelWeights gw = ModelWeights::bind(c, m.layout, grads);
    // The batch and targets are where model_forward put them (acts.tokens, acts.seq_start, acts.targets).
    const SeqBatch sb = seq_batch(batch, acts);

    int64_t count = 0;
    for (int64_t n = 0; n < N; ++n) count += targets[n] >= 0;
    // Without a target the gradient is zero — except with context parallelism, where this rank's keys, values and
    // halos feed the other ranks' targets (and its exchanges are collective): the pass runs, its own loss zero.
    if (count == 0 && !acts.context) return 0.0;
    // Loss → logits → LM head → final norm.
    be.phase("bwd.lm_head");
    const double loss = be.lm_head_backward(s.d_x, gw.lm_head, gw.lm_head_bias, acts.logits, acts.final_norm,
                                            m.w.lm_head, m.w.lm_head_bias, acts.targets, N, D, V, loss_scale,
                                            std::max<int64_t>(count, 1));
    // Each norm's backward runs fused with the residual scaling whose output it read (see model_forward): the final
    // norm and each layer's input_norm with the MoE residual below them, post_norm with the attention residual.
    if (L == 0)
        be.rmsnorm_backward(s.d_res[0], gw.final_norm, s.d_x, acts.embed, m.w.final_norm, acts.final_rstd, N, D, false);
    be.zero(s.d_carry, size_t(N * c.router_hidden_size) * sizeof(real));

    for (int64_t l = L - 1; l >= 0; --l) {
        const LayerWeights &w = m.w.layers[size_t(l)];
        LayerWeights &g = gw.layers[size_t(l)];
        const LayerActs &A = acts.layer(l);
        const real *residual = l == 0 ? acts.embed : acts.layer(l - 1).res2;
        const real *rho_prev = l == 0 ? nullptr : acts.layer(l - 1).rho;
        real *d_out = s.d_res[0], *d_in = s.d_res[1];

        // MoE sub-block: res2 = ResScale(moe_out, res1), normed by the final norm (last layer: d_out not yet
        // written) or by layer l+1's input_norm (d_out holds the gradient of layer l+1's attention residual path;
        // s.d_x still holds d x_norm1 of layer l+1).
        const bool last = l == L - 1;
        be.phase("bwd.experts"); // with the residual norm after them
        real *dw_norm = last ? gw.final_norm : gw.layers[size_t(l + 1)].input_norm;
        const real *w_norm = last ? m.w.final_norm : m.w.layers[size_t(l + 1)].input_norm;
        const real *rstd = last ? acts.final_rstd : acts.layer(l + 1).rstd1;
        be.rmsnorm_residual_backward(s.d_tmp, s.d_res1, g.mlp_res[0], g.mlp_res[1], g.mlp_res[2], g.mlp_res[3],
                                     dw_norm, d_out, s.d_x, A.res2, w_norm, rstd, A.moe_out, A.res1, w.mlp_res[0],
                                     w.mlp_res[1], w.mlp_res[2], w.mlp_res[3], N, D, /*accumulate_g=*/!last, false);
        if (!last && layer_done) layer_done(l + 1); // its input_norm was the last of its gradients
        cpu::MoeShape ms{D, c.moe_intermediate_size, c.num_experts, c.skip_passthrough};
        be.moe_experts_backward(s.d_x, s.dp_sel, g.experts_gate_up, g.experts_down, s.dy, s.da, s.dh, s.dxg, s.d_tmp,
                                A.order, A.offsets, A.p_sel, A.xg, A.h, A.a, A.y, w.experts_gate_up, w.experts_down,
                                N, ms);
        be.phase("bwd.router");
        router_backward(be, c, w, g, N, A, rho_prev, s);
        // Attention sub-block: res1 = ResScale(attn_out, residual), normed by post_norm.
        be.phase("bwd.attn.out"); // the residual norm and the output projection
        be.rmsnorm_residual_backward(s.d_tmp, d_in, g.attn_res[0], g.attn_res[1], g.attn_res[2], g.attn_res[3],
                                     g.post_norm, s.d_res1, s.d_x, A.res1, w.post_norm, A.rstd2, A.attn_out, residual,
                                     w.attn_res[0], w.attn_res[1], w.attn_res[2], w.attn_res[3], N, D,
                                     /*accumulate_g=*/true, false);
        cca_attention_backward(be, c, l, w, g, sb, A, acts, s);
        // Layer 0's input norm reads the embedding; the others' run fused in the next iteration.
        if (l == 0) be.rmsnorm_backward(d_in, g.input_norm, s.d_x, residual, w.input_norm, A.rstd1, N, D, true);
        std::swap(s.d_res[0], s.d_res[1]);
        if (l == 0 && layer_done) layer_done(0);
    }
    // Embedding with input bias/scale; the padding row gets nothing from the lookup (nn.Embedding(padding_idx)).
    be.phase("bwd.embed");
    be.embedding_backward(gw.embed, gw.input_bias, gw.input_scale, s.d_res[0], acts.tokens, m.w.embed,
                          m.w.input_bias, m.w.input_scale, N, D, int32_t(c.pad_token_id));
    return loss;
}

} // namespace zaya
