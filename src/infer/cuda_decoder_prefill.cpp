// CudaDecoder's prefill passes of many rows (Options::prefill_chunk): CudaDecoder::Impl::layer with its
// projections as cuBLASLt GEMMs and its experts as the training forward's grouped GEMMs over the rows sorted by
// expert. A GEMV pass reads every weight once per max_chunk rows, and each row's expert on its own; here a pass
// reads each weight once for up to prefill_chunk rows, each expert once for the rows that chose it. The rows may
// be several slots' (Impl::segments: prompts arriving together), each segment's conv and attention its own. Same
// state in, same state out (the KV cache, the conv and value states); bf16 weights multiply the rows' bf16 copies
// (fp32 accumulation), as the training forward does, fp32 weights the fp32 rows.
#include "infer/cuda_decoder_impl.h"

#include "ops/cuda/attention.h"
#include "ops/cuda/block.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/ops.h"

#include <algorithm>
#include <cmath>

namespace zaya {

using namespace cuda_decoding;

namespace {

// y[n, rows] (row stride ldy) = x · W[row0 : row0 + rows]ᵀ + b[row0 …] (b may be null): a bf16 W reads x16, the
// bf16 copy of x [n, W.cols]; an fp32 W reads x itself (true fp32, no TF32).
void gemm_linear(float *y, int64_t ldy, const float *x, const uint16_t *x16, const DevMat &W, int64_t row0,
                 int64_t rows, const float *b, int64_t n) {
    const int64_t K = W.cols;
    const uint8_t *w = W.buf.data() + size_t(row0 * K) * dtype_size(W.dtype);
    if (W.dtype == DType::BF16)
        cuda::gemm_bf16_nt(y, ldy, x16, reinterpret_cast<const uint16_t *>(w), n, rows, K, 0.0f);
    else
        cuda::gemm_f32(false, true, n, rows, K, 1.0f, x, K, reinterpret_cast<const float *>(w), K, 0.0f, y, ldy);
    if (b) cuda::add_bias_rows(y, ldy, b + row0, n, rows);
}

} // namespace

void CudaDecoder::Impl::layer_gemm(int64_t l, const Pass &p) {
    DevLayer &d = layers[size_t(l)];
    const float eps = float(c.rms_norm_eps);
    const int64_t n = p.rows;
    uint16_t *x16 = rows16.data();
    // Every norm also leaves its output's bf16 copy in x16, which the next GEMM reads.
    if (l == 0) cuda::rmsnorm_forward(xn.data(), rstd.data(), x.data(), d.input_norm, n, D, eps, x16);
    // zx = [a slot's conv state ; q‖k of its new rows] per segment, its last P rows then the slot's state (as
    // layer()). One segment's q‖k go straight behind its state; several segments' first to qk_rows, then each
    // segment's rows behind its own state, so that the projection still reads the weights once for all of them.
    float *zx = zx_pass.data();
    const bool one = segments.size() == 1;
    gemm_linear(one ? zx + P * C : qk_rows.data(), C, xn.data(), x16, d.qkv, 0, C, d.qkv_bias, n); // q‖k
    gemm_linear(v.data(), Dk, xn.data(), x16, d.qkv, C, Dk, d.qkv_bias, n); // current‖delayed values
    int64_t longest = 0;
    for (const Segment &s : segments) {
        cuda::copy_on_device(zx + s.conv * C, d.zx.data() + s.slot * SR * C, size_t(P * C) * sizeof(float));
        if (!one)
            cuda::copy_on_device(zx + (s.conv + P) * C, qk_rows.data() + s.at * C, size_t(s.rows * C) * sizeof(float));
        longest = std::max(longest, P + s.rows);
    }
    const bool sliding = c.layer_types[size_t(l)] == LayerType::HybridSliding;
    const int t = sliding ? 1 : 0;
    const int64_t nseg = int64_t(segments.size());
    cuda::cca_conv_qk_forward(convx.data(), pbuf.data(), q.data(), k.data(), qn.data(), kn.data(), zx,
                              cuda::VarlenBatch{seq_one.data(), nseg, nseg * P + n, longest},
                              cuda::ConvShape{C, nq + nkv, c.cca_time0, c.cca_time1}, d.conv_dw, d.conv_dw_bias,
                              d.conv_g, d.conv_g_bias, d.temp, cos_t[t].data(), sin_t[t].data(), nq, nkv,
                              c.rotary_dim(l));
    for (const Segment &s : segments)
        cuda::copy_on_device(d.zx.data() + s.slot * SR * C, zx + (s.conv + s.rows) * C, size_t(P * C) * sizeof(float));
    // Per segment, the KV append, then attention of its new rows over its slot's cache.
    const cuda::AttnShape as{nq, nkv, hd, 1.0f / std::sqrt(float(hd)), sliding ? *c.sliding_window : 0};
    const bool o16 = d.o_proj.dtype == DType::BF16;
    const bool tensor_cores = d.qkv.dtype == DType::BF16 && cuda::attention_on_tensor_cores(as);
    for (size_t j = 0; j < segments.size(); ++j) {
        const Segment &s = segments[j];
        const float *q_new = q.data() + (s.conv + P) * Dq, *k_new = k.data() + (s.conv + P) * Dk;
        float *out = att.data() + s.at * Dq;
        with_kv(d, s.slot, [&](auto *kc, auto *vc) {
            cuda::append_kv(kc, vc, k_new, v.data() + s.at * Dk, len.data() + s.slot, s.rows, Dk,
                            d.vstate.data() + s.slot * Dv, Dv);
            if (tensor_cores) {
                // bf16 weights: flash attention on tensor cores, a block per 64 rows of a head reading each key tile
                // once for all of them (and writing the output's bf16 copy the output projection reads); a bf16
                // cache is read as it is, an fp32 one rounded first.
                cuda::attention_prefill_bf16(out, q_new, kc, vc, seq_new.data() + 2 * j, s.rows,
                                             lengths[size_t(s.slot)], as, o16 ? x16 + s.at * Dq : nullptr);
            } else {
                // fp32: the decode kernel, each row's keys read on their own. With many rows the (row, head) blocks
                // fill the GPU by themselves: fewer key splits, so the partial results fit the buffers sized for a
                // GEMV pass's.
                const int64_t splits = std::clamp<int64_t>(o.attn_splits * N0 / s.rows, 1, o.attn_splits);
                cuda::attention_decode(out, part_o.data(), part_ml.data(), q_new, kc, vc, len.data() + s.slot,
                                       s.rows, as, splits, counters.data());
            }
        });
    }
    if (!tensor_cores && o16) cuda::to_bf16_rows(x16, att.data(), n, Dq, Dq);
    // The output projection, then the residual scaling and the post-attention norm (in place on x).
    gemm_linear(tmp.data(), D, att.data(), x16, d.o_proj, 0, D, d.o_bias, n);
    cuda::residual_rmsnorm_forward(x.data(), xn.data(), rstd.data(), tmp.data(), x.data(), d.attn_res[0],
                                   d.attn_res[1], d.attn_res[2], d.attn_res[3], d.post_norm, n, D, eps, x16);
    // Router (spec A.4): the down projection as a GEMM, then the EDA state, MLP and top-1 choice a block per row.
    gemm_linear(h1.data(), R, xn.data(), x16, d.router_down, 0, R, d.router_down_bias, n);
    with_router(l, nullptr, [&](const auto &a) { cuda::router_decode(a, n); });
    // Experts (A.5): the rows grouped by their choice, each group through its expert's gate-up, SwiGLU and down as
    // grouped GEMMs; the skip slot's rows give zeros, or under passthrough the input; every row scaled by its
    // chosen probability. Then the residual scaling with the next norm (the final norm after the last layer).
    cuda::moe_group_tokens(order.data(), offsets.data(), choice.data(), n, E);
    const cuda::MoeShape ms{D, I, E, c.skip_passthrough};
    if (d.gate_up.dtype == DType::BF16) {
        const cuda::ExpertWeightsBf16 w16{bf16_of(d.gate_up), bf16_of(d.down)};
        cuda::moe_experts_forward(moe.data(), xg.data(), hh.data(), ea.data(), ey.data(), xn.data(), order.data(),
                                  offsets.data(), psel.data(), nullptr, nullptr, n, ms, &w16);
    } else {
        cuda::moe_experts_forward(moe.data(), xg.data(), hh.data(), ea.data(), ey.data(), xn.data(), order.data(),
                                  offsets.data(), psel.data(), f32_of(d.gate_up), f32_of(d.down), n, ms);
    }
    const float *next_norm = l + 1 < c.num_hidden_layers ? layers[size_t(l + 1)].input_norm : final_norm;
    cuda::residual_rmsnorm_forward(x.data(), xn.data(), rstd.data(), moe.data(), x.data(), d.mlp_res[0],
                                   d.mlp_res[1], d.mlp_res[2], d.mlp_res[3], next_norm, n, D, eps, x16);
}

} // namespace zaya
