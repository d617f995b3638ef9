#include "ops/cpu/gemm.h"

#include "core/error.h"

#include <algorithm>
#include <cblas.h>
#include <chrono>
#include <vector>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>

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

namespace {

// One oneDNN matmul primitive per (shape, strides, alpha, beta): creating one takes tens of microseconds, more than
// a small GEMM, so each thread keeps those it has used.
struct Bf16MatmulKey {
    bool ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    float alpha, beta;
    auto tie() const { return std::tie(ta, tb, M, N, K, lda, ldb, ldc, alpha, beta); }
    bool operator<(const Bf16MatmulKey &o) const { return tie() < o.tie(); }
};

struct Bf16Matmul {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c;
};

const dnnl::engine &cpu_engine() {
    static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
}

const Bf16Matmul &bf16_matmul(const Bf16MatmulKey &k) {
    thread_local std::map<Bf16MatmulKey, std::unique_ptr<Bf16Matmul>> cache;
    auto &slot = cache[k];
    if (slot) return *slot;
    using dt = dnnl::memory::data_type;
    using dims = dnnl::memory::dims;
    // Row-major operands described by strides: a transposed operand is the same memory read with swapped strides.
    const dnnl::memory::desc a({k.M, k.K}, dt::bf16, k.ta ? dims{1, k.lda} : dims{k.lda, 1});
    const dnnl::memory::desc b({k.K, k.N}, dt::bf16, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
    const dnnl::memory::desc c({k.M, k.N}, dt::f32, dims{k.ldc, 1});
    dnnl::primitive_attr attr;
    if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
    if (k.beta != 0.0f) {
        dnnl::post_ops ops;
        ops.append_sum(k.beta);
        attr.set_post_ops(ops);
    }
    try {
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
        slot = std::make_unique<Bf16Matmul>(Bf16Matmul{dnnl::matmul(pd), a, b, c});
    } catch (const dnnl::error &e) {
        fail("oneDNN bf16 matmul unavailable for M={} N={} K={}: {}", k.M, k.N, k.K, e.what());
    }
    return *slot;
}

} // namespace

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
               int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (M == 0 || N == 0) return;
    if (K == 0) {
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    const Bf16Matmul &mm = bf16_matmul({trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta});
    thread_local dnnl::stream stream(cpu_engine());
    const dnnl::engine &eng = cpu_engine();
    dnnl::memory a(mm.a, eng, const_cast<uint16_t *>(A)), b(mm.b, eng, const_cast<uint16_t *>(B)), c(mm.c, eng, C);
    mm.prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
    stream.wait();
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
