// Compressed Convolutional Attention pieces (spec A.3): the causal two-stage q‖k convolution, the q-k mean
// residual paths, L2 QK-norm with the linear key temperature, and partial neox RoPE.
// Batches are "varlen": sequences packed back to back, sequence s owning rows [seq_start[s], seq_start[s+1]).
#pragma once
#include "core/real.h"
#include "ops/cpu/seq_prefix.h"

#include <cstdint>
#include <vector>

namespace zaya::cpu {

struct ConvShape {
    int64_t C;      // channels = (nq + nkv)·hd
    int64_t groups; // nq + nkv (grouped conv mixes channels within a head)
    int64_t k0, k1; // depthwise and grouped kernel sizes (cca_time0, cca_time1)
};

// Rows of the depthwise output buffer `p`: each sequence keeps k1−1 extra leading rows (positions −(k1−1)..−1).
inline int64_t cca_conv_p_rows(int64_t N, int64_t B, const ConvShape &s) { return N + B * (s.k1 - 1); }
// The z rows before a sequence's first that its outputs read (context parallelism's halo: k0−1+k1−1 = 2 in ZAYA1).
inline int64_t cca_conv_halo(const ConvShape &s) { return s.k0 - 1 + s.k1 - 1; }

// o[N,C] = grouped_conv(depthwise_conv(pad(z))): zero padding of k0−1+k1−1 rows is applied to z before the
// depthwise conv, so the first grouped-conv taps see the depthwise bias (spec A.3 step 2).
// p[cca_conv_p_rows, C] receives the depthwise output (kept for backward).
// wd[C,1,k0], bd[C], wg[C,hd,k1], bg[C] in PyTorch Conv1d layout. With a prefix (ops/cpu/seq_prefix.h), a sequence
// that continues one begun elsewhere reads its z_prev rows (the positions just before it) in the padding's place.
// batch_invariant: every output summed on its own (the direct path) however many rows, so a sequence's outputs have
// the same bits whatever sequences share the call (else from 64 rows one GEMM per head group sums them).
void cca_conv_forward(real *o, real *p, const real *z, const int64_t *seq_start, int64_t B, const ConvShape &s,
                      const real *wd, const real *bd, const real *wg, const real *bg,
                      const SeqPrefix *prefix = nullptr, bool batch_invariant = false);

// q[N,nq,hd] = o_q + (q_pre + k_pre[h/g])/2, k[N,nkv,hd] = o_k + mean over the group of (q_pre + k_pre)/2,
// where z = q_pre‖k_pre and o = conv output, both [N, (nq+nkv)·hd].
void cca_qk_mean_forward(real *q, real *k, const real *o, const real *z, int64_t N, int64_t nq, int64_t nkv,
                         int64_t hd);

// In place: q ← √hd·q/max(‖q‖,ε), k ← √hd·k/max(‖k‖,ε)·temp[j]; saves the clamped norms qn[N,nq], kn[N,nkv].
void cca_qk_norm_forward(real *q, real *k, real *qn, real *kn, const real *temp, int64_t N, int64_t nq,
                         int64_t nkv, int64_t hd);

// inv_freq[rot/2]: θ^(−2i/rot) computed as transformers does (fp32): the one source of these bits, for the CUDA
// tables too.
std::vector<float> rope_inv_freq(int64_t rot, double theta);
// cos/sin tables [N, rot/2] for positions pos[N]: cos/sin(pos·inv_freq_i), the angle in fp32, cos and sin in double.
void rope_tables(real *cos_t, real *sin_t, const int32_t *pos, int64_t N, int64_t rot, double theta);

// In place neox (rotate-half) RoPE on the first `rot` dims of each head of x[N,H,hd].
void rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot);

// Backward of cca_conv_forward. dz[N,C] += (accumulates; the q-k mean path also feeds it); dp is scratch of
// cca_conv_p_rows × C; parameter grads +=. With a prefix, its dz_prev receives z_prev's gradient (=; zero for the
// sequences that start at position 0).
void cca_conv_backward(real *dz, real *dp, real *dwd, real *dbd, real *dwg, real *dbg, const real *dout,
                       const real *z, const real *p, const int64_t *seq_start, int64_t B, const ConvShape &s,
                       const real *wd, const real *wg, const SeqPrefix *prefix = nullptr);

// Backward of cca_qk_mean_forward: dconv[N,C] = (dq‖dk) (=), dz[N,C] = the mean-path share (=).
void cca_qk_mean_backward(real *dconv, real *dz, const real *dq, const real *dk, int64_t N, int64_t nq, int64_t nkv,
                          int64_t hd);

// Backward of cca_qk_norm_forward, in place on dq/dk (gradients w.r.t. the normalised outputs become gradients
// w.r.t. the pre-norm q/k). q_pre/k_pre are the pre-norm vectors; dtemp[nkv] +=.
void cca_qk_norm_backward(real *dq, real *dk, real *dtemp, const real *q_pre, const real *k_pre, const real *qn,
                          const real *kn, const real *temp, int64_t N, int64_t nq, int64_t nkv, int64_t hd);

// Backward of rope_forward (a rotation: the transpose rotates back), in place.
void rope_backward(real *dx, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot);

} // namespace zaya::cpu
