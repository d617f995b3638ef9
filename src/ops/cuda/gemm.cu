// bf16 GEMM with fp32 accumulation through cuBLASLt, in the row-major "x · Wᵀ" layout of every Linear.
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/ops.h"

#include <cublasLt.h>

namespace zaya::cuda {

namespace {

#define ZAYA_CUBLAS_CHECK(expr)                                                                                \
    do {                                                                                                       \
        const cublasStatus_t zaya_st_ = (expr);                                                                \
        if (zaya_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
            ::zaya::cuda::fail_cuda(int(zaya_st_), cublasLtGetStatusString(zaya_st_), #expr, __FILE__, __LINE__); \
    } while (0)

cublasLtHandle_t handle() {
    static cublasLtHandle_t h = [] {
        cublasLtHandle_t created = nullptr;
        ZAYA_CUBLAS_CHECK(cublasLtCreate(&created));
        return created;
    }();
    return h;
}

} // namespace

void gemm_bf16_nt(float *C, int64_t ldc, const uint16_t *A, const uint16_t *B, int64_t M, int64_t N, int64_t K,
                  float beta) {
    if (M == 0 || N == 0) return;
    // Row-major C[M,N] = A·Bᵀ is column-major Cᵀ[N,M] = B·Aᵀ: cuBLAS's first operand is B (stored [N,K] row-major =
    // column-major K×N, transposed), its second is A (column-major K×M, as stored).
    cublasLtMatmulDesc_t op = nullptr;
    ZAYA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t t = CUBLAS_OP_T, nt = CUBLAS_OP_N;
    ZAYA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof(t)));
    ZAYA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nt, sizeof(nt)));
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
    ZAYA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, uint64_t(K), uint64_t(N), K));
    ZAYA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, uint64_t(K), uint64_t(M), K));
    ZAYA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, uint64_t(N), uint64_t(M), ldc));
    const float alpha = 1.0f;
    ZAYA_CUBLAS_CHECK(cublasLtMatmul(handle(), op, &alpha, B, la, A, lb, &beta, C, lc, C, lc, nullptr, nullptr, 0,
                                     nullptr));
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(op);
}

} // namespace zaya::cuda
