#include "ops/cpu/gemm.h"

#include "core/error.h"

#include <algorithm>
#include <cblas.h>
#include <chrono>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.h>

namespace zaya::cpu {

GemmLib gemm_default_lib() {
    static const GemmLib lib = [] {
        const char *env = std::getenv("ZAYA_GEMM");
        if (env && std::strcmp(env, "openblas") == 0) return GemmLib::OpenBLAS;
        if (env && *env && std::strcmp(env, "onednn") != 0)
            fail("ZAYA_GEMM must be 'onednn' or 'openblas', got '{}'", env);
        return GemmLib::OneDNN;
    }();
    return lib;
}

const char *gemm_lib_name(GemmLib lib) { return lib == GemmLib::OneDNN ? "oneDNN" : "OpenBLAS"; }

void gemm_with(GemmLib lib, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) { // BLAS leaves C untouched when K = 0 only if beta = 1; make the contract explicit.
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    if (lib == GemmLib::OneDNN) {
        dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta,
                                      C, ldc);
        if (st != dnnl_success) fail("oneDNN sgemm failed (status {}) for M={} N={} K={}", int(st), M, N, K);
    } else {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
                    blasint(M), blasint(N), blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
    }
}

double gemm_peak_gflops(GemmLib lib, int64_t n, int reps) {
    std::vector<float> A(size_t(n * n), 0.5f), B(size_t(n * n), 0.25f), C(size_t(n * n));
    double best = 0;
    for (int r = 0; r <= reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        gemm_with(lib, false, true, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) best = std::max(best, 2.0 * double(n) * double(n) * double(n) / dt / 1e9);
    }
    return best;
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
          const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    gemm_with(gemm_default_lib(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda,
          const double *B, int64_t ldb, double beta, double *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0 ? 0.0 : beta * C[i * ldc + j];
        return;
    }
    cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, blasint(M),
                blasint(N), blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C, blasint(ldc));
}

} // namespace zaya::cpu
