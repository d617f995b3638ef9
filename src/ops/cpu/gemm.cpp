#include "ops/cpu/gemm.h"

#include "core/dtype.h"
#include "core/error.h"

#include <algorithm>
#include <atomic>
#include <omp.h>
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

namespace {

// Best-of-`reps` GFLOP/s of `run`, one n×n×n GEMM, after one warm-up call.
template <class Run> double best_square_gflops(int64_t n, int reps, Run run) {
    double best = 0;
    for (int r = 0; r <= reps; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        run();
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) best = std::max(best, 2.0 * double(n) * double(n) * double(n) / dt / 1e9);
    }
    return best;
}

} // namespace

double gemm_peak_gflops(GemmLib lib, int64_t n, int reps) {
    std::vector<float> A(size_t(n * n), 0.5f), B(size_t(n * n), 0.25f), C(size_t(n * n));
    return best_square_gflops(n, reps, [&] {
        gemm_with(lib, false, true, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
    });
}

namespace {

std::atomic<MatmulPrecision> g_matmul_precision{MatmulPrecision::F32};

// rows×cols of src (row stride ld) into dst packed (row stride cols), rounded to bf16; split over the threads
// when called outside a parallel region and large enough to pay for it.
void pack_bf16(uint16_t *dst, const float *src, int64_t rows, int64_t cols, int64_t ld) {
#pragma omp parallel for schedule(static) if (!omp_in_parallel() && rows * cols > (int64_t(1) << 16))
    for (int64_t r = 0; r < rows; ++r) f32_to_bf16_n(src + r * ld, dst + r * cols, size_t(cols));
}

// The reverse, exactly (every bf16 is an fp32): rows×cols bf16 of src (row stride ld) into dst packed, one thread.
void widen_bf16(float *dst, const uint16_t *src, int64_t rows, int64_t cols, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < cols; ++j) dst[r * cols + j] = bf16_to_f32(src[r * ld + j]);
}

} // namespace

MatmulPrecision matmul_precision() { return g_matmul_precision.load(std::memory_order_relaxed); }

MatmulPrecision matmul_precision_from_string(const std::string &s) {
    if (s == "fp32") return MatmulPrecision::F32;
    if (s == "bf16") return MatmulPrecision::BF16;
    fail("matmul precision must be 'fp32' or 'bf16', got '{}'", s);
}

const char *matmul_precision_name(MatmulPrecision p) { return p == MatmulPrecision::BF16 ? "bf16" : "fp32"; }

MatmulPrecisionScope::MatmulPrecisionScope(MatmulPrecision p) : saved_(g_matmul_precision.exchange(p)) {}
MatmulPrecisionScope::~MatmulPrecisionScope() { g_matmul_precision.store(saved_); }

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
          const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    if (matmul_precision() == MatmulPrecision::F32 || M == 0 || N == 0 || K == 0)
        return gemm_with(gemm_default_lib(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    // Operands packed as stored (a transposed operand stays transposed), per thread, grown to the largest seen.
    thread_local std::vector<uint16_t> a16, b16;
    const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    if (a16.size() < size_t(a_rows * a_cols)) a16.resize(size_t(a_rows * a_cols));
    if (b16.size() < size_t(b_rows * b_cols)) b16.resize(size_t(b_rows * b_cols));
    pack_bf16(a16.data(), A, a_rows, a_cols, lda);
    pack_bf16(b16.data(), B, b_rows, b_cols, ldb);
    gemm_bf16(trans_a, trans_b, M, N, K, alpha, a16.data(), a_cols, b16.data(), b_cols, beta, C, ldc);
}

namespace {

// One oneDNN matmul primitive per (N, K, strides, beta), each thread keeping those it has used. M is a
// runtime dimension: the experts' row counts change every step, and a primitive per M would pile up JIT kernels
// (runtime-M matmuls measured as fast here: 200–226 GFLOP/s on one thread, 234–454 on two).
struct Bf16MatmulKey {
    bool ta, tb;
    int64_t N, K, lda, ldb, ldc;
    float beta;
    auto tie() const { return std::tie(ta, tb, N, K, lda, ldb, ldc, beta); }
    bool operator<(const Bf16MatmulKey &o) const { return tie() < o.tie(); }
};

struct Bf16Matmul {
    dnnl::matmul prim;
    dnnl::memory::desc b;
};

using dims = dnnl::memory::dims;
using dt = dnnl::memory::data_type;
dnnl::memory::desc a_desc(int64_t M, int64_t K, bool ta, int64_t lda) {
    return dnnl::memory::desc({M, K}, dt::bf16, ta ? dims{1, lda} : dims{lda, 1});
}
dnnl::memory::desc c_desc(int64_t M, int64_t N, int64_t ldc) { return dnnl::memory::desc({M, N}, dt::f32, dims{ldc, 1}); }

const dnnl::engine &cpu_engine() {
    static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
    return eng;
}

} // namespace

// Whether oneDNN runs bf16 matmuls on this CPU (AVX-512 with BF16, AMX, or AVX2-VNNI-2): asked once, with a small
// primitive of the kind gemm_bf16 makes.
bool gemm_bf16_native() {
    static const bool ok = [] {
        try {
            const dnnl::memory::desc a({4, 16}, dt::bf16, dims{16, 1}), b({16, 8}, dt::bf16, dims{8, 1});
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c_desc(4, 8, 8)), cpu_engine());
            return true;
        } catch (const dnnl::error &) {
            return false;
        }
    }();
    return ok;
}

namespace {

const Bf16Matmul &bf16_matmul(const Bf16MatmulKey &k) {
    thread_local std::map<Bf16MatmulKey, std::unique_ptr<Bf16Matmul>> cache;
    auto &slot = cache[k];
    if (slot) return *slot;
    // Row-major operands described by strides: a transposed operand is the same memory read with swapped strides.
    const dnnl::memory::desc a = a_desc(DNNL_RUNTIME_DIM_VAL, k.K, k.ta, k.lda);
    const dnnl::memory::desc b({k.K, k.N}, dt::bf16, k.tb ? dims{1, k.ldb} : dims{k.ldb, 1});
    const dnnl::memory::desc c = c_desc(DNNL_RUNTIME_DIM_VAL, k.N, k.ldc);
    dnnl::primitive_attr attr;
    if (k.beta != 0.0f) {
        dnnl::post_ops ops;
        ops.append_sum(k.beta);
        attr.set_post_ops(ops);
    }
    try {
        const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), attr, cpu_engine());
        slot = std::make_unique<Bf16Matmul>(Bf16Matmul{dnnl::matmul(pd), b});
    } catch (const dnnl::error &e) {
        fail("oneDNN bf16 matmul unavailable for N={} K={}: {}", k.N, k.K, e.what());
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
    if (!gemm_bf16_native()) return gemm_bf16_widened(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    // C = A·B + beta·C, by oneDNN.
    auto matmul = [&](float *c_ptr, int64_t c_ld, float c_beta) {
        const Bf16Matmul &mm = bf16_matmul({trans_a, trans_b, N, K, lda, ldb, c_ld, c_beta});
        thread_local dnnl::stream stream(cpu_engine());
        const dnnl::engine &eng = cpu_engine();
        dnnl::memory a(a_desc(M, K, trans_a, lda), eng, const_cast<uint16_t *>(A));
        dnnl::memory b(mm.b, eng, const_cast<uint16_t *>(B)), c(c_desc(M, N, c_ld), eng, c_ptr);
        mm.prim.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
        stream.wait();
    };
    if (alpha == 1.0f) return matmul(C, ldc, beta);
    // alpha is applied here, to the fp32 products, as oneDNN's output scale would: oneDNN 2.6 runs a bf16 matmul
    // with output scales 3–9× slower than without (measured on an AMX Xeon, one thread: 184 against 21 µs at
    // 128×256×32, attention's Q·Kᵀ shape, which carries the softmax scale).
    if (beta == 0.0f) {
        matmul(C, ldc, 0.0f);
        for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) C[i * ldc + j] *= alpha;
        return;
    }
    thread_local std::vector<float> product; // per thread, grown to the largest seen
    if (product.size() < size_t(M * N)) product.resize(size_t(M * N));
    matmul(product.data(), N, 0.0f);
    for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = alpha * product[size_t(i * N + j)] + beta * C[i * ldc + j];
}

// Without it (an AVX2-only CPU: Zen 3, Haswell to Alder Lake): the bf16 operands widened to fp32, exactly, and an
// SGEMM. A product of two bf16 values is exact in fp32 and the sums are fp32, as in the bf16 kernels: the same
// matmul up to the order of the additions. The SGEMM runs on one thread wherever it is called: a multithreaded one
// may split K over the threads, and a matrix's result must not depend on whether it ran inside a parallel region
// (Muon's, a thread per matrix) or outside (determinism; the native bf16 matmul never splits K). So this path is
// slower than fp32 outside parallel regions: on such a CPU, --precision fp32 is the faster choice.
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    thread_local std::vector<float> a32, b32; // per thread, grown to the largest seen
    const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
    const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
    if (a32.size() < size_t(a_rows * a_cols)) a32.resize(size_t(a_rows * a_cols));
    if (b32.size() < size_t(b_rows * b_cols)) b32.resize(size_t(b_rows * b_cols));
    widen_bf16(a32.data(), A, a_rows, a_cols, lda);
    widen_bf16(b32.data(), B, b_rows, b_cols, ldb);
    struct OneThread { // this thread's OpenMP thread count (a per-thread setting), restored on the way out
        int saved = omp_get_max_threads();
        OneThread() { omp_set_num_threads(1); }
        ~OneThread() { omp_set_num_threads(saved); }
    } one;
    gemm_with(GemmLib::OneDNN, trans_a, trans_b, M, N, K, alpha, a32.data(), a_cols, b32.data(), b_cols, beta, C, ldc);
}

double matmul_peak_gflops(MatmulPrecision p, int64_t n, int reps) {
    if (p == MatmulPrecision::F32) return gemm_peak_gflops(gemm_default_lib(), n, reps);
    std::vector<uint16_t> A(size_t(n * n), f32_to_bf16(0.5f)), B(size_t(n * n), f32_to_bf16(0.25f));
    std::vector<float> C(size_t(n * n));
    return best_square_gflops(n, reps, [&] {
        gemm_bf16(false, true, n, n, n, 1.0f, A.data(), n, B.data(), n, 0.0f, C.data(), n);
    });
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
