// cpu::gemm(float) as plain loops (double accumulation) for the CUDA test binaries: their CPU reference ops
// (zaya_cpu_ref in CMakeLists.txt: attention runs on cpu::gemm) must not need oneDNN or OpenBLAS, which the GPU
// machine lacks. Every other binary links ops/cpu/gemm.cpp instead; the two never meet in one link.
#include "ops/cpu/gemm.h"

namespace zaya::cpu {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
          const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
            double s = 0;
            for (int64_t k = 0; k < K; ++k)
                s += double(trans_a ? A[k * lda + i] : A[i * lda + k]) * double(trans_b ? B[j * ldb + k] : B[k * ldb + j]);
            float &c = C[i * ldc + j];
            c = float(double(alpha) * s + (beta == 0.0f ? 0.0 : double(beta) * double(c)));
        }
}

} // namespace zaya::cpu
