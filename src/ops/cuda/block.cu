// Kernels of ops/cuda/block.h. Correctness first: one thread per output element, plain index math, every launch
// checked; the column sums by column_sum.cuh's deterministic two-pass reduction.
#include "ops/cuda/block.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/varlen.cuh"

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void add_bias_rows_kernel(float *y, int64_t ldy, const float *b, int64_t N, int64_t O) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= N * O) return;
    const int64_t n = k / O, o = k % O;
    y[n * ldy + o] += b[o];
}

__global__ void delayed_values_forward_kernel(float *v, int64_t ldv, const float *v_del, const float *bias,
                                              const int64_t *seq_start, int64_t B, int64_t N, int64_t Dv) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= N * Dv) return;
    const int64_t n = k / Dv, i = k % Dv;
    const bool first = seq_start[sequence_of(seq_start, B, n)] == n;
    v[n * ldv + i] = first ? (bias ? bias[i] : 0.0f) : v_del[(n - 1) * Dv + i];
}

__global__ void delayed_values_backward_kernel(float *d_vdel, const float *dv, int64_t ldv, const int64_t *seq_start,
                                               int64_t B, int64_t N, int64_t Dv) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= N * Dv) return;
    const int64_t n = k / Dv, i = k % Dv;
    // Row n of the delayed projection fed token n+1 of the same sequence, if there is one.
    const int64_t end = seq_start[sequence_of(seq_start, B, n) + 1];
    d_vdel[n * Dv + i] = n + 1 < end ? dv[(n + 1) * ldv + i] : 0.0f;
}

__global__ void delayed_bias_backward_kernel(float *dbias, const float *dv, int64_t ldv, const int64_t *seq_start,
                                             int64_t B, int64_t Dv) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= Dv) return;
    for (int64_t b = 0; b < B; ++b) // sequences in order, as the CPU loop adds them
        if (seq_start[b + 1] > seq_start[b]) dbias[i] += dv[seq_start[b] * ldv + i];
}

__global__ void eda_forward_kernel(float *rho, const float *h, const float *scale, const float *rho_prev, int64_t N,
                                   int64_t R) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= N * R) return;
    float v = h[k];
    if (scale && rho_prev) v += scale[k % R] * rho_prev[k];
    rho[k] = v;
}

__global__ void eda_carry_backward_kernel(float *d_carry, const float *scale, const float *d_rho, int64_t N,
                                          int64_t R) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= N * R) return;
    d_carry[k] = scale ? scale[k % R] * d_rho[k] : 0.0f;
}

__global__ void rope_tables_kernel(float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq, int64_t N,
                                   int64_t half) {
    await_previous_kernel();
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= N * half) return;
    const float angle = float(pos[k / half]) * inv_freq[k % half];
    cos_t[k] = float(cos(double(angle)));
    sin_t[k] = float(sin(double(angle)));
}

} // namespace

void add_bias_rows(float *y, int64_t ldy, const float *b, int64_t N, int64_t O) {
    if (N * O == 0 || !b) return;
    add_bias_rows_kernel<<<blocks_for(N * O, kThreads), kThreads, 0, launch_stream()>>>(y, ldy, b, N, O);
    ZAYA_CUDA_LAUNCHED();
}

void column_dot_add(float *out, const float *a, int64_t lda, const float *b, int64_t ldb, int64_t N, int64_t D) {
    if (D == 0) return;
    if (b) column_sum_add<float>(out, ColumnProduct{a, lda, b, ldb}, N, D);
    else column_sum_add<float>(out, ColumnOf<float>{a, lda}, N, D);
}

void delayed_values_forward(float *v, int64_t ldv, const float *v_del, const float *bias, const int64_t *seq_start,
                            int64_t B, int64_t N, int64_t Dv) {
    if (N * Dv == 0) return;
    delayed_values_forward_kernel<<<blocks_for(N * Dv, kThreads), kThreads, 0, launch_stream()>>>(v, ldv, v_del, bias,
                                                                                                  seq_start, B, N, Dv);
    ZAYA_CUDA_LAUNCHED();
}

void delayed_values_backward(float *d_vdel, float *dbias, const float *dv, int64_t ldv, const int64_t *seq_start,
                             int64_t B, int64_t N, int64_t Dv) {
    if (N * Dv == 0) return;
    delayed_values_backward_kernel<<<blocks_for(N * Dv, kThreads), kThreads, 0, launch_stream()>>>(d_vdel, dv, ldv,
                                                                                                   seq_start, B, N, Dv);
    ZAYA_CUDA_LAUNCHED();
    if (!dbias) return;
    delayed_bias_backward_kernel<<<blocks_for(Dv, kThreads), kThreads, 0, launch_stream()>>>(dbias, dv, ldv, seq_start,
                                                                                             B, Dv);
    ZAYA_CUDA_LAUNCHED();
}

void eda_forward(float *rho, const float *h, const float *scale, const float *rho_prev, int64_t N, int64_t R) {
    if (N * R == 0) return;
    eda_forward_kernel<<<blocks_for(N * R, kThreads), kThreads, 0, launch_stream()>>>(rho, h, scale, rho_prev, N, R);
    ZAYA_CUDA_LAUNCHED();
}

void eda_carry_backward(float *d_carry, const float *scale, const float *d_rho, int64_t N, int64_t R) {
    if (N * R == 0) return;
    eda_carry_backward_kernel<<<blocks_for(N * R, kThreads), kThreads, 0, launch_stream()>>>(d_carry, scale, d_rho, N,
                                                                                             R);
    ZAYA_CUDA_LAUNCHED();
}

void rope_tables(float *cos_t, float *sin_t, const int32_t *pos, const float *inv_freq, int64_t N, int64_t half) {
    if (N * half == 0) return;
    launch_kernel(rope_tables_kernel, blocks_for(N * half, kThreads), kThreads, 0, cos_t, sin_t, pos, inv_freq, N,
                  half);
}

} // namespace zaya::cuda
