#include "model/forward.h"

#include "core/error.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/loss.h"
#include "ops/cpu/moe.h"
#include "ops/cpu/norm.h"

#include <cmath>

namespace zaya {

using namespace cpu;

namespace {

// y[:, col0 : col0+O] (row stride ldy) = x[N,I]·W[O,I]ᵀ + b — writes a projection straight into a packed buffer.
void project_into(real *y, int64_t ldy, const real *x, const real *W, const real *b, int64_t N, int64_t I,
                  int64_t O) {
    gemm(false, true, N, O, I, 1.0f, x, I, W, I, 0.0f, y, ldy);
    if (!b) return;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) y[n * ldy + o] += b[o];
}

// CCA attention sub-block: x_norm1 → attn_out (spec A.3).
void cca_attention_forward(const ZayaConfig &c, int64_t l, const LayerWeights &w, const Batch &batch, LayerActs &A,
                           Activations &acts) {
    const int64_t N = batch.num_tokens(), B = batch.num_sequences(), D = c.hidden_size;
    const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
    const int64_t Dq = c.q_dim(), Dk = c.kv_dim(), C = c.conv_channels(), Dv = Dk / 2;
    const int64_t *seq = batch.seq_start.data();

    // 1. q‖k projections, packed as the conv input z [N, C].
    project_into(A.z, C, A.x_norm1, w.q_proj, w.q_bias, N, D, Dq);
    project_into(A.z + Dq, C, A.x_norm1, w.k_proj, w.k_bias, N, D, Dk);
    // 2. causal depthwise + grouped conv over time; 3. q-k mean residual paths.
    ConvShape cs{C, nq + nkv, c.cca_time0, c.cca_time1};
    cca_conv_forward(A.conv, A.p, A.z, seq, B, cs, w.conv_dw, w.conv_dw_bias, w.conv_g, w.conv_g_bias);
    cca_qk_mean_forward(A.q, A.k, A.conv, A.z, N, nq, nkv, hd);
    // 4. values: KV head 0 from the current token, KV head 1 from the previous one (spec A.3 step 4).
    project_into(A.v, Dk, A.x_norm1, w.v_cur, w.v_cur_bias, N, D, Dv);
    linear_forward(A.v_del, A.x_norm1, w.v_del, w.v_del_bias, N, D, Dv);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < B; ++s)
        for (int64_t n = seq[s]; n < seq[s + 1]; ++n) {
            real *dst = A.v + n * Dk + Dv;
            // Before the first token the delayed projection sees a zero input: it yields only its bias.
            for (int64_t i = 0; i < Dv; ++i)
                dst[i] = n > seq[s] ? A.v_del[(n - 1) * Dv + i] : (w.v_del_bias ? w.v_del_bias[i] : 0.0f);
        }
    // 5. L2 QK-norm to √hd with the linear key temperature; 6. partial neox RoPE.
    cca_qk_norm_forward(A.q, A.k, A.qn, A.kn, w.temp, N, nq, nkv, hd);
    const int type = c.layer_types[size_t(l)] == LayerType::HybridSliding ? 1 : 0;
    const int64_t rot = c.rotary_dim(l);
    rope_forward(A.q, acts.rope_cos[type], acts.rope_sin[type], N, nq, hd, rot);
    rope_forward(A.k, acts.rope_cos[type], acts.rope_sin[type], N, nkv, hd, rot);
    // 7. causal GQA attention; 8. output projection.
    AttnShape as{nq, nkv, hd, 1.0f / std::sqrt(real(hd)), type == 1 ? *c.sliding_window : 0};
    attention_forward(A.att, A.lse, A.q, A.k, A.v, seq, B, as);
    linear_forward(A.attn_out, A.att, w.o_proj, w.o_bias, N, Dq, D);
}

// Router (spec A.4): x_norm2 and the previous layer's state → choice, p_sel, and this layer's state (A.rho).
void router_forward(const ZayaConfig &c, const LayerWeights &w, int64_t N, const real *rho_prev, LayerActs &A) {
    const int64_t D = c.hidden_size, R = c.router_hidden_size, K = c.router_classes();
    // Down-projection into scratch first: with one reused activation set, rho_prev aliases A.rho.
    linear_forward(A.h1, A.x_norm2, w.router_down, w.router_down_bias, N, D, R);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < R; ++i) {
            real v = A.h1[n * R + i];
            if (w.router_state_scale && rho_prev) v += w.router_state_scale[i] * rho_prev[n * R + i]; // EDA
            A.rho[n * R + i] = v;
        }
    rmsnorm_forward(A.r_norm, A.r_rstd, A.rho, w.router_norm, N, R, real(c.rms_norm_eps));
    linear_forward(A.h1, A.r_norm, w.router_fc1, w.router_fc1_bias, N, R, R);
    gelu_forward(A.a1, A.h1, N * R);
    linear_forward(A.h2, A.a1, w.router_fc2, w.router_fc2_bias, N, R, R);
    gelu_forward(A.a2, A.h2, N * R);
    linear_forward(A.r_logits, A.a2, w.router_out, nullptr, N, R, K);
    router_select_forward(A.probs, A.choice, A.p_sel, A.r_logits, w.balancing_biases, N, K);
}

} // namespace

ForwardResult model_forward(const Model &m, const Batch &batch, Activations &acts, const int32_t *targets) {
    const ZayaConfig &c = m.config;
    const int64_t N = batch.num_tokens(), D = c.hidden_size, V = c.vocab_size;
    if (N > acts.max_tokens || batch.num_sequences() > acts.max_seqs)
        fail("batch of {} tokens in {} sequences exceeds the planned activations ({} tokens, {} sequences)", N,
             batch.num_sequences(), acts.max_tokens, acts.max_seqs);
    for (int64_t n = 0; n < N; ++n)
        if (batch.tokens[size_t(n)] < 0 || batch.tokens[size_t(n)] >= V)
            fail("token id {} at position {} is outside the vocabulary [0, {})", batch.tokens[size_t(n)], n, V);
    for (int64_t n = 0; n < N; ++n)
        if (batch.positions[size_t(n)] >= c.max_position_embeddings)
            fail("position {} exceeds max_position_embeddings ({})", batch.positions[size_t(n)],
                 c.max_position_embeddings);

    for (int type = 0; type < 2; ++type) {
        const RopeParams &rp = type == 0 ? c.rope_hybrid : c.rope_sliding;
        int64_t rot = int64_t(double(c.head_dim) * rp.partial_rotary_factor);
        rope_tables(acts.rope_cos[type], acts.rope_sin[type], batch.positions.data(), N, rot, rp.rope_theta);
    }
    embedding_forward(acts.embed, batch.tokens.data(), m.w.embed, m.w.input_bias, m.w.input_scale, N, D);

    const real *residual = acts.embed;
    const real *rho_prev = nullptr;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const LayerWeights &w = m.w.layers[size_t(l)];
        LayerActs &A = acts.layer(l);
        rmsnorm_forward(A.x_norm1, A.rstd1, residual, w.input_norm, N, D, real(c.rms_norm_eps));
        cca_attention_forward(c, l, w, batch, A, acts);
        residual_scale_forward(A.res1, A.attn_out, residual, w.attn_res[0], w.attn_res[1], w.attn_res[2],
                               w.attn_res[3], N, D);
        rmsnorm_forward(A.x_norm2, A.rstd2, A.res1, w.post_norm, N, D, real(c.rms_norm_eps));
        router_forward(c, w, N, rho_prev, A);
        moe_group_tokens(A.order, A.offsets, A.choice, N, c.num_experts);
        MoeShape ms{D, c.moe_intermediate_size, c.num_experts, c.skip_passthrough};
        moe_experts_forward(A.moe_out, A.xg, A.h, A.a, A.y, A.x_norm2, A.order, A.offsets, A.p_sel,
                            w.experts_gate_up, w.experts_down, N, ms);
        residual_scale_forward(A.res2, A.moe_out, A.res1, w.mlp_res[0], w.mlp_res[1], w.mlp_res[2], w.mlp_res[3], N,
                               D);
        residual = A.res2;
        rho_prev = A.rho;
    }
    rmsnorm_forward(acts.final_norm, acts.final_rstd, residual, m.w.final_norm, N, D, real(c.rms_norm_eps));
    linear_forward(acts.logits, acts.final_norm, m.w.lm_head, m.w.lm_head_bias, N, D, V);

    ForwardResult r;
    if (targets) {
        r.loss = cross_entropy_forward(acts.losses, acts.logits, targets, N, V);
        for (int64_t n = 0; n < N; ++n) r.loss_tokens += targets[n] >= 0;
    }
    return r;
}

} // namespace zaya
