// CudaDecoder (cuda_decoder.h): Decoder::layer_forward's sequence of ops for one sequence, as device kernels.
// Each layer's conv state and the new q‖k rows share one buffer zx = [state rows ; new rows], so the conv reads the
// state in place, the projections write straight into it, and one kernel moves the last rows up after the step.
#include "infer/cuda_decoder.h"

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

namespace zaya {

namespace {

using cuda::DeviceArray;

// A matrix on the device, in its dtype ([rows, cols]; experts stacked as [E·rows, cols]).
struct DevMat {
    DeviceArray<uint8_t> buf;
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0;
};

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

const uint16_t *bf16_of(const DevMat &W) { return reinterpret_cast<const uint16_t *>(W.buf.data()); }
const float *f32_of(const DevMat &W) { return reinterpret_cast<const float *>(W.buf.data()); }

// y[N, W.rows] (row stride ldy) = act(x · Wᵀ + b).
void linear(float *y, int64_t ldy, const float *x, const DevMat &W, const float *b, int64_t N,
            cuda::Epilogue act = cuda::Epilogue::None) {
    if (W.dtype == DType::BF16) cuda::linear_rows_bf16(y, ldy, x, bf16_of(W), b, N, W.cols, W.rows, act);
    else cuda::linear_rows_f32(y, ldy, x, f32_of(W), b, N, W.cols, W.rows, act);
}

// The routed form over stacked experts: O = rows per expert.
void expert_linear(float *y, int64_t ldy, const float *x, const DevMat &W, const cuda::ExpertRows &r, int64_t N) {
    const int64_t O = W.rows / r.E;
    if (W.dtype == DType::BF16) cuda::expert_linear_bf16(y, ldy, x, bf16_of(W), r, N, W.cols, O);
    else cuda::expert_linear_f32(y, ldy, x, f32_of(W), r, N, W.cols, O);
}

struct DevLayer {
    DevMat qk, vv, o_proj, router_down, router_fc1, router_fc2, router_out, gate_up, down; // qk = q‖k, vv = cur‖del
    const float *input_norm, *qk_bias, *vv_bias, *conv_dw, *conv_dw_bias, *conv_g, *conv_g_bias, *temp, *o_bias,
        *attn_res[4], *post_norm, *router_down_bias, *router_state_scale, *router_norm, *router_fc1_bias,
        *router_fc2_bias, *balancing_biases, *mlp_res[4];
    DeviceArray<float> kc, vc;  // [max_len, Dk]
    DeviceArray<float> zx;      // [P + max_chunk, C]: the conv state (first P rows), then the new rows' q‖k
    DeviceArray<float> vstate;  // [Dv]: the delayed-value state
    std::vector<float> vstate0; // its value for a fresh sequence (the delayed projection's bias, or zeros)
};

} // namespace

struct CudaDecoder::Impl {
    ZayaConfig c;
    Options o;
    int64_t D, C, P, Dq, Dk, Dv, nq, nkv, hd, R, K, E, I, V;
    std::vector<DeviceArray<float>> vectors; // every small fp32 vector
    DevMat embed, lm_head;
    const float *input_scale, *input_bias, *final_norm, *lm_head_bias;
    std::vector<DevLayer> layers;
    int64_t length = 0, seq_n = -1;
    size_t weight_bytes = 0;

    DeviceArray<float> x, xn, rstd, convx, pbuf, q, k, v, qn, kn, att, tmp, rho[2], h1;
    DeviceArray<float> probs, psel, hh, moe, logits, part_o, part_ml, cos_t[2], sin_t[2], inv_freq[2];
    DeviceArray<int32_t> tokens, pos, choice, len, best, best_part_i; // best: the argmax of logits
    DeviceArray<float> best_part_v;
    DeviceArray<int64_t> seq_start;
    int64_t rot_half[2] = {0, 0};

    const float *up(const float *h, int64_t n) {
        if (!h) return nullptr;
        vectors.emplace_back(size_t(n));
        cuda::copy_to_device(vectors.back().data(), h, size_t(n) * sizeof(float));
        weight_bytes += size_t(n) * sizeof(float);
        return vectors.back().data();
    }
    DevMat mat(const Mat &m) {
        weight_bytes += m.bytes();
        return upload_mat(m);
    }
    DevMat mats(const std::vector<Mat> &ms) {
        for (const Mat &m : ms) weight_bytes += m.bytes();
        return upload_rows(ms);
    }
    // Two bias vectors back to back (null if both are; a missing one is zeros).
    const float *up2(const float *a, int64_t na, const float *b, int64_t nb) {
        if (!a && !b) return nullptr;
        std::vector<float> h(size_t(na + nb), 0.0f);
        if (a) std::copy(a, a + na, h.begin());
        if (b) std::copy(b, b + nb, h.begin() + na);
        return up(h.data(), na + nb);
    }

    cuda::Graph step_graph; // a decode step (n = 1): device_pass + head, captured after one eager step
    int64_t eager_steps = 0;

    Impl(const DecodeWeights &w, const Options &opt);
    void prepare(const int32_t *toks, int64_t n); // checks, then the tokens to the device
    void device_pass(int64_t n);
    void layer(int64_t l, int64_t n);
    void head(int64_t n);
    // The step's one synchronisation: the logits, or with none asked for only their argmax (4 bytes).
    int32_t download(float *out) {
        if (out) {
            cuda::copy_to_host(out, logits.data(), size_t(V) * sizeof(float));
            return -1;
        }
        int32_t t = 0;
        cuda::copy_to_host(&t, best.data(), sizeof t);
        return t;
    }
    int32_t prefill(std::span<const int32_t> tokens, float *logits);
    int32_t step(int32_t token, float *logits);
};

CudaDecoder::Impl::Impl(const DecodeWeights &w, const Options &opt) : c(w.config), o(opt) {
    // max_chunk rows go into grid dimensions y and z (at most 65535).
    if (o.max_len < 1 || o.max_chunk < 1 || o.max_chunk > 65535 || o.attn_splits < 1 ||
        o.attn_splits > cuda::kAttnMaxSplits)
        fail("cuda decoder: max_len ({}) must be ≥ 1, max_chunk ({}) in [1, 65535], attn_splits ({}) in [1, {}]",
             o.max_len, o.max_chunk, o.attn_splits, cuda::kAttnMaxSplits);
    D = c.hidden_size, C = c.conv_channels(), P = c.conv_padding(), Dq = c.q_dim(), Dk = c.kv_dim(), Dv = Dk / 2;
    nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim, R = c.router_hidden_size;
    K = c.router_classes(), E = c.num_experts, I = c.moe_intermediate_size, V = c.vocab_size;
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
        d.qk = mats({M.q_proj, M.k_proj}), d.vv = mats({M.v_cur, M.v_del});
        d.o_proj = mat(M.o_proj), d.router_down = mat(M.router_down), d.router_fc1 = mat(M.router_fc1);
        d.router_fc2 = mat(M.router_fc2), d.router_out = mat(M.router_out);
        d.gate_up = upload_stacked(M.gate_up), d.down = upload_stacked(M.down);
        weight_bytes += d.gate_up.buf.size() + d.down.buf.size();
        d.input_norm = up(lw.input_norm, D), d.qk_bias = up2(lw.q_bias, Dq, lw.k_bias, Dk);
        d.vv_bias = up2(lw.v_cur_bias, Dv, lw.v_del_bias, Dv);
        d.conv_dw = up(lw.conv_dw, C * c.cca_time0), d.conv_dw_bias = up(lw.conv_dw_bias, C);
        d.conv_g = up(lw.conv_g, C * hd * c.cca_time1), d.conv_g_bias = up(lw.conv_g_bias, C);
        d.temp = up(lw.temp, nkv), d.o_bias = up(lw.o_bias, D), d.post_norm = up(lw.post_norm, D);
        for (int r = 0; r < 4; ++r) d.attn_res[r] = up(lw.attn_res[r], D), d.mlp_res[r] = up(lw.mlp_res[r], D);
        d.router_down_bias = up(lw.router_down_bias, R), d.router_state_scale = up(lw.router_state_scale, R);
        d.router_norm = up(lw.router_norm, R), d.router_fc1_bias = up(lw.router_fc1_bias, R);
        d.router_fc2_bias = up(lw.router_fc2_bias, R), d.balancing_biases = up(lw.balancing_biases, K);
        d.kc = DeviceArray<float>(size_t(o.max_len * Dk)), d.vc = DeviceArray<float>(size_t(o.max_len * Dk));
        d.zx = DeviceArray<float>(size_t((P + o.max_chunk) * C)), d.vstate = DeviceArray<float>(size_t(Dv));
        d.vstate0 =
            lw.v_del_bias ? std::vector<float>(lw.v_del_bias, lw.v_del_bias + Dv) : std::vector<float>(size_t(Dv));
    }
    const int64_t N = o.max_chunk, ext = P + N;
    auto f = [](int64_t n) { return DeviceArray<float>(size_t(std::max<int64_t>(n, 1))); };
    x = f(N * D), xn = f(N * D), tmp = f(N * D), moe = f(N * D), rstd = f(N), psel = f(N);
    convx = f(ext * C);
    pbuf = f(cpu::cca_conv_p_rows(ext, 1, cuda::ConvShape{C, 1, c.cca_time0, c.cca_time1}) * C);
    // q, k and their norms for the conv's rows [state ; new] (the fused chain computes them all).
    q = f(ext * Dq), k = f(ext * Dk), qn = f(ext * nq), kn = f(ext * nkv), att = f(N * Dq), v = f(N * Dk);
    for (auto *b : {&rho[0], &rho[1], &h1}) *b = f(N * R);
    probs = f(N * K), hh = f(N * 2 * I), logits = f(V);
    part_o = f(o.attn_splits * N * nq * hd), part_ml = f(o.attn_splits * N * nq * 2);
    tokens = DeviceArray<int32_t>(size_t(N)), pos = DeviceArray<int32_t>(size_t(ext));
    choice = DeviceArray<int32_t>(size_t(N)), len = DeviceArray<int32_t>(1), seq_start = DeviceArray<int64_t>(2);
    best = DeviceArray<int32_t>(1), best_part_i = DeviceArray<int32_t>(size_t(cuda::kArgmaxPartials));
    best_part_v = f(cuda::kArgmaxPartials);
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

void CudaDecoder::Impl::layer(int64_t l, int64_t n) {
    DevLayer &d = layers[size_t(l)];
    const float eps = float(c.rms_norm_eps);
    // xn = the input norm of x: computed here for the first layer; the previous layer's last kernel left it.
    if (l == 0) cuda::rmsnorm_forward(xn.data(), rstd.data(), x.data(), d.input_norm, n, D, eps);
    // zx = [conv state ; q‖k of the new rows]: the conv's outputs for the new rows reach back P rows, all inside
    // the state, so they equal the full-sequence conv. The conv, the q-k mean, QK-norm and RoPE run as one kernel
    // over all P + n rows (the state rows' results are not used; P, the conv's reach, is small); then the last P
    // rows of zx move up to become the state.
    float *z = d.zx.data() + P * C;
    linear(z, C, xn.data(), d.qk, d.qk_bias, n);
    const bool sliding = c.layer_types[size_t(l)] == LayerType::HybridSliding;
    const int t = sliding ? 1 : 0;
    const cuda::VarlenBatch one{seq_start.data(), 1, P + n, P + n};
    cuda::cca_conv_qk_forward(convx.data(), pbuf.data(), q.data(), k.data(), qn.data(), kn.data(), d.zx.data(), one,
                              cuda::ConvShape{C, nq + nkv, c.cca_time0, c.cca_time1}, d.conv_dw, d.conv_dw_bias,
                              d.conv_g, d.conv_g_bias, d.temp, cos_t[t].data(), sin_t[t].data(), nq, nkv,
                              c.rotary_dim(l));
    cuda::shift_rows_up(d.zx.data(), P, n, C);
    const float *q_new = q.data() + P * Dq, *k_new = k.data() + P * Dk;
    // Values: the current half from this token, the delayed half from the previous token's projection. (Both
    // projections land in v, the delayed one in its second half, which the append shifts down a row through the
    // state.)
    linear(v.data(), Dk, xn.data(), d.vv, d.vv_bias, n);
    cuda::append_kv(d.kc.data(), d.vc.data(), k_new, v.data(), len.data(), n, Dk, d.vstate.data(), Dv);
    const cuda::AttnShape as{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), sliding ? *c.sliding_window : 0};
    cuda::attention_decode(att.data(), part_o.data(), part_ml.data(), q_new, d.kc.data(), d.vc.data(), len.data(), n, as,
                           o.attn_splits);
    linear(tmp.data(), D, att.data(), d.o_proj, d.o_bias, n);
    // The residual scaling and the post-attention norm in one kernel (in place on x: each element is read, then
    // written, by one thread).
    cuda::residual_rmsnorm_forward(x.data(), xn.data(), rstd.data(), tmp.data(), x.data(), d.attn_res[0],
                                   d.attn_res[1], d.attn_res[2], d.attn_res[3], d.post_norm, n, D, eps);

    // Router (spec A.4): the down projection, then in one kernel the EDA state (mixing in the previous layer's, same
    // token), its norm, the MLP and the top-1 choice.
    linear(h1.data(), R, xn.data(), d.router_down, d.router_down_bias, n);
    const int cur = int(l % 2);
    const float *prev_scale = l > 0 ? d.router_state_scale : nullptr, *prev = l > 0 ? rho[cur ^ 1].data() : nullptr;
    if (d.router_fc1.dtype == DType::BF16)
        cuda::router_decode(cuda::RouterDecode<uint16_t>{rho[cur].data(), probs.data(), choice.data(), psel.data(),
                                                         h1.data(), prev_scale, prev, d.router_norm,
                                                         bf16_of(d.router_fc1), d.router_fc1_bias, bf16_of(d.router_fc2),
                                                         d.router_fc2_bias, bf16_of(d.router_out), d.balancing_biases,
                                                         R, K, eps},
                            n);
    else
        cuda::router_decode(cuda::RouterDecode<float>{rho[cur].data(), probs.data(), choice.data(), psel.data(),
                                                      h1.data(), prev_scale, prev, d.router_norm, f32_of(d.router_fc1),
                                                      d.router_fc1_bias, f32_of(d.router_fc2), d.router_fc2_bias,
                                                      f32_of(d.router_out), d.balancing_biases, R, K, eps},
                            n);
    // Experts (A.5), the choice read on the device: the skip slot gives zeros (then silu(0)·0 = 0) and, under
    // passthrough, the expert input itself at the end; every row is scaled by its chosen probability.
    // The SwiGLU between the two is computed as the down projection stages its input.
    cuda::ExpertRows gate{choice.data(), nullptr, nullptr, 0, E};
    expert_linear(hh.data(), 2 * I, xn.data(), d.gate_up, gate, n);
    cuda::ExpertRows down{choice.data(), psel.data(), c.skip_passthrough ? xn.data() : nullptr, D, E, true};
    expert_linear(moe.data(), D, hh.data(), d.down, down, n);
    // The residual scaling with the next norm: the next layer's input norm, or after the last layer the final norm
    // (xn is then what the LM head reads). The down projection above has read xn (the skip passthrough) already.
    const float *next_norm = l + 1 < c.num_hidden_layers ? layers[size_t(l + 1)].input_norm : final_norm;
    cuda::residual_rmsnorm_forward(x.data(), xn.data(), rstd.data(), moe.data(), x.data(), d.mlp_res[0], d.mlp_res[1],
                                   d.mlp_res[2], d.mlp_res[3], next_norm, n, D, eps);
}

void CudaDecoder::Impl::prepare(const int32_t *toks, int64_t n) {
    if (n < 1 || n > o.max_chunk) fail("cuda decoder: {} tokens in one pass (1 … {})", n, o.max_chunk);
    if (length + n > o.max_len)
        fail("cuda decoder: a sequence of {} tokens exceeds the device cache's max length {}", length + n, o.max_len);
    if (length + n > c.max_position_embeddings)
        fail("sequence of {} tokens would exceed max_position_embeddings ({})", length + n, c.max_position_embeddings);
    for (int64_t i = 0; i < n; ++i)
        if (toks[i] < 0 || toks[i] >= V) fail("token id {} is outside the vocabulary [0, {})", toks[i], V);
    cuda::copy_to_device(tokens.data(), toks, size_t(n) * sizeof(int32_t));
    if (n != seq_n) { // the conv's one-sequence batch [state ; n rows]: the same for every decode step
        const int64_t ss[2] = {0, P + n};
        cuda::copy_to_device(seq_start.data(), ss, sizeof ss);
        seq_n = n;
    }
}

// Kernels only (no copy, no allocation, nothing read on the host): what a decode step's graph holds.
void CudaDecoder::Impl::device_pass(int64_t n) {
    // Positions of the conv's rows: the P state rows before the new ones (negative at the start: those rows'
    // results are never used).
    cuda::decode_positions(pos.data(), len.data(), P + n, -P);
    for (int t = 0; t < 2; ++t)
        if (rot_half[t] > 0)
            cuda::rope_tables(cos_t[t].data(), sin_t[t].data(), pos.data(), inv_freq[t].data(), P + n, rot_half[t]);
    if (embed.dtype == DType::BF16)
        cuda::embed_rows_bf16(x.data(), tokens.data(), reinterpret_cast<const uint16_t *>(embed.buf.data()), input_bias,
                              input_scale, n, D);
    else
        cuda::embed_rows_f32(x.data(), tokens.data(), reinterpret_cast<const float *>(embed.buf.data()), input_bias,
                             input_scale, n, D);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) layer(l, n);
    cuda::advance_length(len.data(), n);
}

// The LM head on the last new row (xn: the last layer normed it with the final norm), into `logits`, and their
// argmax into `best` (kernels only; the argmax reads 4·V bytes, noise next to the head's V·D weights).
void CudaDecoder::Impl::head(int64_t n) {
    linear(logits.data(), V, xn.data() + (n - 1) * D, lm_head.buf.data() ? lm_head : embed, lm_head_bias, 1);
    cuda::argmax(best.data(), best_part_v.data(), best_part_i.data(), logits.data(), V);
}

static DecodeWeights weights_of(const InferModel &m) {
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
    Impl &m = *impl_;
    for (DevLayer &d : m.layers) {
        cuda::fill_bytes(d.zx.data(), 0, size_t(m.P * m.C) * sizeof(float)); // the conv state
        cuda::copy_to_device(d.vstate.data(), d.vstate0.data(), d.vstate0.size() * sizeof(float));
    }
    cuda::fill_bytes(m.len.data(), 0, sizeof(int32_t));
    m.length = 0;
}

int32_t CudaDecoder::Impl::prefill(std::span<const int32_t> toks, float *out) {
    if (toks.empty()) fail("prefill needs at least one token");
    if (length + int64_t(toks.size()) > o.max_len)
        fail("cuda decoder: a prompt of {} toks after {} cached exceeds the device cache's max length {}",
             toks.size(), length, o.max_len);
    int64_t n = 0;
    for (size_t at = 0; at < toks.size(); at += size_t(n)) {
        n = std::min<int64_t>(int64_t(toks.size() - at), o.max_chunk);
        prepare(toks.data() + at, n);
        device_pass(n);
        length += n;
    }
    head(n);
    return download(out);
}

int32_t CudaDecoder::Impl::step(int32_t token, float *out) {
    prepare(&token, 1);
    // One eager step first (modules loaded, every kernel launched once), then the step as one graph launch: ~20
    // kernels per layer would otherwise cost more in launch overhead than a batch-1 step reads from memory.
    if (o.graph && eager_steps > 0) {
        if (!step_graph.ready())
            step_graph.capture([&] {
                device_pass(1);
                head(1);
            });
        step_graph.launch();
    } else {
        device_pass(1);
        head(1);
        ++eager_steps;
    }
    length += 1;
    return download(out);
}

void CudaDecoder::prefill(std::span<const int32_t> tokens, float *logits) {
    if (!logits) fail("CudaDecoder::prefill: no logits buffer (prefill_greedy gives the argmax alone)");
    impl_->prefill(tokens, logits);
}
int32_t CudaDecoder::prefill_greedy(std::span<const int32_t> tokens) { return impl_->prefill(tokens, nullptr); }
void CudaDecoder::step(int32_t token, float *logits) {
    if (!logits) fail("CudaDecoder::step: no logits buffer (step_greedy gives the argmax alone)");
    impl_->step(token, logits);
}
int32_t CudaDecoder::step_greedy(int32_t token) { return impl_->step(token, nullptr); }

int64_t CudaDecoder::length() const { return impl_->length; }
size_t CudaDecoder::weight_bytes() const { return impl_->weight_bytes; }
size_t CudaDecoder::step_kernels() const { return impl_->step_graph.nodes(); }

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
