// The ZAYA1 MoE pieces on the GPU (ops/cpu/moe.h): top-1 router selection, the grouping of tokens by expert, and
// the routed SwiGLU experts over the grouped tokens. Everything stays on the device — group offsets included —
// so no step waits for the host; the experts run as grouped GEMMs that read each group's rows from `offsets`.
#pragma once
#include "ops/cpu/moe.h"

#include <array>
#include <cstdint>

namespace zaya::cuda {

using cpu::MoeShape;

// probs[N,K] = softmax(logits[N,K]); choice[N] = argmax(probs + bias[K]), lowest index on ties; p_sel[N] = the
// chosen (unbiased) probability.                                                 (cpu::router_select_forward)
void router_select_forward(float *probs, int32_t *choice, float *p_sel, const float *logits, const float *bias,
                           int64_t N, int64_t K);
// The router MLP after the EDA state in one kernel (ops/cuda/router_fused.cu), all fp32: rmsnorm_forward(r_norm,
// r_rstd; rho[N,R], norm_w), h1 = r_norm·fc1ᵀ + fc1_b, a1 = gelu(h1), h2 = a1·fc2ᵀ + fc2_b, a2 = gelu(h2),
// logits[N,K] = a2·outᵀ, then router_select_forward(probs, choice, p_sel; bias): every output = (biases may be
// null). Only where router_mlp_fusable(R, K) (one tile's activations fit shared memory).
bool router_mlp_fusable(int64_t R, int64_t K);
void router_mlp_forward(float *r_norm, float *r_rstd, float *h1, float *a1, float *h2, float *a2, float *logits,
                        float *probs, int32_t *choice, float *p_sel, const float *rho, const float *norm_w,
                        const float *fc1, const float *fc1_b, const float *fc2, const float *fc2_b, const float *out,
                        const float *bias, int64_t N, int64_t R, int64_t K, float eps);
// dlogits[N,K] (=) from dp_sel[N].                                               (cpu::router_select_backward)
void router_select_backward(float *dlogits, const float *dp_sel, const float *probs, const int32_t *choice, int64_t N,
                            int64_t K);

// order[N], offsets[E+2]: tokens grouped by choice[N] ∈ [0, E] (E = skip slot), ascending within each group — a
// stable counting sort.                                                             (cpu::moe_group_tokens)
void moe_group_tokens(int32_t *order, int64_t *offsets, const int32_t *choice, int64_t N, int64_t E);
// Its scratch for N tokens in E + 1 groups: per-chunk counts and bases (chunks of kGroupChunk tokens).
constexpr int64_t kGroupChunk = 256;
inline size_t group_tokens_scratch_bytes(int64_t N, int64_t E) {
    return 2 * size_t((N + kGroupChunk - 1) / kGroupChunk * (E + 1)) * sizeof(int64_t);
}
// The embedding backward's grouping of rows by token id (ops.h rows_by_token_id): a radix sort, each pass
// moe_group_tokens over a digit of kTokenIdDigitBits bits.
constexpr int kTokenIdDigitBits = 11;
// sizes[g] += offsets[g+1] − offsets[g], g < groups (device pointers).                 (Backend::add_group_sizes)
void add_group_sizes(int64_t *sizes, const int64_t *offsets, int64_t groups);

// bf16 copies of the expert weights (raw bf16 bits), gate_up [E,2I,D] and down [E,D,I]: given to moe_experts_*, they
// run every expert matmul, forward and backward, on tensor cores with bf16 operands and fp32 accumulation
// (autocast's treatment; the activations' bf16 copies are made on the way); without them, true fp32. The caller
// makes them (Backend: once per training step while the weights do not change).
struct ExpertWeightsBf16 {
    const uint16_t *gate_up, *down;
};
// Whether the tensor-core path runs this shape: D and I multiples of 8 (bf16 rows copied in 16-byte pieces: the
// grouped GEMM's grouped_tc_fits for both products).
inline bool experts_on_tensor_cores(const MoeShape &s) { return s.D > 0 && s.I > 0 && s.D % 8 == 0 && s.I % 8 == 0; }
// The tensor-core path's bf16 rows for N tokens, pieces of one scratch: xg [N,D], a [N,I], dy [N,D], dh [N,2I].
inline std::array<size_t, 4> moe_bf16_pieces(int64_t N, const MoeShape &s) {
    return {size_t(N * s.D) * 2, size_t(N * s.I) * 2, size_t(N * s.D) * 2, size_t(N * 2 * s.I) * 2};
}

// out[N,D]; saved in grouped order: xg[N,D], h[N,2I], a[N,I], y[N,D] (h and a only for rows < offsets[E]).
// gate_up[E,2I,D], down[E,D,I]; order and offsets from moe_group_tokens. w16: see ExpertWeightsBf16 (fails for a
// shape experts_on_tensor_cores rejects).                                          (cpu::moe_experts_forward)
void moe_experts_forward(float *out, float *xg, float *h, float *a, float *y, const float *x, const int32_t *order,
                         const int64_t *offsets, const float *p_sel, const float *gate_up, const float *down,
                         int64_t N, const MoeShape &s, const ExpertWeightsBf16 *w16 = nullptr);

// dx[N,D] (=), dp_sel[N] (=), dgate_up, ddown (+=); scratch dy[N,D], da[N,I], dh[N,2I] (unused with w16), dxg[N,D].
//                                                                                  (cpu::moe_experts_backward)
void moe_experts_backward(float *dx, float *dp_sel, float *dgate_up, float *ddown, float *dy, float *da, float *dh,
                          float *dxg, const float *dout, const int32_t *order, const int64_t *offsets,
                          const float *p_sel, const float *xg, const float *h, const float *a, const float *y,
                          const float *gate_up, const float *down, int64_t N, const MoeShape &s,
                          const ExpertWeightsBf16 *w16 = nullptr);

} // namespace zaya::cuda
