// CudaDecoder (cuda_decoder.h): Decoder::layer_forward's sequence of ops for one sequence, as device kernels (long
// prompts: cuda_decoder_prefill.cpp).
// Each layer's conv state and the new q‖k rows share one buffer zx = [state rows ; new rows], so the conv reads the
// state in place, the projections write straight into it, and one kernel moves the last rows up after the step.
#include "infer/cuda_decoder_impl.h"

#include "core/error.h"
#include "ops/cpu/cca.h"
#include "ops/cuda/block.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/decode.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/ops.h"
#include "ops/cuda/runtime.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <type_traits>
#include <utility>

namespace zaya {

using namespace cuda_decoding;

namespace {

DevMat upload_mat(const Mat &m) {
    DevMat d{DeviceArray<uint8_t>(m.bytes()), m.dtype, m.rows, m.cols};
    cuda::copy_to_device(d.buf.data(), m.data, m.bytes());
    return d;
}

// Matrices of the same input width and dtype stacked by rows into one: projections that read the same x become one
// kernel (q‖k, whose outputs are adjacent in the conv input; the current‖delayed values).
DevMat upload_rows(const std::vector<Mat> &ms) {
    DevMat d;
    size_t bytes = 0;
    for (const Mat &m : ms) {
        if (m.dtype != ms[0].dtype || m.cols != ms[0].cols) fail("stacked projections differ in dtype or width");
        bytes += m.bytes(), d.rows += m.rows;
    }
    d.buf = DeviceArray<uint8_t>(bytes), d.dtype = ms[0].dtype, d.cols = ms[0].cols;
    size_t at = 0;
    for (const Mat &m : ms) {
        cuda::copy_to_device(d.buf.data() + at, m.data, m.bytes());
        at += m.bytes();
    }
    return d;
}

DevMat upload_stacked(const std::vector<Mat> &ms) {
    const Mat &m0 = ms.at(0);
    DevMat d{DeviceArray<uint8_t>(m0.bytes() * ms.size()), m0.dtype, m0.rows * int64_t(ms.size()), m0.cols};
    for (size_t e = 0; e < ms.size(); ++e) {
        if (ms[e].dtype != m0.dtype || ms[e].rows != m0.rows || ms[e].cols != m0.cols)
            fail("expert {} has a different shape or dtype from expert 0", e);
        cuda::copy_to_device(d.buf.data() + e * m0.bytes(), ms[e].data, m0.bytes());
    }
    return d;
}

// y[N, W.rows] (row stride ldy) = act(x · Wᵀ + b), outputs from second.from on into second.y, then `after`.
// rows: rows computed (null: all; a decode step's stepped slots), the others zeros.
void linear(float *y, int64_t ldy, const float *x, const DevMat &W, const float *b, int64_t N, const int32_t *rows,
            const cuda::SecondOutput &second = {}, const cuda::ResidualNormAfter &after = {}) {
    const cuda::Epilogue none = cuda::Epilogue::None;
    if (W.dtype == DType::BF16)
        cuda::linear_rows_bf16(y, ldy, x, bf16_of(W), b, N, W.cols, W.rows, none, rows, second, after);
    else cuda::linear_rows_f32(y, ldy, x, f32_of(W), b, N, W.cols, W.rows, none, rows, second, after);
}

// The routed form over stacked experts: O = rows per expert.
void expert_linear(float *y, int64_t ldy, const float *x, const DevMat &W, const cuda::ExpertRows &r, int64_t N,
                   const cuda::ResidualNormAfter &after = {}) {
    const int64_t O = W.rows / r.E;
    if (W.dtype == DType::BF16) cuda::expert_linear_bf16(y, ldy, x, bf16_of(W), r, N, W.cols, O, after);
    else cuda::expert_linear_f32(y, ldy, x, f32_of(W), r, N, W.cols, O, after);
}

} // namespace

// The uploads, each counted in weight_bytes.
const float *CudaDecoder::Impl::up(const float *h, int64_t n) {
    if (!h) return nullptr;
    vectors.emplace_back(size_t(n));
    cuda::copy_to_device(vectors.back().data(), h, size_t(n) * sizeof(float));
    weight_bytes += size_t(n) * sizeof(float);
    return vectors.back().data();
}

DevMat CudaDecoder::Impl::mat(const Mat &m) {
    weight_bytes += m.bytes();
    return upload_mat(m);
}

DevMat CudaDecoder::Impl::mats(const std::vector<Mat> &ms) {
    for (const Mat &m : ms) weight_bytes += m.bytes();
    return upload_rows(ms);
}

const float *CudaDecoder::Impl::up_stacked(std::initializer_list<std::pair<const float *, int64_t>> parts) {
    std::vector<float> h;
    bool any = false;
    for (const auto &[p, n] : parts) {
        any = any || p;
        const size_t at = h.size();
        h.resize(at + size_t(n), 0.0f);
        if (p) std::copy(p, p + n, h.begin() + std::ptrdiff_t(at));
    }
    return any ? up(h.data(), int64_t(h.size())) : nullptr;
}

CudaDecoder::Impl::Impl(const DecodeWeights &w, const Options &opt) : c(w.config), o(opt) {
    // max_chunk, prefill_chunk and max_seqs rows go into grid dimensions y and z (at most 65535).
    if (o.max_len < 1 || o.max_chunk < 1 || o.max_chunk > 65535 || o.max_seqs < 1 || o.max_seqs > 65535 ||
        o.prefill_chunk < 0 || o.prefill_chunk > 65535 || o.attn_splits < 1 || o.attn_splits > cuda::kAttnMaxSplits)
        fail("cuda decoder: max_len ({}) must be ≥ 1, max_chunk ({}) and max_seqs ({}) in [1, 65535], prefill_chunk "
             "({}) in [0, 65535], attn_splits ({}) in [1, {}]",
             o.max_len, o.max_chunk, o.max_seqs, o.prefill_chunk, o.attn_splits, cuda::kAttnMaxSplits);
    kv = kv_dtype_for(o.kv_dtype, w.layers);
    D = c.hidden_size, C = c.conv_channels(), P = c.conv_padding(), Dq = c.q_dim(), Dk = c.kv_dim(), Dv = Dk / 2;
    nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim, R = c.router_hidden_size;
    K = c.router_classes(), E = c.num_experts, I = c.moe_intermediate_size, V = c.vocab_size;
    S = o.max_seqs, SR = P + o.max_chunk;
    const ModelWeights &s = w.small;
    embed = mat(w.embed);
    lm_head = w.lm_head.data == w.embed.data ? DevMat{} : mat(w.lm_head); // tied: the embedding's copy serves
    input_scale = up(s.input_scale, D), input_bias = up(s.input_bias, D), final_norm = up(s.final_norm, D);
    lm_head_bias = up(s.lm_head_bias, V);
    const int64_t L = c.num_hidden_layers;
    layers.resize(size_t(L));
    for (int64_t l = 0; l < L; ++l) {
        const LayerWeights &lw = s.layers[size_t(l)];
        const LayerMats &M = w.layers[size_t(l)];
        DevLayer &d = layers[size_t(l)];
        d.qkv = mats({M.q_proj, M.k_proj, M.v_cur, M.v_del});
        d.o_proj = mat(M.o_proj), d.router_down = mat(M.router_down), d.router_fc1 = mat(M.router_fc1);
        d.router_fc2 = mat(M.router_fc2), d.router_out = mat(M.router_out);
        d.gate_up = upload_stacked(M.gate_up), d.down = upload_stacked(M.down);
        weight_bytes += d.gate_up.buf.size() + d.down.buf.size();
        d.input_norm = up(lw.input_norm, D);
        d.qkv_bias = up_stacked({{lw.q_bias, Dq}, {lw.k_bias, Dk}, {lw.v_cur_bias, Dv}, {lw.v_del_bias, Dv}});
        d.conv_dw = up(lw.conv_dw, C * c.cca_time0), d.conv_dw_bias = up(lw.conv_dw_bias, C);
        d.conv_g = up(lw.conv_g, C * hd * c.cca_time1), d.conv_g_bias = up(lw.conv_g_bias, C);
        d.temp = up(lw.temp, nkv), d.o_bias = up(lw.o_bias, D), d.post_norm = up(lw.post_norm, D);
        for (int r = 0; r < 4; ++r) d.attn_res[r] = up(lw.attn_res[r], D), d.mlp_res[r] = up(lw.mlp_res[r], D);
        d.router_down_bias = up(lw.router_down_bias, R), d.router_state_scale = up(lw.router_state_scale, R);
        d.router_norm = up(lw.router_norm, R), d.router_fc1_bias = up(lw.router_fc1_bias, R);
        d.router_fc2_bias = up(lw.router_fc2_bias, R), d.balancing_biases = up(lw.balancing_biases, K);
        const size_t cache_bytes = size_t(S * o.max_len * Dk) * dtype_size(kv);
        d.kc = DeviceArray<uint8_t>(cache_bytes), d.vc = DeviceArray<uint8_t>(cache_bytes);
        d.zx = DeviceArray<float>(size_t(S * SR * C)), d.vstate = DeviceArray<float>(size_t(S * Dv));
        d.vstate0 =
            lw.v_del_bias ? std::vector<float>(lw.v_del_bias, lw.v_del_bias + Dv) : std::vector<float>(size_t(Dv));
    }
    // GEMM prefill passes need the experts' two matrices in one form: both fp32, or both bf16 with D and I
    // multiples of 8 (the grouped tensor-core GEMM's); otherwise every prefill pass is a GEMV one.
    bool gemm_ok = o.prefill_chunk > 0;
    for (const DevLayer &d : layers)
        gemm_ok = gemm_ok && d.gate_up.dtype == d.down.dtype &&
                  (d.gate_up.dtype != DType::BF16 || cuda::experts_on_tensor_cores(cuda::MoeShape{D, I, E, false}));
    NP = gemm_ok ? o.prefill_chunk : 0, N0 = std::max(o.max_chunk, S);
    // Rows of x; conv rows (every slot's region, or a GEMM pass's [state ; new rows] of up to S slots).
    const int64_t N = std::max(N0, NP), ext = std::max(S * SR, NP > 0 ? S * P + NP : 0);
    auto f = [](int64_t n) { return DeviceArray<float>(size_t(std::max<int64_t>(n, 1))); };
    x = f(N * D), xn = f(N * D), tmp = f(N * D), moe = f(N * D), rstd = f(N), psel = f(N);
    convx = f(ext * C);
    pbuf = f(cpu::cca_conv_p_rows(ext, S, cuda::ConvShape{C, 1, c.cca_time0, c.cca_time1}) * C);
    // q, k and their norms for the conv's rows [state ; new] (the fused chain computes them all).
    q = f(ext * Dq), k = f(ext * Dk), qn = f(ext * nq), kn = f(ext * nkv), att = f(N * Dq), v = f(N * Dk);
    for (auto *b : {&rho[0], &rho[1], &h1}) *b = f(N * R);
    probs = f(N * K), hh = f(N * 2 * I), logits = f(S * V);
    // Attention's partial results: splits × rows ≤ attn_splits × N0 (a GEMM pass takes fewer splits: layer_gemm).
    const int64_t part_rows = std::max(o.attn_splits * N0, NP);
    part_o = f(part_rows * nq * hd), part_ml = f(part_rows * nq * 2);
    if (NP > 0) {
        rows16 = DeviceArray<uint16_t>(size_t(NP * std::max(D, Dq)));
        zx_pass = f((S * P + NP) * C), xg = f(NP * D), ey = f(NP * D), ea = f(NP * I);
        if (S > 1) qk_rows = f(NP * C);
        order = DeviceArray<int32_t>(size_t(NP)), offsets = DeviceArray<int64_t>(size_t(E + 2));
    }
    counters = DeviceArray<unsigned>(size_t(N * (nq + 1))); // attention's, the most of any: n·nq (+ n appending)
    cuda::fill_bytes(counters.data(), 0, counters.size() * sizeof(unsigned));
    tokens = DeviceArray<int32_t>(size_t(N)), pos = DeviceArray<int32_t>(size_t(ext));
    choice = DeviceArray<int32_t>(size_t(N)), len = DeviceArray<int32_t>(size_t(S));
    active = DeviceArray<int32_t>(size_t(S));
    seq_one = DeviceArray<int64_t>(size_t(S + 1)), seq_new = DeviceArray<int64_t>(size_t(2 * S));
    seq_slots = DeviceArray<int64_t>(size_t(S + 1));
    std::vector<int64_t> starts(size_t(S + 1));
    for (int64_t i = 0; i <= S; ++i) starts[size_t(i)] = i * SR;
    cuda::copy_to_device(seq_slots.data(), starts.data(), starts.size() * sizeof(int64_t));
    best = DeviceArray<int32_t>(size_t(S)), best_part_i = DeviceArray<int32_t>(size_t(S * cuda::kArgmaxPartials));
    best_part_v = f(S * cuda::kArgmaxPartials);
    lengths.assign(size_t(S), 0);
    for (int t = 0; t < 2; ++t) {
        const RopeParams &rp = t == 0 ? c.rope_hybrid : c.rope_sliding;
        const int64_t rot = int64_t(double(hd) * rp.partial_rotary_factor);
        rot_half[t] = rot / 2;
        cos_t[t] = f(ext * rot_half[t]), sin_t[t] = f(ext * rot_half[t]); // rows [state ; new], as q and k
        const std::vector<float> inv = cpu::rope_inv_freq(rot, rp.rope_theta);
        inv_freq[t] = f(int64_t(inv.size()));
        if (!inv.empty()) cuda::copy_to_device(inv_freq[t].data(), inv.data(), inv.size() * sizeof(float));
    }
}

void CudaDecoder::Impl::layer(int64_t l, const Pass &p) {
    DevLayer &d = layers[size_t(l)];
    const float eps = float(c.rms_norm_eps);
    const bool every = p.every();
    const int64_t n = p.rows, slot = every ? 0 : p.slot;
    const int32_t *stepped = every ? active.data() : nullptr; // rows computed (a step: the slots stepped)
    // xn = the input norm of x: computed here for the first layer; the previous layer's last kernel left it.
    if (l == 0) cuda::rmsnorm_forward(xn.data(), rstd.data(), x.data(), d.input_norm, n, D, eps);
    // zx = [conv state ; q‖k of the new rows] per slot: the conv's outputs for the new rows reach back P rows, all
    // inside the state, so they equal the full-sequence conv. The conv, the q-k mean, QK-norm and RoPE run as one
    // kernel over the P + n rows (or every slot's whole region: rows past a slot's new one are never read by it,
    // as the conv is causal; the state rows' results are not used); then the last P rows move up to become the
    // state. A step's new row of slot s is row s·SR + P.
    // One kernel projects q‖k into zx and both value halves into v (the delayed half in v's second half, which the
    // append shifts down a row through the state: the current half from this token, the delayed one from the
    // previous token's projection).
    float *zx = d.zx.data() + slot * SR * C;
    linear(zx + P * C, every ? SR * C : C, xn.data(), d.qkv, d.qkv_bias, n, stepped,
           cuda::SecondOutput{Dq + Dk, v.data(), Dk});
    const bool sliding = c.layer_types[size_t(l)] == LayerType::HybridSliding;
    const int t = sliding ? 1 : 0;
    const cuda::VarlenBatch batch =
        every ? cuda::VarlenBatch{seq_slots.data(), S, S * SR, SR} : cuda::VarlenBatch{seq_one.data(), 1, P + n, P + n};
    cuda::cca_conv_qk_forward(convx.data(), pbuf.data(), q.data(), k.data(), qn.data(), kn.data(), zx, batch,
                              cuda::ConvShape{C, nq + nkv, c.cca_time0, c.cca_time1}, d.conv_dw, d.conv_dw_bias,
                              d.conv_g, d.conv_g_bias, d.temp, cos_t[t].data(), sin_t[t].data(), nq, nkv,
                              c.rotary_dim(l));
    if (!every) cuda::shift_rows_up(zx, P, n, C); // (a step's move is done with its KV append, in attention below)
    const float *q_new = q.data() + P * Dq, *k_new = k.data() + P * Dk;
    const cuda::AttnShape as{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), sliding ? *c.sliding_window : 0};
    with_kv(d, slot, [&](auto *kc, auto *vc) {
        if (every) { // the KV append (with the conv state's move) inside the attention kernel
            using T = std::remove_pointer_t<decltype(kc)>;
            cuda::attention_decode_slots(att.data(), part_o.data(), part_ml.data(), q_new, SR * Dq, len.data(),
                                         active.data(), S, o.max_len, as, o.attn_splits, counters.data(),
                                         cuda::KvAppendT<T>{kc, vc, k_new, SR * Dk, v.data(), d.vstate.data(), Dv,
                                                            cuda::ConvStateMove{d.zx.data(), P, C, SR}});
        } else {
            cuda::append_kv(kc, vc, k_new, v.data(), len.data() + slot, n, Dk, d.vstate.data() + slot * Dv, Dv);
            cuda::attention_decode(att.data(), part_o.data(), part_ml.data(), q_new, kc, vc, len.data() + slot, n,
                                   as, o.attn_splits, counters.data());
        }
    });
    // The output projection; its last block to finish then does the residual scaling and the post-attention norm
    // (in place on x: each element is read, then written, by one thread).
    linear(tmp.data(), D, att.data(), d.o_proj, d.o_bias, n, stepped, {},
           cuda::ResidualNormAfter{x.data(), xn.data(), rstd.data(), d.attn_res[0], d.attn_res[1], d.attn_res[2],
                                   d.attn_res[3], d.post_norm, eps, counters.data()});

    // Router (spec A.4): the down projection, then in its last block the EDA state (mixing in the previous layer's,
    // same token), its norm, the MLP and the top-1 choice; a slot not stepped takes the skip slot (no expert is
    // read). Matrices of different dtypes (a checkpoint may keep the router's small ones in fp32) take two kernels.
    with_router(l, stepped, [&](const auto &a) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(a.fc1)>>;
        const bool fused = d.router_down.dtype == d.router_fc1.dtype && d.router_fc2.dtype == d.router_fc1.dtype &&
                           d.router_out.dtype == d.router_fc1.dtype;
        if (fused) {
            cuda::router_down_decode(h1.data(), xn.data(), reinterpret_cast<const T *>(d.router_down.buf.data()),
                                     d.router_down_bias, n, D, stepped, a, counters.data());
        } else {
            linear(h1.data(), R, xn.data(), d.router_down, d.router_down_bias, n, stepped);
            cuda::router_decode(a, n);
        }
    });
    // Experts (A.5), the choice read on the device: the skip slot gives zeros (then silu(0)·0 = 0) and, under
    // passthrough, the expert input itself at the end; every row is scaled by its chosen probability.
    // The SwiGLU between the two is computed as the down projection stages its input.
    cuda::ExpertRows gate{choice.data(), nullptr, nullptr, 0, E};
    expert_linear(hh.data(), 2 * I, xn.data(), d.gate_up, gate, n);
    // Then, by the last block of each row, the residual scaling with the next norm: the next layer's input norm, or
    // after the last layer the final norm (xn is then what the LM head reads). Every other block of the row has
    // read xn (the skip passthrough) by then.
    const float *next_norm = l + 1 < c.num_hidden_layers ? layers[size_t(l + 1)].input_norm : final_norm;
    cuda::ExpertRows down{choice.data(), psel.data(), c.skip_passthrough ? xn.data() : nullptr, D, E, true};
    expert_linear(moe.data(), D, hh.data(), d.down, down, n,
                  cuda::ResidualNormAfter{x.data(), xn.data(), rstd.data(), d.mlp_res[0], d.mlp_res[1], d.mlp_res[2],
                                          d.mlp_res[3], next_norm, eps, counters.data()});
}

void CudaDecoder::Impl::check_slot(int64_t slot) const {
    if (slot < 0 || slot >= S) fail("cuda decoder: slot {} outside [0, {})", slot, S);
}

void CudaDecoder::Impl::check_room(int64_t slot, int64_t n) const {
    const int64_t total = lengths[size_t(slot)] + n;
    if (total > o.max_len)
        fail("cuda decoder: a sequence of {} tokens exceeds the device cache's max length {}", total, o.max_len);
    if (total > c.max_position_embeddings)
        fail("sequence of {} tokens would exceed max_position_embeddings ({})", total, c.max_position_embeddings);
}

// Kernels only (no copy, no allocation, nothing read on the host): what a decode step's graph holds.
void CudaDecoder::Impl::device_pass(const Pass &p) {
    // Positions of the conv's rows: the P state rows before the new ones (negative at the start: those rows'
    // results are never used); for a step, every slot's whole region.
    const int64_t conv_rows = p.every() ? S * SR : int64_t(segments.size()) * P + p.rows;
    if (p.every()) cuda::decode_positions(pos.data(), len.data(), SR, -P, S);
    else
        for (const Segment &s : segments)
            cuda::decode_positions(pos.data() + s.conv, len.data() + s.slot, P + s.rows, -P);
    for (int t = 0; t < 2; ++t)
        if (rot_half[t] > 0)
            cuda::rope_tables(cos_t[t].data(), sin_t[t].data(), pos.data(), inv_freq[t].data(), conv_rows,
                              rot_half[t]);
    if (embed.dtype == DType::BF16)
        cuda::embed_rows_bf16(x.data(), tokens.data(), bf16_of(embed), input_bias, input_scale, p.rows, D);
    else
        cuda::embed_rows_f32(x.data(), tokens.data(), f32_of(embed), input_bias, input_scale, p.rows, D);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (p.gemm) layer_gemm(l, p);
        else layer(l, p);
    }
    if (p.every()) cuda::advance_length(len.data(), 1, S, active.data());
    else
        for (const Segment &s : segments) cuda::advance_length(len.data() + s.slot, s.rows);
}

// The LM head on the last new row of a prefill pass, or on every slot's row of a step (xn: the last layer normed
// them with the final norm); the argmax reads 4·V bytes a row, noise next to the head's V·D weights.
void CudaDecoder::Impl::head(const float *in, int64_t rows, const int32_t *on) {
    linear(logits.data(), V, in, lm_head.buf.data() ? lm_head : embed, lm_head_bias, rows, on);
    cuda::argmax(best.data(), best_part_v.data(), best_part_i.data(), logits.data(), V, rows, counters.data());
}

// Rows of a scored prompt go through the LM head this many at a time, each block downloaded: its buffer stays small
// (ZAYA1's 262144-token vocabulary: 64 MiB) where a whole GEMM pass's rows would take 2 GiB.
constexpr int64_t kScoredRows = 64;

void CudaDecoder::Impl::head_rows(int64_t n, float *out) {
    if (scored.size() == 0) scored = DeviceArray<float>(size_t(kScoredRows * V));
    for (int64_t r = 0; r < n; r += kScoredRows) {
        const int64_t b = std::min(kScoredRows, n - r);
        linear(scored.data(), V, xn.data() + r * D, lm_head.buf.data() ? lm_head : embed, lm_head_bias, b, nullptr);
        cuda::copy_to_host(out + r * V, scored.data(), size_t(b * V) * sizeof(float));
    }
}

void CudaDecoder::Impl::reset(int64_t slot) {
    check_slot(slot);
    for (DevLayer &d : layers) {
        cuda::fill_bytes(d.zx.data() + slot * SR * C, 0, size_t(P * C) * sizeof(float)); // the conv state
        cuda::copy_to_device(d.vstate.data() + slot * Dv, d.vstate0.data(), d.vstate0.size() * sizeof(float));
    }
    cuda::fill_bytes(len.data() + slot, 0, sizeof(int32_t));
    lengths[size_t(slot)] = 0;
}

void CudaDecoder::Impl::check_tokens(int64_t slot, std::span<const int32_t> toks) const {
    check_slot(slot);
    if (toks.empty()) fail("prefill needs at least one token");
    check_room(slot, int64_t(toks.size()));
    for (int32_t t : toks)
        if (t < 0 || t >= V) fail("token id {} is outside the vocabulary [0, {})", t, V);
}

void CudaDecoder::Impl::describe() {
    std::vector<int64_t> d; // the conv's sequence starts, then each segment's new rows {0, rows}
    for (const Segment &s : segments) d.push_back(s.conv);
    d.push_back(segments.back().conv + P + segments.back().rows);
    for (const Segment &s : segments) d.insert(d.end(), {0, s.rows});
    if (d == described) return;
    const size_t starts = segments.size() + 1;
    cuda::copy_to_device(seq_one.data(), d.data(), starts * sizeof(int64_t));
    cuda::copy_to_device(seq_new.data(), d.data() + starts, (d.size() - starts) * sizeof(int64_t));
    described = std::move(d);
}

// The head's rows (from head()) downloaded: the pass's one synchronisation. The logits into out[rows, V], or with
// out null only their argmax (4 bytes a row) into greedy[rows].
void CudaDecoder::Impl::fetch_head(int64_t rows, float *out, int32_t *greedy) {
    if (out) return cuda::copy_to_host(out, logits.data(), size_t(rows * V) * sizeof(float));
    cuda::copy_to_host(greedy, best.data(), size_t(rows) * sizeof(int32_t));
}

int32_t CudaDecoder::Impl::prefill(int64_t slot, std::span<const int32_t> toks, float *out, float *every) {
    check_tokens(slot, toks);
    int64_t n = 0;
    for (size_t at = 0; at < toks.size(); at += size_t(n)) {
        const int64_t left = int64_t(toks.size() - at);
        const bool gemm = NP > 0 && left > o.max_chunk; // many rows: GEMMs, each weight read once for all of them
        n = std::min(left, gemm ? NP : o.max_chunk);
        cuda::copy_to_device(tokens.data(), toks.data() + at, size_t(n) * sizeof(int32_t));
        segments.assign(1, Segment{slot, n, 0, 0});
        describe();
        device_pass(Pass{n, slot, gemm});
        ++passes, lengths[size_t(slot)] += n;
        if (every) head_rows(n, every + at * size_t(V));
    }
    if (every) return -1; // the last row's logits are every's last row
    head(xn.data() + (n - 1) * D, 1, nullptr);
    int32_t t = -1;
    fetch_head(1, out, &t);
    return t;
}

void CudaDecoder::Impl::prefill_one_pass(std::span<const int64_t> slots,
                                         std::span<const std::span<const int32_t>> chunks, float *out,
                                         int32_t *greedy) {
    segments.clear();
    std::vector<int32_t> toks;
    int64_t at = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
        const int64_t rows = int64_t(chunks[i].size());
        segments.push_back(Segment{slots[i], rows, at, at + int64_t(i) * P});
        toks.insert(toks.end(), chunks[i].begin(), chunks[i].end());
        at += rows;
    }
    cuda::copy_to_device(tokens.data(), toks.data(), toks.size() * sizeof(int32_t));
    describe();
    device_pass(Pass{at, slots[0], true});
    ++passes;
    // Each segment's last row through the LM head: gathered into tmp (free after the last layer), one head for all.
    for (size_t j = 0; j < segments.size(); ++j) {
        const Segment &s = segments[j];
        lengths[size_t(s.slot)] += s.rows;
        cuda::copy_on_device(tmp.data() + int64_t(j) * D, xn.data() + (s.at + s.rows - 1) * D,
                             size_t(D) * sizeof(float));
    }
    head(tmp.data(), int64_t(segments.size()), nullptr);
    fetch_head(int64_t(segments.size()), out, greedy);
}

void CudaDecoder::Impl::step(std::span<const int32_t> toks, float *out, int32_t *greedy) {
    if (int64_t(toks.size()) != S) fail("cuda decoder: a step takes a token (or −1) for each of {} slots", S);
    std::vector<int32_t> feed(static_cast<size_t>(S)), on(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) {
        const int32_t t = toks[size_t(s)];
        if (t < 0) continue; // this slot is not stepped
        if (t >= V) fail("token id {} is outside the vocabulary [0, {})", t, V);
        if (lengths[size_t(s)] == 0) fail("cuda decoder: slot {} holds no sequence to step (prefill it first)", s);
        check_room(s, 1);
        feed[size_t(s)] = t, on[size_t(s)] = 1;
    }
    cuda::copy_to_device(tokens.data(), feed.data(), feed.size() * sizeof(int32_t));
    cuda::copy_to_device(active.data(), on.data(), on.size() * sizeof(int32_t));
    // One eager step first (modules loaded, every kernel launched once), then the step as one graph launch: 7
    // kernels per layer would otherwise cost more in launch overhead than a small step reads from memory.
    const Pass every{S, kEverySlot};
    if (o.graph && eager_steps > 0) {
        if (!step_graph) step_graph.emplace();
        if (!step_graph->ready()) {
            const cuda::DependentLaunchScope launches(pdl);
            step_graph->capture([&] {
                device_pass(every);
                head(xn.data(), S, active.data());
            });
        }
        step_graph->launch();
    } else {
        device_pass(every);
        head(xn.data(), S, active.data());
        ++eager_steps;
    }
    ++passes;
    for (int64_t s = 0; s < S; ++s) lengths[size_t(s)] += on[size_t(s)];
    // The step's synchronisation: the stepped rows' logits, or with none asked for only their argmax.
    if (out) {
        for (int64_t s = 0; s < S; ++s)
            if (on[size_t(s)])
                cuda::copy_to_host(out + s * V, logits.data() + s * V, size_t(V) * sizeof(float));
    } else {
        std::vector<int32_t> b(static_cast<size_t>(S));
        cuda::copy_to_host(b.data(), best.data(), b.size() * sizeof(int32_t));
        for (int64_t s = 0; s < S; ++s)
            if (on[size_t(s)]) greedy[s] = b[size_t(s)];
    }
}

static DecodeWeights weights_of(const InferModel &m) {
    if (m.weight_dtype == DType::I8)
        fail("int8 weights (--quantize int8) run on the CPU only; the GPU decodes bf16 or f32 weights");
    return DecodeWeights{m.config, m.small, m.embed, m.lm_head, m.layers};
}

CudaDecoder::CudaDecoder(const InferModel &m, const Options &o) : CudaDecoder(weights_of(m), o) {}

CudaDecoder::CudaDecoder(const DecodeWeights &w, const Options &o) {
    std::string why;
    if (!cuda::device_available(&why)) fail("--device cuda: {}", why);
    impl_ = std::make_unique<Impl>(w, o);
    reset();
}

CudaDecoder::~CudaDecoder() = default;

void CudaDecoder::reset() {
    for (int64_t s = 0; s < impl_->S; ++s) impl_->reset(s);
}
void CudaDecoder::reset(int64_t slot) { impl_->reset(slot); }

void CudaDecoder::prefill(std::span<const int32_t> tokens, float *logits) { prefill(0, tokens, logits); }
int32_t CudaDecoder::prefill_greedy(std::span<const int32_t> tokens) { return prefill_greedy(0, tokens); }
void CudaDecoder::prefill(int64_t slot, std::span<const int32_t> tokens, float *logits) {
    if (!logits) fail("CudaDecoder::prefill: no logits buffer (prefill_greedy gives the argmax alone)");
    impl_->prefill(slot, tokens, logits);
}
int32_t CudaDecoder::prefill_greedy(int64_t slot, std::span<const int32_t> tokens) {
    return impl_->prefill(slot, tokens, nullptr);
}
void CudaDecoder::prefill_rows(int64_t slot, std::span<const int32_t> tokens, float *rows) {
    if (!rows) fail("CudaDecoder::prefill_rows: no rows buffer");
    impl_->prefill(slot, tokens, nullptr, rows);
}
void CudaDecoder::prefill(std::span<const int64_t> slots, std::span<const std::span<const int32_t>> chunks,
                          float *logits, int32_t *greedy) {
    Impl &m = *impl_;
    if (slots.size() != chunks.size())
        fail("CudaDecoder::prefill: {} slots for {} chunks", slots.size(), chunks.size());
    if (!logits && !greedy) fail("CudaDecoder::prefill: neither a logits nor a greedy buffer");
    int64_t total = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
        m.check_tokens(slots[i], chunks[i]);
        if (std::find(slots.begin(), slots.begin() + std::ptrdiff_t(i), slots[i]) != slots.begin() + std::ptrdiff_t(i))
            fail("cuda decoder: slot {} is given two chunks in one prefill", slots[i]);
        total += int64_t(chunks[i].size());
    }
    if (slots.size() > 1 && total <= m.NP) return m.prefill_one_pass(slots, chunks, logits, greedy);
    for (size_t i = 0; i < slots.size(); ++i) {
        if (logits) m.prefill(slots[i], chunks[i], logits + i * size_t(m.V));
        else greedy[i] = m.prefill(slots[i], chunks[i], nullptr);
    }
}

// Slot 0 alone; the other slots (if any) are left as they are.
static std::vector<int32_t> slot0_only(int64_t slots, int32_t token) {
    std::vector<int32_t> t(size_t(slots), -1);
    t[0] = token;
    return t;
}
void CudaDecoder::step(int32_t token, float *logits) {
    if (!logits) fail("CudaDecoder::step: no logits buffer (step_greedy gives the argmax alone)");
    const Impl &m = *impl_;
    if (m.S == 1) return impl_->step(std::vector<int32_t>{token}, logits, nullptr);
    std::vector<float> rows(size_t(m.S * m.V));
    impl_->step(slot0_only(m.S, token), rows.data(), nullptr);
    std::copy(rows.begin(), rows.begin() + m.V, logits);
}
int32_t CudaDecoder::step_greedy(int32_t token) {
    std::vector<int32_t> best(size_t(impl_->S), -1);
    impl_->step(slot0_only(impl_->S, token), nullptr, best.data());
    return best[0];
}
void CudaDecoder::step(std::span<const int32_t> tokens, float *logits, int32_t *greedy) {
    if (!logits && !greedy) fail("CudaDecoder::step: neither a logits nor a greedy buffer");
    impl_->step(tokens, logits, logits ? nullptr : greedy);
}

int64_t CudaDecoder::length() const { return impl_->lengths[0]; }
int64_t CudaDecoder::length(int64_t slot) const {
    impl_->check_slot(slot);
    return impl_->lengths[size_t(slot)];
}
int64_t CudaDecoder::max_seqs() const { return impl_->S; }
int64_t CudaDecoder::passes() const { return impl_->passes; }
size_t CudaDecoder::weight_bytes() const { return impl_->weight_bytes; }
DType CudaDecoder::kv_dtype() const { return impl_->kv; }
size_t CudaDecoder::step_kernels() const { return impl_->step_graph ? impl_->step_graph->nodes() : 0; }
void CudaDecoder::set_dependent_launch(bool on) {
    if (on != impl_->pdl) impl_->step_graph.reset();
    impl_->pdl = on;
}
bool CudaDecoder::dependent_launch() const {
    const cuda::DependentLaunchScope launches(impl_->pdl);
    return cuda::dependent_launch_enabled();
}

double CudaDecoder::measure_read_bandwidth(size_t bytes, int reps) {
    std::string why;
    if (!cuda::device_available(&why)) fail("--device cuda: {}", why);
    bytes = bytes / 16 * 16;
    DeviceArray<uint8_t> buf(bytes);
    cuda::fill_bytes(buf.data(), 1, bytes);
    double best = 1e30;
    for (int r = 0; r < std::max(reps, 1); ++r)
        best = std::min(best, cuda::time_device_read(buf.data(), int64_t(bytes)));
    return double(bytes) / best;
}

std::string CudaDecoder::device_description() { return cuda::device_description(); }

} // namespace zaya
