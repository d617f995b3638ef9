#include "model/backward.h"

#include "core/error.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/loss.h"
#include "ops/cpu/moe.h"
#include "ops/cpu/norm.h"
#include "ops/cpu/reduce.h"

#include <algorithm>
#include <cmath>

namespace zaya {

using namespace cpu;

namespace {
// The scratch arrays in order, with their sizes; plan() carves them, bytes_needed() only adds them up.
std::vector<std::pair<real **, int64_t>> scratch_parts(GradScratch &s, const ZayaConfig &c, int64_t N, int64_t B) {
    const int64_t D = c.hidden_size, Dq = c.q_dim(), Dk = c.kv_dim(), C = c.conv_channels();
    const int64_t R = c.router_hidden_size, K = c.router_classes(), I = c.moe_intermediate_size;
    const int64_t p_rows = cca_conv_p_rows(N, B, ConvShape{C, c.num_attention_heads + c.num_key_value_heads,
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

GradScratch GradScratch::plan(const ZayaConfig &c, int64_t N, int64_t B) {
    GradScratch s;
    auto parts = scratch_parts(s, c, N, B);
    size_t total = 0;
    for (auto &p : parts) total += aligned(p.second);
    s.buf = RealBuffer::zeros(total);
    size_t at = 0;
    for (auto &p : parts) {
        *p.first = s.buf.data() + at;
        at += aligned(p.second);
    }
    return s;
}

namespace {

// Backward of the CCA attention sub-block: d_attn_out (s.d_tmp) → d_x_norm1 (s.d_x, written).
void cca_attention_backward(const ZayaConfig &c, int64_t l, const LayerWeights &w, LayerWeights &g,
                            const Batch &batch, const LayerActs &A, Activations &acts, GradScratch &s) {
    const int64_t N = batch.num_tokens(), B = batch.num_sequences(), D = c.hidden_size;
    const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
    const int64_t Dq = c.q_dim(), Dk = c.kv_dim(), C = c.conv_channels(), Dv = Dk / 2;
    const int64_t *seq = batch.seq_start.data();
    const int type = c.layer_types[size_t(l)] == LayerType::HybridSliding ? 1 : 0;

    // 8. o_proj; 7. attention.
    linear_backward(s.d_att, g.o_proj, g.o_bias, s.d_tmp, D, A.att, w.o_proj, N, Dq, D, false);
    AttnShape as{nq, nkv, hd, 1.0f / std::sqrt(real(hd)), type == 1 ? *c.sliding_window : 0};
    attention_backward(s.dq, s.dk, s.dv, s.d_att, A.att, A.lse, A.q, A.k, A.v, seq, B, as);
    // 6. RoPE; 5. QK-norm (needs the pre-norm q/k: recompute them from the saved conv output and z).
    const int64_t rot = c.rotary_dim(l);
    rope_backward(s.dq, acts.rope_cos[type], acts.rope_sin[type], N, nq, hd, rot);
    rope_backward(s.dk, acts.rope_cos[type], acts.rope_sin[type], N, nkv, hd, rot);
    cca_qk_mean_forward(s.q_pre, s.k_pre, A.conv, A.z, N, nq, nkv, hd);
    cca_qk_norm_backward(s.dq, s.dk, g.temp, s.q_pre, s.k_pre, A.qn, A.kn, w.temp, N, nq, nkv, hd);
    // 3. q-k mean paths; 2. convs. dz collects both.
    cca_qk_mean_backward(s.dconv, s.dz, s.dq, s.dk, N, nq, nkv, hd);
    ConvShape cs{C, nq + nkv, c.cca_time0, c.cca_time1};
    cca_conv_backward(s.dz, s.dp, g.conv_dw, g.conv_dw_bias, g.conv_g, g.conv_g_bias, s.dconv, A.z, A.p, seq, B, cs,
                      w.conv_dw, w.conv_g);
    // 1. q‖k projections → d_x_norm1.
    linear_backward(s.d_x, g.q_proj, g.q_bias, s.dz, C, A.x_norm1, w.q_proj, N, D, Dq, false);
    linear_backward(s.d_x, g.k_proj, g.k_bias, s.dz + Dq, C, A.x_norm1, w.k_proj, N, D, Dk, true);
    // 4. values: current half straight through; delayed half shifted back by one token. The first token's
    // delayed value is the bias alone (zero input), the last token's delayed projection is unused.
    linear_backward(s.d_x, g.v_cur, g.v_cur_bias, s.dv, Dk, A.x_norm1, w.v_cur, N, D, Dv, true);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t n = seq[b]; n < seq[b + 1]; ++n) {
            const real *src = s.dv + n * Dk + Dv;
            if (n > seq[b]) std::copy(src, src + Dv, s.d_vdel + (n - 1) * Dv);
            else if (g.v_del_bias)
                for (int64_t i = 0; i < Dv; ++i) g.v_del_bias[i] += src[i];
            if (n + 1 == seq[b + 1]) std::fill(s.d_vdel + n * Dv, s.d_vdel + (n + 1) * Dv, real(0));
        }
    linear_backward(s.d_x, g.v_del, g.v_del_bias, s.d_vdel, Dv, A.x_norm1, w.v_del, N, D, Dv, true);
}

// Backward of the router: dp_sel (s.dp_sel) → d_x_norm2 (s.d_x, accumulated), and the EDA state gradient carried
// to the previous layer (s.d_carry, rewritten).
void router_backward(const ZayaConfig &c, const LayerWeights &w, LayerWeights &g, int64_t N, const LayerActs &A,
                     const real *rho_prev, GradScratch &s) {
    const int64_t D = c.hidden_size, R = c.router_hidden_size, K = c.router_classes();
    router_select_backward(s.d_rlogits, s.dp_sel, A.probs, A.choice, N, K);
    linear_backward(s.d_r2, g.router_out, nullptr, s.d_rlogits, K, A.a2, w.router_out, N, R, K, false);
    gelu_backward(s.d_r2, s.d_r2, A.h2, N * R);
    linear_backward(s.d_r1, g.router_fc2, g.router_fc2_bias, s.d_r2, R, A.a1, w.router_fc2, N, R, R, false);
    gelu_backward(s.d_r1, s.d_r1, A.h1, N * R);
    linear_backward(s.d_r2, g.router_fc1, g.router_fc1_bias, s.d_r1, R, A.r_norm, w.router_fc1, N, R, R, false);
    // d_rho = own path (router RMSNorm) + the next layer's EDA share (already in d_carry).
    rmsnorm_backward(s.d_carry, g.router_norm, s.d_r2, A.rho, w.router_norm, A.r_rstd, N, R, /*accumulate=*/true);
    std::swap(s.d_rho, s.d_carry);
    // ρ = down(x) + b + γ⊙ρ_prev
    linear_backward(s.d_x, g.router_down, g.router_down_bias, s.d_rho, R, A.x_norm2, w.router_down, N, D, R, true);
    if (w.router_state_scale && rho_prev) {
        column_dot_add(g.router_state_scale, s.d_rho, R, rho_prev, R, N, R);
#pragma omp parallel for schedule(static)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < R; ++i) s.d_carry[n * R + i] = w.router_state_scale[i] * s.d_rho[n * R + i];
    } else {
        std::fill(s.d_carry, s.d_carry + N * R, real(0));
    }
}

} // namespace

void model_backward(const Model &m, const Batch &batch, Activations &acts, const int32_t *targets, GradScratch &s,
                    real *grads, real loss_scale, const std::function<void(int64_t)> &layer_done) {
    const ZayaConfig &c = m.config;
    if (!acts.keep_all_layers) fail("model_backward needs activations planned with keep_all_layers");
    const int64_t N = batch.num_tokens(), D = c.hidden_size, V = c.vocab_size, L = c.num_hidden_layers;
    ModelWeights gw = ModelWeights::bind(c, m.layout, grads);

    int64_t count = 0;
    for (int64_t n = 0; n < N; ++n) count += targets[n] >= 0;
    if (count == 0) return;
    // Loss → logits → LM head → final norm.
    cross_entropy_backward(acts.logits, targets, N, V, loss_scale / real(count));
    linear_backward(s.d_x, gw.lm_head, gw.lm_head_bias, acts.logits, V, acts.final_norm, m.w.lm_head, N, D, V, false);
    const real *last = acts.layer(L - 1).res2;
    rmsnorm_backward(s.d_res[0], gw.final_norm, s.d_x, last, m.w.final_norm, acts.final_rstd, N, D, false);
    std::fill(s.d_carry, s.d_carry + N * c.router_hidden_size, real(0));

    for (int64_t l = L - 1; l >= 0; --l) {
        const LayerWeights &w = m.w.layers[size_t(l)];
        LayerWeights &g = gw.layers[size_t(l)];
        const LayerActs &A = acts.layer(l);
        const real *residual = l == 0 ? acts.embed : acts.layer(l - 1).res2;
        const real *rho_prev = l == 0 ? nullptr : acts.layer(l - 1).rho;
        real *d_out = s.d_res[0], *d_in = s.d_res[1];

        // MoE sub-block: res2 = ResScale(moe_out, res1).
        residual_scale_backward(s.d_tmp, s.d_res1, g.mlp_res[0], g.mlp_res[1], g.mlp_res[2], g.mlp_res[3], d_out,
                                A.moe_out, A.res1, w.mlp_res[0], w.mlp_res[1], w.mlp_res[2], w.mlp_res[3], N, D,
                                false);
        MoeShape ms{D, c.moe_intermediate_size, c.num_experts, c.skip_passthrough};
        moe_experts_backward(s.d_x, s.dp_sel, g.experts_gate_up, g.experts_down, s.dy, s.da, s.dh, s.dxg, s.d_tmp,
                             A.order, A.offsets, A.p_sel, A.xg, A.h, A.a, A.y, w.experts_gate_up, w.experts_down, N,
                             ms);
        router_backward(c, w, g, N, A, rho_prev, s);
        rmsnorm_backward(s.d_res1, g.post_norm, s.d_x, A.res1, w.post_norm, A.rstd2, N, D, true);
        // Attention sub-block: res1 = ResScale(attn_out, residual).
        residual_scale_backward(s.d_tmp, d_in, g.attn_res[0], g.attn_res[1], g.attn_res[2], g.attn_res[3], s.d_res1,
                                A.attn_out, residual, w.attn_res[0], w.attn_res[1], w.attn_res[2], w.attn_res[3], N, D,
                                false);
        cca_attention_backward(c, l, w, g, batch, A, acts, s);
        rmsnorm_backward(d_in, g.input_norm, s.d_x, residual, w.input_norm, A.rstd1, N, D, true);
        std::swap(s.d_res[0], s.d_res[1]);
        if (layer_done) layer_done(l);
    }
    // Embedding with input bias/scale; the padding row gets nothing from the lookup (nn.Embedding(padding_idx)).
    embedding_backward(gw.embed, gw.input_bias, gw.input_scale, s.d_res[0], batch.tokens.data(), m.w.embed,
                       m.w.input_bias, m.w.input_scale, N, D, int32_t(c.pad_token_id));
}

} // namespace zaya
