// cpu::gemm(float) and cpu::gemm_bf16 as plain loops (double accumulation) for the CUDA test binaries: their CPU
// reference ops (zaya_cpu_ref in CMakeLists.txt: attention runs on cpu::gemm, and on gemm_bf16 over a bf16 cache)
// must not need oneDNN or OpenBLAS, which the GPU machine lacks. Every other binary links ops/cpu/gemm.cpp instead;
// the two never meet in one link.
#include "core/dtype.h"
#include "ops/cpu/gemm.h"

namespace zaya::cpu {

namespace {

inline double value(float x) { return x; }
inline double value(uint16_t x) { return bf16_to_f32(x); }

template <class T>
void plain(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const T *A, int64_t lda,
           const T *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k) {
                const T a = trans_a ? A[k * lda + i] : A[i * lda + k], b = trans_b ? B[j * ldb + k] : B[k * ldb + j];
                s += value(a) * value(b);
            }
            float &c = C[i * ldc + j];
            c = float(double(alpha) * s + (beta == 0.0f ? 0.0 : double(beta) * double(c)));
        }
}

} // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
          const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    plain(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
               int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    plain(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

} // namespace zaya::cpu
