// CUDA implementations of the CPU ops (ops/cpu/*.h), same names, shapes and semantics; pointers are device
// pointers, activations fp32, matrices bf16 where noted. Each one is checked against its CPU twin by
// tests/cuda/test_cuda_ops.cpp. Launches go to the default stream (or to
// launch_stream(), runtime.h, where a graph capture sets one); errors surface at synchronize().
#pragma once
#include <cstdint>

namespace zaya::cuda {

// y[N,D] = w ⊙ x·rstd, rstd[N] = 1/√(mean(x²) + eps); y16 = bf16(y) when given  (cpu::rmsnorm_forward)
void rmsnorm_forward(float *y, float *rstd, const float *x, const float *w, int64_t N, int64_t D, float eps,
                     uint16_t *y16 = nullptr);
// dx[N,D] (= or +=), dw[D] += — column sums over rows in a fixed order: deterministic  (cpu::rmsnorm_backward)
void rmsnorm_backward(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *rstd,
                      int64_t N, int64_t D, bool accumulate_dx);

// out[N,D] = (x + hs_bias) ⊙ hs_scale + (res + res_bias) ⊙ res_scale         (cpu::residual_scale_forward)
void residual_scale_forward(float *out, const float *x, const float *res, const float *hs_scale, const float *hs_bias,
                            const float *res_scale, const float *res_bias, int64_t N, int64_t D);
// Fused residual_scale_forward → rmsnorm_forward of its output (ops/cuda/residual_norm.cu): out[N,D] (=) the
// residual scaling, y[N,D] = w ⊙ out·rstd, rstd[N] (=), y16 = bf16(y) when given. One pass per row.
//                                                                               (Backend::residual_rmsnorm_forward)
void residual_rmsnorm_forward(float *out, float *y, float *rstd, const float *x, const float *res,
                              const float *hs_scale, const float *hs_bias, const float *res_scale,
                              const float *res_bias, const float *w, int64_t N, int64_t D, float eps,
                              uint16_t *y16 = nullptr);
// Fused rmsnorm_backward (dy through the norm of `out`, into g: = or +=) → residual_scale_backward of g: dx (=),
// dres (= or +=), dw and the four residual parameter grads [D] += (column sums over rows in a fixed order); g is
// clobbered. No output may alias an input.                                        (Backend::rmsnorm_residual_backward)
void rmsnorm_residual_backward(float *dx, float *dres, float *d_hs_scale, float *d_hs_bias, float *d_res_scale,
                               float *d_res_bias, float *dw, float *g, const float *dy, const float *out,
                               const float *w, const float *rstd, const float *x, const float *res,
                               const float *hs_scale, const float *hs_bias, const float *res_scale,
                               const float *res_bias, int64_t N, int64_t D, bool accumulate_g, bool accumulate_dres);
// out[N,D] = (table[tokens[n]] + bias) ⊙ scale                                (cpu::embedding_forward)
void embedding_forward(float *out, const int32_t *tokens, const float *table, const float *bias, const float *scale,
                       int64_t N, int64_t D);
// Backward of residual_scale_forward: dx[N,D] (=), dres[N,D] (= or +=), the four parameter grads [D] += — column
// sums over rows in a fixed order: deterministic                                    (cpu::residual_scale_backward)
void residual_scale_backward(float *dx, float *dres, float *d_hs_scale, float *d_hs_bias, float *d_res_scale,
                             float *d_res_bias, const float *dout, const float *x, const float *res,
                             const float *hs_scale, const float *hs_bias, const float *res_scale,
                             const float *res_bias, int64_t N, int64_t D, bool accumulate_dres);
// Backward of embedding_forward: dtable[V,D], dbias[D], dscale[D] +=; rows of skip_token (−1: none) get nothing.
// Every element's terms are summed in a fixed order (the table's in token order), no atomics: deterministic.
// Groups the rows by token id on the device (no host round trip).                (cpu::embedding_backward)
void embedding_backward(float *dtable, float *dbias, float *dscale, const float *dout, const int32_t *tokens,
                        const float *table, const float *bias, const float *scale, int64_t N, int64_t D,
                        int32_t skip_token);
// The rows 0 … N−1 sorted by token id, rows of one id in token order, skip_token's rows after all the others
// (embedding_backward's grouping: a device radix sort, no host round trip): order[N] in device scratch, valid until
// the next call; *rows (device) = the number of rows that are not skip_token's.
const int32_t *rows_by_token_id(const int32_t *tokens, int64_t N, int32_t skip_token, const int64_t **rows);
// a[N,I] = silu(h[:, :I]) ⊙ h[:, I:]; its backward dh[N,2I] from da[N,I]     (cpu::swiglu_forward/backward)
void swiglu_forward(float *a, const float *h, int64_t N, int64_t I);
void swiglu_backward(float *dh, const float *da, const float *h, int64_t N, int64_t I);
// y = x·Φ(x) (exact erf GELU)                                                (cpu::gelu_forward)
void gelu_forward(float *y, const float *x, int64_t n);
// dx = dy·(Φ(x) + x·φ(x)); dx may alias dy                                   (cpu::gelu_backward)
void gelu_backward(float *dx, const float *dy, const float *x, int64_t n);

// One fused AdamW step on n elements, exactly the formula of optim/adamw.h (step ≥ 1).
void adamw_update(float *param, const float *grad, float *exp_avg, float *exp_avg_sq, int64_t n, double lr,
                  double weight_decay, double beta1, double beta2, double eps, int64_t step);

// bf16 (raw uint16 bits) from fp32, round to nearest even (as torch and core/dtype.h).
void to_bf16(uint16_t *dst, const float *src, int64_t n);
// dst[rows, cols] (row stride cols) = bf16 of the rows × cols block at src (row stride ld).
void to_bf16_rows(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld);

// Row-major GEMMs with fp32 accumulation and fp32 C (cuBLASLt), the convention of cpu::gemm:
// C[M,N] (row stride ldc) = alpha·op(A)·op(B) + beta·C, with A [M,K] (or [K,M] if trans_a, row stride lda) and B
// [K,N] (or [N,K] if trans_b). beta = 0 never reads C. gemm_f32 is true fp32 (no TF32); gemm_bf16 takes bf16 A, B.
void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
               int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc);
// `count` bf16 GEMMs D_i = bf16(alpha·op(A_i)·op(B_i) + beta·C_i), the i-th operands at i·stride elements from A,
// B, C and D (C and D bf16 with one layout; C may be D unless it is also A or B; beta = 0 never reads C); the
// combination runs in fp32 in cuBLASLt's epilogue, one rounding to bf16: one strided-batched call (Newton–Schulz
// over a layer's experts, each step's products and their polynomial without passes of their own).
void gemm_bf16_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                       int64_t lda, int64_t stride_a, const uint16_t *B, int64_t ldb, int64_t stride_b, float beta,
                       const uint16_t *C, uint16_t *D, int64_t ldc, int64_t stride_c, int64_t count);
// C[M,N] (row stride ldc) = A[M,K] · B[N,K]ᵀ + beta·C in bf16: the layout of every Linear (weights [out, in]).
void gemm_bf16_nt(float *C, int64_t ldc, const uint16_t *A, const uint16_t *B, int64_t M, int64_t N, int64_t K,
                  float beta);

} // namespace zaya::cuda
