// Causal grouped-query softmax attention (spec A.3 step 7), computed in blocks of queries × keys with GEMMs and an
// online softmax (flash-attention style), so memory stays O(block²) instead of O(T²).
#pragma once
#include "core/real.h"
#include "ops/cpu/seq_prefix.h"

#include <cstdint>

namespace zaya::cpu {

struct AttnShape {
    int64_t nq, nkv, hd;
    real scale;    // 1/√hd
    int64_t window; // sliding window incl. the current token (HF convention); ≤ 0 for full causal
};

// out[N,nq,hd] from q[N,nq,hd], k,v[N,nkv,hd] over a varlen batch (seq_start[B+1]); query head h reads kv head
// h/(nq/nkv). lse[N,nq] receives each row's log-sum-exp (kept for backward; may be null). With a prefix (parts of
// longer sequences: context parallelism), sequence b's queries, rows seq_start[b] … of q, are its positions
// pos0[b] … pos0[b]+T−1, and its keys and values at positions 0 … pos0[b]+T−1 are rows key_start[b] … of k and v.
void attention_forward(real *out, real *lse, const real *q, const real *k, const real *v, const int64_t *seq_start,
                       int64_t B, const AttnShape &s, const SeqPrefix *prefix = nullptr);

// Attention of n new queries of one sequence, at positions p0 … p0+n−1, over its cache: k, v[p0+n, nkv, hd] hold
// every earlier position and the new ones (causal; sliding window as above). out[n, nq, hd]. Inference only.
// batch_invariant: every row attends on its own (the per-row path of fewer than 16 rows, in 512-key blocks from
// position 0), however many rows, so a row's output has the same bits whatever rows share the call; else from 16
// rows a block of queries reads each key block once, with GEMMs (a long prompt's chunk: several times faster).
void attention_cached(real *out, const real *q, const real *k, const real *v, int64_t n, int64_t p0,
                      const AttnShape &s, bool batch_invariant = false);
#ifndef ZAYA_DOUBLE
// The same over a bf16 cache (fp32 build only), as a bf16 model attends: scores t are the queries rounded to bf16
// times the keys as stored (products exact in fp32, fp32 sums), in log2 units (scale·log2 e); a row's maximum is the
// integer M = ⌊max t⌋ and P = 2^(t − M), computed as 2^(t − ⌊t⌋)·2^(⌊t⌋ − M) so that the maxima a path subtracts
// (running, per key block or split) change P by exact powers of two only; out = Σ bf16(P)·v / Σ P. A prompt chunk runs
// both block products as bf16 GEMMs (oneDNN) on the cache's rows in place, a few rows per-row dots: the same numbers
// however a sequence is fed, up to the order of the sums.
void attention_cached(real *out, const real *q, const uint16_t *k, const uint16_t *v, int64_t n, int64_t p0,
                      const AttnShape &s, bool batch_invariant = false);
#endif

// Backward of attention_forward (flash-attention style: P is recomputed from q, k and the saved lse).
// dq[N,nq,hd], dk, dv[N,nkv,hd] are written (=); with a prefix, dk and dv at the key rows of positions
// 0 … pos0[b]+T−1 of each sequence (others untouched), and consecutive sequences with the same key_start (parts
// of one sequence) sum into their shared rows. One pass per (sequence, kv head), or — when those tasks are too few
// or too uneven for the threads — dq by query blocks and dk/dv by key blocks; every output row has one writer and
// the same sums in the same order either way, so results are bit-identical for any thread count.
void attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *out, const real *lse,
                        const real *q, const real *k, const real *v, const int64_t *seq_start, int64_t B,
                        const AttnShape &s, const SeqPrefix *prefix = nullptr);

} // namespace zaya::cpu
