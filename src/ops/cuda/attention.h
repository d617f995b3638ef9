// Causal grouped-query attention on the GPU: the semantics of ops/cpu/attention.h (varlen batch, query head h reads
// kv head h/(nq/nkv), sliding window in the HF convention, lse saved for backward), fp32 throughout. Flash-style:
// scores exist only as 16×16 tiles in shared memory, never as a [T,T] matrix.
#pragma once
#include "ops/cpu/attention.h"

#include <cstddef>
#include <cstdint>

namespace zaya::cuda {

using cpu::AttnShape;

// A varlen batch as kernels see it: sequence b owns rows [seq_start[b], seq_start[b+1]) of the N rows. seq_start
// (B+1 entries) lives on the device; N and the longest length live on the host (the loader knows both) and size
// the grids — a longer sequence is still handled whole, just with fewer blocks than it could use.
struct VarlenBatch {
    const int64_t *seq_start; // device
    int64_t B, N, max_len;
};

// out[N,nq,hd], lse[N,nq] (may be null) from q[N,nq,hd], k, v[N,nkv,hd]           (cpu::attention_forward)
void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const VarlenBatch &batch, const AttnShape &s);

// The same on bf16 tensor cores, flash-attention 2 style (attention_tc.cu: mma.sync with scores, probabilities and
// output in registers, tiles streamed by cp.async): q, k, v and the probabilities rounded to bf16, fp32
// accumulation and softmax; 64×64 tiles. For head sizes that attention_on_tensor_cores accepts. out16: bf16(out)
// too, when given (the output projection's operand).
void attention_forward_bf16(float *out, float *lse, const float *q, const float *k, const float *v,
                            const VarlenBatch &batch, const AttnShape &s, uint16_t *out16 = nullptr);

// attention_forward_bf16 of n new queries over a cache: q [n, nq, hd] at positions cached … cached + n − 1, k and v
// [cached + n, nkv, hd] the keys and values of positions 0 … cached + n − 1 (the new rows' already appended), causal
// and windowed by position; seq_start (device) = {0, n}. out [n, nq, hd]; out16 = bf16(out) when given. A prefill
// pass of the GPU decoder: each block takes a tile of 64 queries of one head, so a key tile is read once for them.
void attention_prefill_bf16(float *out, const float *q, const float *k, const float *v, const int64_t *seq_start,
                            int64_t n, int64_t cached, const AttnShape &s, uint16_t *out16 = nullptr);
// The same over a bf16 cache (the GPU decoder's for a bf16 model): k and v are read as they are, q alone is rounded.
void attention_prefill_bf16(float *out, const float *q, const uint16_t *k, const uint16_t *v,
                            const int64_t *seq_start, int64_t n, int64_t cached, const AttnShape &s,
                            uint16_t *out16 = nullptr);

// dq[N,nq,hd], dk, dv[N,nkv,hd] written (=) from dout, out[N,nq,hd] and the saved lse[N,nq]. Deterministic: dq by
// query tiles, dk/dv by key tiles, each element summed by one thread in a fixed order.  (cpu::attention_backward)
void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, const VarlenBatch &batch,
                        const AttnShape &s);

// The same on bf16 tensor cores (attention_tc_backward.cu), the counterpart of attention_forward_bf16: operands of
// every product rounded to bf16, fp32 accumulation and softmax backward; deterministic as attention_backward.
void attention_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                             const float *q, const float *k, const float *v, const VarlenBatch &batch,
                             const AttnShape &s);

// Whether the tensor-core kernels take this shape: hd a multiple of 16 up to kTensorCoreMaxHeadDim (their
// per-thread output fragments are sized by it at compile time).
constexpr int64_t kTensorCoreMaxHeadDim = 128;
inline bool attention_on_tensor_cores(const AttnShape &s) { return s.hd % 16 == 0 && s.hd <= kTensorCoreMaxHeadDim; }
// The tensor-core kernels' bf16 copies of q [N,nq,hd], k and v [N,nkv,hd] and, for the backward, dout [N,nq,hd]: one
// scratch of this many bytes.
inline size_t attention_bf16_bytes(int64_t N, const AttnShape &s, bool backward) {
    const int64_t nqe = N * s.nq * s.hd, nke = N * s.nkv * s.hd;
    return size_t(nqe + 2 * nke + (backward ? nqe : 0)) * 2;
}

} // namespace zaya::cuda
