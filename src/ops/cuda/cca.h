// Compressed Convolutional Attention pieces on the GPU (ops/cpu/cca.h): the q-k mean residual paths, L2 QK-norm
// with the key temperature, partial neox RoPE, and the causal two-stage q‖k convolution — forward and backward, same
// layouts as the CPU ops. (Rope tables are computed on the host by cpu::rope_tables and uploaded.)
#pragma once
#include "ops/cpu/cca.h"
#include "ops/cuda/attention.h" // VarlenBatch

#include <array>
#include <cstdint>

namespace zaya::cuda {

using cpu::ConvShape;

// o[N,C] = grouped_conv(depthwise_conv(pad(z))) over the varlen batch (seq_start on the device; N and max_len size
// the grids); p[cpu::cca_conv_p_rows(N, B, s), C] receives the depthwise output, padding rows included (kept for
// backward). wd[C,1,k0], bd[C], wg[C,hd,k1], bg[C] in PyTorch Conv1d layout. One thread per output element, fp32.
//                                                                                         (cpu::cca_conv_forward)
void cca_conv_forward(float *o, float *p, const float *z, const VarlenBatch &batch, const ConvShape &s,
                      const float *wd, const float *bd, const float *wg, const float *bg);
// The same with the grouped conv on bf16 tensor cores, as the CPU runs it under bf16 matmuls: one GEMM per head
// group on the im2col matrix of p (both operands bf16, fp32 accumulation, then the bias), the weight given packed by
// pack_conv_weight_bf16. For head sizes conv_on_tensor_cores accepts (multiples of 8).
void cca_conv_forward_bf16(float *o, float *p, const float *z, const VarlenBatch &batch, const ConvShape &s,
                           const float *wd, const float *bd, const uint16_t *wg16, const float *bg);
inline bool conv_on_tensor_cores(const ConvShape &s) {
    return s.groups > 0 && s.C % s.groups == 0 && s.C / s.groups % 8 == 0;
}
// The tensor-core path's scratch for N rows, pieces of one buffer: cols [groups, N, k1·hd] bf16; for the backward
// also dout's bf16 copy [N, C], dcols [groups, N, k1·hd] and the packed weight gradient [C, k1·hd], fp32.
inline std::array<size_t, 4> conv_bf16_pieces(int64_t N, const ConvShape &s, bool backward) {
    const size_t nk = size_t(N * s.C * s.k1), packed = size_t(s.C * s.k1 * (s.C / s.groups)), b = backward;
    return {nk * 2, b * size_t(N * s.C) * 2, b * nk * 4, b * packed * 4};
}
// wg16[C, k1·hd] = bf16 of wg[C, hd, k1] packed per group as [hd, k1·hd] (row o, column τ·hd + i).
void pack_conv_weight_bf16(uint16_t *wg16, const float *wg, const ConvShape &s);
// dz[N,C] += (the q-k mean path also feeds it); dp (cca_conv_p_rows × C) is scratch, written whole; dwd, dbd,
// dwg, dbg +=. Deterministic: every element has one writer summing in a fixed order (tokens in order, in chunks
// of 256), no atomics. wg16 (pack_conv_weight_bf16's): the grouped conv's dp and dwg as bf16 GEMMs per group, as
// cca_conv_forward_bf16; null: fp32.                                                 (cpu::cca_conv_backward)
void cca_conv_backward(float *dz, float *dp, float *dwd, float *dbd, float *dwg, float *dbg, const float *dout,
                       const float *z, const float *p, const VarlenBatch &batch, const ConvShape &s, const float *wd,
                       const float *wg, const uint16_t *wg16 = nullptr);

// q[N,nq,hd] = o_q + (q_pre + k_pre[h/g])/2, k[N,nkv,hd] = o_k + group mean of (q_pre + k_pre)/2, from the conv
// output o and its input z = q_pre‖k_pre, both [N, (nq+nkv)·hd].                    (cpu::cca_qk_mean_forward)
void cca_qk_mean_forward(float *q, float *k, const float *o, const float *z, int64_t N, int64_t nq, int64_t nkv,
                         int64_t hd);
// dconv[N,C] = dq‖dk (=), dz[N,C] = the mean path's share (=).                      (cpu::cca_qk_mean_backward)
void cca_qk_mean_backward(float *dconv, float *dz, const float *dq, const float *dk, int64_t N, int64_t nq,
                          int64_t nkv, int64_t hd);

// In place: q ← √hd·q/max(‖q‖,ε), k ← √hd·k/max(‖k‖,ε)·temp[j]; qn[N,nq], kn[N,nkv] get the clamped norms.
//                                                                                     (cpu::cca_qk_norm_forward)
void cca_qk_norm_forward(float *q, float *k, float *qn, float *kn, const float *temp, int64_t N, int64_t nq,
                         int64_t nkv, int64_t hd);
// In place on dq[N,nq,hd], dk[N,nkv,hd] (gradients w.r.t. the normalised outputs become gradients w.r.t. q_pre,
// k_pre); dtemp[nkv] += (summed over tokens in order, in double: deterministic).     (cpu::cca_qk_norm_backward)
void cca_qk_norm_backward(float *dq, float *dk, float *dtemp, const float *q_pre, const float *k_pre, const float *qn,
                          const float *kn, const float *temp, int64_t N, int64_t nq, int64_t nkv, int64_t hd);
// dtemp[j] += Σ_n dtemp_rows[n·nkv + j], in double, tokens in a fixed order of chunks (column_sum.cuh): the
// temperature gradient's deterministic sum
// after a QK-norm backward (this one's and cca_qk_backward's) left one partial per (token, KV head).
void add_temp_grads(float *dtemp, const double *dtemp_rows, int64_t N, int64_t nkv);

// The forward chain in one kernel (ops/cuda/cca_fused.cu): cca_conv_forward (o, p), cca_qk_mean_forward,
// cca_qk_norm_forward (q, k, qn, kn) and rope_forward on q and k (tables [N, rot/2]); every output = (written).
// Conv groups are the heads (s.groups = nq + nkv, hd = C/groups). Heads too wide for one block's shared memory run
// the unfused chain. wg16 (pack_conv_weight_bf16's): the conv by cca_conv_forward_bf16, then the rest of the chain
// in one kernel.                                                                 (Backend::cca_conv_qk_forward)
void cca_conv_qk_forward(float *o, float *p, float *q, float *k, float *qn, float *kn, const float *z,
                         const VarlenBatch &batch, const ConvShape &s, const float *wd, const float *bd,
                         const float *wg, const float *bg, const float *temp, const float *cos_t, const float *sin_t,
                         int64_t nq, int64_t nkv, int64_t rot, const uint16_t *wg16 = nullptr);

// Backward of cca_qk_mean_forward → cca_qk_norm_forward → rope_forward (q, k) in one kernel: from dq, dk (w.r.t.
// the rotated outputs) to dconv[N,C] (=) and dz[N,C] (= the mean path's share), dtemp[nkv] += (tokens in order, in
// double); conv and z are the forward's. dq, dk, q_pre, k_pre are clobbered (the unfused chain's scratch, used where
// a KV group exceeds one block).                                                   (Backend::cca_qk_backward)
void cca_qk_backward(float *dconv, float *dz, float *dtemp, float *dq, float *dk, float *q_pre, float *k_pre,
                     const float *conv, const float *z, const float *qn, const float *kn, const float *temp,
                     const float *cos_t, const float *sin_t, int64_t N, int64_t nq, int64_t nkv, int64_t hd,
                     int64_t rot);

// In place neox (rotate-half) RoPE on the first `rot` dims of every head of x[N,H,hd], with cos/sin tables
// [N, rot/2]; the backward rotates back (the transpose).                        (cpu::rope_forward/backward)
void rope_forward(float *x, const float *cos_t, const float *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot);
void rope_backward(float *dx, const float *cos_t, const float *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot);

} // namespace zaya::cuda
