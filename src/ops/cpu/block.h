// The small pieces of the ZAYA1 block between the big ops: a projection's bias rows, the delayed value half, the
// router's EDA state and its carried gradient. The CUDA twins are in ops/cuda/block.h.
#pragma once
#include "core/real.h"
#include "ops/cpu/seq_prefix.h"

#include <cstdint>

namespace zaya::cpu {

// y[n, o] (row stride ldy) += b[o] for n < N, o < O.
void add_bias_rows(real *y, int64_t ldy, const real *b, int64_t N, int64_t O);

// The delayed value half (spec A.3 step 4): v[n, 0:Dv] (row stride ldv) = v_del[n−1] within n's sequence, or the
// delayed projection's bias (zero if null) at a sequence's first token (the projection of a zero input) — or, for a
// sequence that continues one begun elsewhere (a prefix's, ops/cpu/seq_prefix.h), v_prev: v_del of the position
// before it.
void delayed_values_forward(real *v, int64_t ldv, const real *v_del, const real *bias, const int64_t *seq_start,
                            int64_t B, int64_t Dv, const SeqPrefix *prefix = nullptr);
// Its backward: d_vdel[n−1] = dv[n] within a sequence, d_vdel[last of a sequence] = 0 (=); dbias[i] += Σ over
// sequences, in order, of dv[first token][i] (dbias may be null) — for a sequence that continues, the prefix's
// dv_prev[b] = dv[its first token] (=) instead (zero for those that start at position 0).
void delayed_values_backward(real *d_vdel, real *dbias, const real *dv, int64_t ldv, const int64_t *seq_start,
                             int64_t B, int64_t Dv, const SeqPrefix *prefix = nullptr);

// EDA (router depth mixing): rho[N,R] = h + scale ⊙ rho_prev (a copy of h when scale or rho_prev is null). rho
// may alias rho_prev (one reused activation set in inference).
void eda_forward(real *rho, const real *h, const real *scale, const real *rho_prev, int64_t N, int64_t R);
// The gradient carried to the previous layer: d_carry[N,R] = scale ⊙ d_rho (zero when scale is null).
void eda_carry_backward(real *d_carry, const real *scale, const real *d_rho, int64_t N, int64_t R);

} // namespace zaya::cpu
