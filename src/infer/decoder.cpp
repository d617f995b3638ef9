#include "infer/decoder.h"

#include "core/error.h"
#include "core/profile.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/moe.h"
#include "ops/cpu/norm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace zaya {

using namespace cpu;

namespace {
void resize(std::vector<float> &v, int64_t n) { v.assign(size_t(n), 0.0f); }
} // namespace

bool batch_invariant_supported() {
#if defined(__AVX512F__)
    return true;
#else
    return false;
#endif
}

Decoder::Decoder(const InferModel &m, int64_t max_tokens, int64_t max_seqs, DType kv_element,
                 MatmulPrecision precision, bool batch_invariant)
    : m_(m), max_tokens_(max_tokens), max_seqs_(max_seqs), kv_element_(kv_dtype_for(kv_element, DType::F32)),
      precision_(precision), batch_invariant_(batch_invariant) {
    if (max_tokens < 1 || max_seqs < 1 || max_seqs > max_tokens)
        fail("decoder needs 1 ≤ max_seqs ({}) ≤ max_tokens ({})", max_seqs, max_tokens);
    if (batch_invariant && !batch_invariant_supported())
        fail("batch-invariant decoding needs the AVX-512 kernels: this build has the portable AVX2 ones, whose sums "
             "for a row depend on the rows beside it (build natively on an AVX-512 CPU: ZAYA_NATIVE=ON)");
    const ZayaConfig &c = m.config;
    const int64_t N = max_tokens, D = c.hidden_size, C = c.conv_channels(), P = c.conv_padding();
    const int64_t R = c.router_hidden_size, K = c.router_classes(), I = c.moe_intermediate_size;
    const int64_t ext = N + max_seqs * P;
    tokens_.resize(size_t(N));
    positions_.resize(size_t(N));
    choice_.resize(size_t(N));
    order_.resize(size_t(N));
    offsets_.resize(size_t(c.num_experts + 2));
    for (auto *v : {&x_, &xn_, &tmp_, &xg_, &yy_, &moe_}) resize(*v, N * D);
    resize(rstd_, N);
    resize(z_, N * C);
    resize(zx_, ext * C);
    resize(convx_, ext * C);
    resize(pbuf_, cca_conv_p_rows(ext, max_seqs, ConvShape{C, 1, c.cca_time0, c.cca_time1}) * C);
    resize(conv_, N * C);
    resize(q_, N * c.q_dim());
    resize(att_, N * c.q_dim());
    resize(k_, N * c.kv_dim());
    resize(v_, N * c.kv_dim());
    resize(vd_, N * c.kv_dim() / 2);
    resize(qn_, N * c.num_attention_heads);
    resize(kn_, N * c.num_key_value_heads);
    for (int t = 0; t < 2; ++t) {
        resize(rope_cos_[t], N * c.head_dim / 2);
        resize(rope_sin_[t], N * c.head_dim / 2);
        resize(rho_[t], N * R);
    }
    for (auto *v : {&h1_, &rn_, &a1_, &h2_}) resize(*v, N * R);
    resize(rrstd_, N);
    resize(rlogits_, N * K);
    resize(probs_, N * K);
    resize(psel_, N);
    resize(hh_, N * 2 * I);
    resize(aa_, N * I);
}

SequenceCache Decoder::new_sequence() const {
    const ZayaConfig &c = m_.config;
    const int64_t L = c.num_hidden_layers, Dv = c.kv_dim() / 2;
    SequenceCache s;
    s.k.assign(size_t(L), KvRows(kv_element_));
    s.v.assign(size_t(L), KvRows(kv_element_));
    s.conv.assign(size_t(L * c.conv_padding() * c.conv_channels()), 0.0f);
    s.vdel.assign(size_t(L * Dv), 0.0f);
    // Before the first token the delayed projection sees a zero input: it yields only its bias.
    for (int64_t l = 0; l < L; ++l)
        if (const float *b = m_.small.layers[size_t(l)].v_del_bias) std::copy(b, b + Dv, s.vdel.begin() + l * Dv);
    return s;
}

void Decoder::forward(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks,
                      float *logits, std::span<const int64_t> rows) {
    ZAYA_PROFILE("decode_forward");
    const ZayaConfig &c = m_.config;
    const int64_t B = int64_t(seqs.size()), D = c.hidden_size, V = c.vocab_size, P = c.conv_padding();
    if (B == 0) return;
    if (int64_t(chunks.size()) != B) fail("decoder: {} sequences but {} chunks", B, chunks.size());
    if (B > max_seqs_) fail("decoder: {} sequences in one call exceed its {}", B, max_seqs_);
    if (!rows.empty() && int64_t(rows.size()) != B)
        fail("decoder: {} sequences but {} logit row counts", B, rows.size());
    start_.assign(size_t(B + 1), 0);
    start_ext_.assign(size_t(B + 1), 0);
    for (int64_t s = 0; s < B; ++s) {
        const int64_t n = int64_t(chunks[size_t(s)].size());
        if (n == 0) fail("decoder: sequence {} was given no tokens", s);
        if (!rows.empty() && (rows[size_t(s)] < 1 || rows[size_t(s)] > n))
            fail("decoder: sequence {} asks logits of {} of its {} tokens", s, rows[size_t(s)], n);
        start_[size_t(s + 1)] = start_[size_t(s)] + n;
        start_ext_[size_t(s + 1)] = start_[size_t(s + 1)] + (s + 1) * P;
        if (start_[size_t(s + 1)] > max_tokens_)
            fail("decoder: more than {} new tokens in one call", max_tokens_);
        if (seqs[size_t(s)]->length + n > c.max_position_embeddings)
            fail("sequence of {} tokens would exceed max_position_embeddings ({})", seqs[size_t(s)]->length + n,
                 c.max_position_embeddings);
        for (int64_t i = 0; i < n; ++i) {
            const int32_t t = chunks[size_t(s)][size_t(i)];
            if (t < 0 || t >= V) fail("token id {} is outside the vocabulary [0, {})", t, V);
            tokens_[size_t(start_[size_t(s)] + i)] = t;
            positions_[size_t(start_[size_t(s)] + i)] = int32_t(seqs[size_t(s)]->length + i);
        }
    }
    const int64_t N = start_[size_t(B)];
    add_snapshots(seqs);
    for (int type = 0; type < 2; ++type) {
        const RopeParams &rp = type == 0 ? c.rope_hybrid : c.rope_sliding;
        const int64_t rot = int64_t(double(c.head_dim) * rp.partial_rotary_factor);
        rope_tables(rope_cos_[type].data(), rope_sin_[type].data(), positions_.data(), N, rot, rp.rope_theta);
    }
    // Embedding with the input scale and bias (spec A.1).
    mat_gather_rows(x_.data(), m_.embed, tokens_.data(), N);
    const float *ib = m_.small.input_bias, *is = m_.small.input_scale;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < D; ++i) x_[size_t(n * D + i)] = (x_[size_t(n * D + i)] + ib[i]) * is[i];

    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layer_forward(l, seqs, N);
    for (int64_t s = 0; s < B; ++s) seqs[size_t(s)]->length += start_[size_t(s + 1)] - start_[size_t(s)];

    // Final norm and LM head, only on the rows whose logits are wanted, moved together (never later than they are).
    int64_t out = 0;
    for (int64_t s = 0; s < B; ++s) {
        const int64_t n = rows.empty() ? 1 : rows[size_t(s)];
        std::memmove(x_.data() + out * D, x_.data() + (start_[size_t(s + 1)] - n) * D, size_t(n * D) * sizeof(float));
        out += n;
    }
    rmsnorm_forward(xn_.data(), rstd_.data(), x_.data(), m_.small.final_norm, out, D, float(c.rms_norm_eps));
    mat_linear(logits, V, xn_.data(), m_.lm_head, m_.small.lm_head_bias, out, precision_, batch_invariant_);
}

void Decoder::prefill(SequenceCache &seq, std::span<const int32_t> tokens, float *logits) {
    if (tokens.empty()) fail("prefill needs at least one token");
    SequenceCache *one[1] = {&seq};
    for (size_t at = 0; at < tokens.size(); at += size_t(max_tokens_)) {
        std::span<const int32_t> chunk = tokens.subspan(at, std::min(tokens.size() - at, size_t(max_tokens_)));
        forward(one, std::span<const std::span<const int32_t>>(&chunk, 1), logits);
    }
}

void Decoder::add_snapshots(std::span<SequenceCache *const> seqs) {
    const ZayaConfig &c = m_.config;
    const size_t conv = size_t(c.num_hidden_layers * c.conv_padding() * c.conv_channels());
    const size_t vdel = size_t(c.num_hidden_layers * c.kv_dim() / 2);
    snap_first_.resize(seqs.size());
    for (size_t s = 0; s < seqs.size(); ++s) {
        SequenceCache &sc = *seqs[s];
        snap_first_[s] = sc.snapshots.size();
        if (sc.snapshot_every <= 0 && sc.snapshot_at <= 0 && sc.draft_from <= 0) continue;
        const int64_t end = sc.length + start_[s + 1] - start_[s];
        for (int64_t b = sc.length + 1; b <= end; ++b)
            if (sc.keeps_state_at(b) || (sc.draft_from > 0 && b >= sc.draft_from && b < end))
                sc.snapshots.push_back(SequenceState{b, std::vector<float>(conv), std::vector<float>(vdel)});
    }
}

// Layer l's part of the snapshots add_snapshots() made: the state after token b − 1 is the P raw rows z before
// position b (in zx_, which holds each sequence's P state rows and then its new rows) and token b − 1's delayed
// value projection (in vd_).
void Decoder::fill_snapshots(int64_t l, std::span<SequenceCache *const> seqs) {
    const ZayaConfig &c = m_.config;
    const int64_t C = c.conv_channels(), P = c.conv_padding(), Dv = c.kv_dim() / 2;
    for (size_t s = 0; s < seqs.size(); ++s) {
        SequenceCache &sc = *seqs[s];
        for (size_t i = snap_first_[s]; i < sc.snapshots.size(); ++i) {
            SequenceState &st = sc.snapshots[i];
            const int64_t j = st.length - sc.length; // new tokens before the snapshot, 1..n
            std::copy_n(zx_.data() + (start_ext_[s] + j) * C, P * C, st.conv.data() + l * P * C);
            std::copy_n(vd_.data() + (start_[s] + j - 1) * Dv, Dv, st.vdel.data() + l * Dv);
        }
    }
}

void Decoder::layer_forward(int64_t l, std::span<SequenceCache *const> seqs, int64_t N) {
    const ZayaConfig &c = m_.config;
    const LayerWeights &w = m_.small.layers[size_t(l)];
    const LayerMats &M = m_.layers[size_t(l)];
    const int64_t B = int64_t(seqs.size()), D = c.hidden_size, C = c.conv_channels(), P = c.conv_padding();
    const int64_t Dq = c.q_dim(), Dk = c.kv_dim(), Dv = Dk / 2, nq = c.num_attention_heads;
    const int64_t nkv = c.num_key_value_heads, hd = c.head_dim;
    const float eps = float(c.rms_norm_eps);

    rmsnorm_forward(xn_.data(), rstd_.data(), x_.data(), w.input_norm, N, D, eps);
    // q‖k projections packed as the conv input z [N, C].
    mat_linear(z_.data(), C, xn_.data(), M.q_proj, w.q_bias, N, precision_, batch_invariant_);
    mat_linear(z_.data() + Dq, C, xn_.data(), M.k_proj, w.k_bias, N, precision_, batch_invariant_);
    // Conv over [stored state rows ; new rows] per sequence. The conv pads each of these with zeros, but the
    // outputs we keep (the new rows) only reach back P rows, all inside the state: they equal the full-sequence
    // conv. Then the last P rows become the new state.
    for (int64_t s = 0; s < B; ++s) {
        SequenceCache &sc = *seqs[size_t(s)];
        const int64_t r0 = start_ext_[size_t(s)], n = start_[size_t(s + 1)] - start_[size_t(s)];
        std::copy_n(sc.conv.data() + l * P * C, P * C, zx_.data() + r0 * C);
        std::copy_n(z_.data() + start_[size_t(s)] * C, n * C, zx_.data() + (r0 + P) * C);
    }
    ConvShape cs{C, nq + nkv, c.cca_time0, c.cca_time1};
    cca_conv_forward(convx_.data(), pbuf_.data(), zx_.data(), start_ext_.data(), B, cs, w.conv_dw, w.conv_dw_bias,
                     w.conv_g, w.conv_g_bias, nullptr, batch_invariant_);
    for (int64_t s = 0; s < B; ++s) {
        SequenceCache &sc = *seqs[size_t(s)];
        const int64_t r0 = start_ext_[size_t(s)], n = start_[size_t(s + 1)] - start_[size_t(s)];
        std::copy_n(convx_.data() + (r0 + P) * C, n * C, conv_.data() + start_[size_t(s)] * C);
        std::copy_n(zx_.data() + (r0 + n) * C, P * C, sc.conv.data() + l * P * C);
    }
    cca_qk_mean_forward(q_.data(), k_.data(), conv_.data(), z_.data(), N, nq, nkv, hd);
    // Values: head 0 from the current token, head 1 the previous token's delayed projection (spec A.3 step 4).
    mat_linear(v_.data(), Dk, xn_.data(), M.v_cur, w.v_cur_bias, N, precision_, batch_invariant_);
    mat_linear(vd_.data(), Dv, xn_.data(), M.v_del, w.v_del_bias, N, precision_, batch_invariant_);
    for (int64_t s = 0; s < B; ++s) {
        float *state = seqs[size_t(s)]->vdel.data() + l * Dv;
        const int64_t a = start_[size_t(s)], b = start_[size_t(s + 1)];
        for (int64_t n = a; n < b; ++n)
            std::copy_n(n == a ? state : vd_.data() + (n - 1) * Dv, Dv, v_.data() + n * Dk + Dv);
        std::copy_n(vd_.data() + (b - 1) * Dv, Dv, state);
    }
    fill_snapshots(l, seqs);
    cca_qk_norm_forward(q_.data(), k_.data(), qn_.data(), kn_.data(), w.temp, N, nq, nkv, hd);
    const int type = c.layer_types[size_t(l)] == LayerType::HybridSliding ? 1 : 0;
    const int64_t rot = c.rotary_dim(l);
    rope_forward(q_.data(), rope_cos_[type].data(), rope_sin_[type].data(), N, nq, hd, rot);
    rope_forward(k_.data(), rope_cos_[type].data(), rope_sin_[type].data(), N, nkv, hd, rot);
    attention(l, seqs);
    mat_linear(tmp_.data(), D, att_.data(), M.o_proj, w.o_bias, N, precision_, batch_invariant_);
    residual_scale_forward(x_.data(), tmp_.data(), x_.data(), w.attn_res[0], w.attn_res[1], w.attn_res[2],
                           w.attn_res[3], N, D);
    rmsnorm_forward(xn_.data(), rstd_.data(), x_.data(), w.post_norm, N, D, eps);
    router_and_experts(l, N);
    residual_scale_forward(x_.data(), moe_.data(), x_.data(), w.mlp_res[0], w.mlp_res[1], w.mlp_res[2], w.mlp_res[3],
                           N, D);
}

void Decoder::attention(int64_t l, std::span<SequenceCache *const> seqs) {
    const ZayaConfig &c = m_.config;
    const int64_t Dq = c.q_dim(), Dk = c.kv_dim();
    const bool sliding = c.layer_types[size_t(l)] == LayerType::HybridSliding;
    AttnShape as{c.num_attention_heads, c.num_key_value_heads, c.head_dim, 1.0f / std::sqrt(float(c.head_dim)),
                 sliding ? *c.sliding_window : 0};
    for (size_t s = 0; s < seqs.size(); ++s) {
        SequenceCache &sc = *seqs[s];
        const int64_t a = start_[s], n = start_[s + 1] - a, p0 = sc.length;
        KvRows &kc = sc.k[size_t(l)], &vc = sc.v[size_t(l)];
        // Appended first: the new tokens attend to their own keys and values as later steps will read them (in a
        // bf16 cache, rounded), so steps compute what a prefill of the same tokens computes.
        kc.append(k_.data() + a * Dk, size_t(n * Dk));
        vc.append(v_.data() + a * Dk, size_t(n * Dk));
        if (kv_element_ == DType::BF16)
            attention_cached(att_.data() + a * Dq, q_.data() + a * Dq, kc.bf16(), vc.bf16(), n, p0, as,
                             batch_invariant_);
        else
            attention_cached(att_.data() + a * Dq, q_.data() + a * Dq, kc.f32(), vc.f32(), n, p0, as,
                             batch_invariant_);
    }
}

// Router (spec A.4) and the routed experts (A.5) for the rows in xn_, into moe_.
void Decoder::router_and_experts(int64_t l, int64_t N) {
    const ZayaConfig &c = m_.config;
    const LayerWeights &w = m_.small.layers[size_t(l)];
    const LayerMats &M = m_.layers[size_t(l)];
    const int64_t D = c.hidden_size, R = c.router_hidden_size, K = c.router_classes(), E = c.num_experts;
    const int64_t I = c.moe_intermediate_size;
    // EDA: this layer's router state adds the scaled state of the layer before (same token).
    float *rho = rho_[rho_cur_ ^ 1].data();
    const float *rho_prev = rho_[rho_cur_].data();
    mat_linear(rho, R, xn_.data(), M.router_down, w.router_down_bias, N, precision_, batch_invariant_);
    if (l > 0 && w.router_state_scale)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t i = 0; i < R; ++i) rho[n * R + i] += w.router_state_scale[i] * rho_prev[n * R + i];
    rho_cur_ ^= 1;
    rmsnorm_forward(rn_.data(), rrstd_.data(), rho, w.router_norm, N, R, float(c.rms_norm_eps));
    mat_linear(h1_.data(), R, rn_.data(), M.router_fc1, w.router_fc1_bias, N, precision_, batch_invariant_);
    gelu_forward(a1_.data(), h1_.data(), N * R);
    mat_linear(h2_.data(), R, a1_.data(), M.router_fc2, w.router_fc2_bias, N, precision_, batch_invariant_);
    gelu_forward(a1_.data(), h2_.data(), N * R);
    mat_linear(rlogits_.data(), K, a1_.data(), M.router_out, nullptr, N, precision_, batch_invariant_);
    router_select_forward(probs_.data(), choice_.data(), psel_.data(), rlogits_.data(), w.balancing_biases, N, K);

    moe_group_tokens(order_.data(), offsets_.data(), choice_.data(), N, E);
    for (int64_t e = 0; e <= E; ++e) {
        const int64_t r0 = offsets_[size_t(e)], n = offsets_[size_t(e + 1)] - r0;
        if (n == 0) continue;
        for (int64_t r = 0; r < n; ++r)
            std::copy_n(xn_.data() + int64_t(order_[size_t(r0 + r)]) * D, D, xg_.data() + r * D);
        if (e < E) {
            mat_linear(hh_.data(), 2 * I, xg_.data(), M.gate_up[size_t(e)], nullptr, n, precision_, batch_invariant_);
            swiglu_forward(aa_.data(), hh_.data(), n, I);
            mat_linear(yy_.data(), D, aa_.data(), M.down[size_t(e)], nullptr, n, precision_, batch_invariant_);
        } else if (c.skip_passthrough) { // the skip slot: identity under passthrough, else nothing
            std::copy_n(xg_.data(), n * D, yy_.data());
        } else {
            std::fill_n(yy_.data(), n * D, 0.0f);
        }
        for (int64_t r = 0; r < n; ++r) {
            const int64_t t = order_[size_t(r0 + r)];
            const float p = psel_[size_t(t)];
            for (int64_t i = 0; i < D; ++i) moe_[size_t(t * D + i)] = p * yy_[size_t(r * D + i)];
        }
    }
}

} // namespace zaya
