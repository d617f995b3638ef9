#include "model/forward.h"

#include "core/error.h"
#include "model/chunk_exchange.h"
#include "ops/backend.h"

#include <algorithm>
#include <cmath>

namespace zaya {

namespace {

// The batch in the backend's memory (copied into the activations' batch arrays) and its shape for the ops.
SeqBatch upload_batch(const Batch &batch, Activations &acts, const int32_t *targets) {
    Backend &be = *acts.backend;
    const int64_t N = batch.num_tokens(), B = batch.num_sequences();
    be.upload(acts.tokens, batch.tokens.data(), size_t(N) * sizeof(int32_t));
    be.upload(acts.positions, batch.positions.data(), size_t(N) * sizeof(int32_t));
    be.upload(acts.seq_start, batch.seq_start.data(), size_t(B + 1) * sizeof(int64_t));
    if (targets) be.upload(acts.targets, targets, size_t(N) * sizeof(int32_t));
    return seq_batch(batch, acts);
}

// CCA attention sub-block: x_norm1 → attn_out (spec A.3).
void cca_attention_forward(Backend &be, const ZayaConfig &c, int64_t l, const LayerWeights &w,
                           const SeqBatch &batch, LayerActs &A, Activations &acts) {
    SeqBatch sb = batch;
    const int64_t N = sb.N, D = c.hidden_size;
    const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
    const int64_t Dq = c.q_dim(), Dk = c.kv_dim(), C = c.conv_channels(), Dv = Dk / 2;

    // 1. q‖k projections, packed as the conv input z [N, C]; 4. values: KV head 0 from the current token, KV head 1
    // from the previous one (spec A.3 step 4), independent of steps 2-6, which run as one fused op after them. The
    // four read x_norm1: one op, so a bf16 backend converts it once.
    const LinearOut proj[] = {{A.z, C, w.q_proj, w.q_bias, Dq},
                              {A.z + Dq, C, w.k_proj, w.k_bias, Dk},
                              {A.v, Dk, w.v_cur, w.v_cur_bias, Dv},
                              {A.v_del, Dv, w.v_del, w.v_del_bias, Dv}};
    be.phase("fwd.attn.proj");
    be.linears_forward(proj, {A.x_norm1, A.x_norm1_16}, N, D);
    ChunkExchange *cp = acts.context;
    if (cp) sb.prefix = cp->exchange_halos(l, A.z, A.v_del); // what the value shift and conv read before the chunk
    be.delayed_values_forward(A.v + Dv, Dk, A.v_del, w.v_del_bias, sb, Dv);
    // 2. causal depthwise + grouped conv over time; 3. q-k mean residual paths; 5. L2 QK-norm to √hd with the
    // linear key temperature; 6. partial neox RoPE.
    cpu::ConvShape cs{C, nq + nkv, c.cca_time0, c.cca_time1};
    const int type = c.layer_types[size_t(l)] == LayerType::HybridSliding ? 1 : 0;
    be.phase("fwd.attn.conv");
    be.cca_conv_qk_forward(A.conv, A.p, A.q, A.k, A.qn, A.kn, A.z, sb, cs, w.conv_dw, w.conv_dw_bias, w.conv_g,
                           w.conv_g_bias, w.temp, acts.rope_cos[type], acts.rope_sin[type], nq, nkv, c.rotary_dim(l));
    // 7. causal GQA attention; 8. output projection.
    cpu::AttnShape as{nq, nkv, hd, 1.0f / std::sqrt(real(hd)), type == 1 ? *c.sliding_window : 0};
    be.phase("fwd.attn.core");
    const auto [keys, values] = cp ? cp->gather_kv(l, A.k, A.v) : std::pair<const real *, const real *>{A.k, A.v};
    be.attention_forward(A.att, A.att16, A.lse, A.q, keys, values, sb, as);
    be.phase("fwd.attn.out"); // the output projection and the residual norm after it
    be.linear_forward(A.attn_out, D, {A.att, A.att16}, w.o_proj, w.o_bias, N, Dq, D);
}

// Router (spec A.4): x_norm2 and the previous layer's state → choice, p_sel, and this layer's state (A.rho).
void router_forward(Backend &be, const ZayaConfig &c, const LayerWeights &w, int64_t N, const real *rho_prev,
                    LayerActs &A) {
    const int64_t D = c.hidden_size, R = c.router_hidden_size, K = c.router_classes();
    // Down-projection into scratch first: with one reused activation set, rho_prev aliases A.rho.
    be.linear_forward(A.h1, R, {A.x_norm2, A.x_norm2_16}, w.router_down, w.router_down_bias, N, D, R);
    be.eda_forward(A.rho, A.h1, w.router_state_scale, rho_prev, N, R);
    // RMSNorm → fc1 → GELU → fc2 → GELU → out → softmax and selection, as one op.
    be.router_mlp_forward(A.r_norm, A.r_rstd, A.h1, A.a1, A.h2, A.a2, A.r_logits, A.probs, A.choice, A.p_sel, A.rho,
                          w.router_norm, w.router_fc1, w.router_fc1_bias, w.router_fc2, w.router_fc2_bias, w.router_out,
                          w.balancing_biases, N, R, K, real(c.rms_norm_eps));
}

} // namespace

SeqBatch seq_batch(const Batch &batch, const Activations &acts) {
    const int64_t B = batch.num_sequences();
    int64_t max_len = 0;
    for (int64_t s = 0; s < B; ++s) max_len = std::max(max_len, batch.seq_start[size_t(s + 1)] - batch.seq_start[size_t(s)]);
    return SeqBatch{acts.seq_start, B, batch.num_tokens(), max_len};
}

ForwardResult model_forward(const Model &m, const Batch &batch, Activations &acts, const int32_t *targets,
                            bool loss_in_backward) {
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
    if (targets)
        for (int64_t n = 0; n < N; ++n)
            if (targets[n] >= V) fail("target id {} at position {} is outside the vocabulary [0, {})", targets[n], n, V);
    Backend &be = *acts.backend;
    be.phase("fwd.embed"); // the batch's upload, RoPE tables, embedding and the first norm
    if (acts.context) acts.context->begin(batch);
    const SeqBatch sb = upload_batch(batch, acts, targets);

    for (int type = 0; type < 2; ++type) {
        const RopeParams &rp = type == 0 ? c.rope_hybrid : c.rope_sliding;
        int64_t rot = int64_t(double(c.head_dim) * rp.partial_rotary_factor);
        be.rope_tables(acts.rope_cos[type], acts.rope_sin[type], acts.positions, N, rot, rp.rope_theta);
    }
    be.embedding_forward(acts.embed, acts.tokens, m.w.embed, m.w.input_bias, m.w.input_scale, N, D);

    // Each residual scaling runs fused with the RMSNorm that reads its output: post_norm after attention, and after
    // the MoE the next layer's input_norm (the final norm after the last layer).
    const int64_t L = c.num_hidden_layers;
    const real eps = real(c.rms_norm_eps);
    if (L == 0)
        be.rmsnorm_forward(acts.final_norm, nullptr, acts.final_rstd, acts.embed, m.w.final_norm, N, D, eps);
    else
        be.rmsnorm_forward(acts.layer(0).x_norm1, acts.layer(0).x_norm1_16, acts.layer(0).rstd1, acts.embed,
                           m.w.layers[0].input_norm, N, D, eps);
    const real *residual = acts.embed;
    const real *rho_prev = nullptr;
    for (int64_t l = 0; l < L; ++l) {
        const LayerWeights &w = m.w.layers[size_t(l)];
        LayerActs &A = acts.layer(l);
        cca_attention_forward(be, c, l, w, sb, A, acts);
        be.residual_rmsnorm_forward(A.res1, A.x_norm2, A.x_norm2_16, A.rstd2, A.attn_out, residual, w.attn_res[0],
                                    w.attn_res[1], w.attn_res[2], w.attn_res[3], w.post_norm, N, D, eps);
        be.phase("fwd.router"); // with the grouping of tokens by expert
        router_forward(be, c, w, N, rho_prev, A);
        be.moe_group_tokens(A.order, A.offsets, A.choice, N, c.num_experts);
        cpu::MoeShape ms{D, c.moe_intermediate_size, c.num_experts, c.skip_passthrough};
        be.phase("fwd.experts"); // and the residual norm after them
        be.moe_experts_forward(A.moe_out, A.xg, A.h, A.a, A.y, A.x_norm2, A.order, A.offsets, A.p_sel,
                               w.experts_gate_up, w.experts_down, N, ms);
        // (With one reused activation set, the next layer's x_norm1 is this layer's: no longer read here.)
        const bool last = l + 1 == L;
        real *normed = last ? acts.final_norm : acts.layer(l + 1).x_norm1;
        real *rstd = last ? acts.final_rstd : acts.layer(l + 1).rstd1;
        uint16_t *normed16 = last ? nullptr : acts.layer(l + 1).x_norm1_16;
        const real *norm_w = last ? m.w.final_norm : m.w.layers[size_t(l + 1)].input_norm;
        be.residual_rmsnorm_forward(A.res2, normed, normed16, rstd, A.moe_out, A.res1, w.mlp_res[0], w.mlp_res[1],
                                    w.mlp_res[2], w.mlp_res[3], norm_w, N, D, eps);
        residual = A.res2;
        rho_prev = A.rho;
    }

    ForwardResult r;
    if (targets)
        for (int64_t n = 0; n < N; ++n) r.loss_tokens += targets[n] >= 0;
    if (targets && loss_in_backward && !be.lm_head_needs_logits()) {
        r.loss_deferred = true;
        return r;
    }
    be.phase("fwd.lm_head");
    r.loss = be.lm_head_forward(acts.logits, acts.losses, acts.final_norm, m.w.lm_head, m.w.lm_head_bias,
                                targets ? acts.targets : nullptr, N, D, V);
    return r;
}

} // namespace zaya
