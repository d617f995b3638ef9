// The small pieces of the ZAYA1 block that the CPU model code does inline (model/forward.cpp, backward.cpp), as
// GPU kernels: bias rows of a packed projection, the delayed value half, the router's EDA state, deterministic
// column sums, and the RoPE tables. Same layouts as the CPU code; device pointers.
#pragma once
#include <cstdint>

namespace zaya::cuda {

// y[n, o] (row stride ldy) += b[o] for n < N, o < O: a projection's bias, when its GEMM wrote into a packed buffer.
void add_bias_rows(float *y, int64_t ldy, const float *b, int64_t N, int64_t O);

// out[o] += Σ_n a[n·lda + o] · b[n·ldb + o]  (b null: Σ_n a[n·lda + o]), rows summed in chunks in a fixed order
// (column_sum.cuh): deterministic, the gradient of every per-feature vector.                 (cpu::column_dot_add)
void column_dot_add(float *out, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t N, int64_t D);

// The delayed value half (spec A.3 step 4): v[n, 0:Dv] (row stride ldv) = v_del[n−1] within n's sequence, or the
// delayed projection's bias (zero if null) at a sequence's first token. seq_start[B+1] on the device.
void delayed_values_forward(float *v, int64_t ldv, const float *v_del, const float *bias, const int64_t *seq_start,
                            int64_t B, int64_t N, int64_t Dv);
// Its backward: d_vdel[n−1] = dv[n] within a sequence, d_vdel[last of a sequence] = 0 (=); dbias[i] += Σ over
// sequences, in order, of dv[first token][i] (dbias may be null). dv has row stride ldv.
void delayed_values_backward(float *d_vdel, float *dbias, const float *dv, int64_t ldv, const int64_t *seq_start,
                             int64_t B, int64_t N, int64_t Dv);

// The router's depth mixing (EDA): rho[N,R] = h[N,R] + scale[R] ⊙ rho_prev[N,R] (a copy of h when scale or
// rho_prev is null — the first layer).
void eda_forward(float *rho, const float *h, const float *scale, const float *rho_prev, int64_t N, int64_t R);
// The gradient carried to the previous layer: d_carry = scale ⊙ d_rho (zero when scale is null). The scale's own
// gradient is column_dot_add(d_scale, d_rho, R, rho_prev, R, N, R).
void eda_carry_backward(float *d_carry, const float *scale, const float *d_rho, int64_t N, int64_t R);

// cos/sin tables [N, half] for positions pos[N]: angle = float(pos)·inv_freq[i] in fp32, cos and sin in double —
// cpu::rope_tables with inv_freq[half] = cpu::rope_inv_freq(rot, θ) uploaded once (the bits transformers uses).
void rope_tables(float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq, int64_t N, int64_t half);

} // namespace zaya::cuda
