// Row-major GEMMs through cuBLASLt with fp32 accumulation: bf16 or fp32 operands, fp32 C (bf16 C and D for the
// batched products of Newton–Schulz). The algorithm comes from an explicit heuristic query that states the
// operands' real alignment (cuBLASLt otherwise assumes 256-byte aligned pointers, which row offsets into a matrix
// need not be), made once per shape and alignment and kept.
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/ops.h"

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <mutex>

namespace zaya::cuda {

namespace {

#define ZAYA_CUBLAS_CHECK(expr) ZAYA_STATUS_CHECK(expr, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusString)

cublasLtHandle_t handle() {
    static cublasLtHandle_t h = [] {
        cublasLtHandle_t created = nullptr;
        ZAYA_CUBLAS_CHECK(cublasLtCreate(&created));
        return created;
    }();
    return h;
}

// Workspace for split-K and similar algorithms (runtime.h kGemmWorkspaceBytes). Allocated once, kept.
constexpr size_t kWorkspaceBytes = kGemmWorkspaceBytes;
void *workspace() {
    static void *w = device_alloc(kWorkspaceBytes);
    return w;
}

// The largest power of two (≤ 256, cuBLASLt's default assumption) that divides the address of every row and every
// matrix of a batch: the base address, ld and the batch stride in bytes (a row stride of 17 floats promises 4).
uint32_t alignment_of(const void *p, int64_t ld, int64_t stride, size_t element_bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p) | uintptr_t(ld) * element_bytes |
                        uintptr_t(stride) * element_bytes;
    uint32_t align = 256;
    while (align > 1 && a % align != 0) align /= 2;
    return align;
}

// A batch of `count` products at element strides (0 when count is 1).
struct Batch {
    int64_t count = 1, stride_a = 0, stride_b = 0, stride_c = 0;
};

// Sets a strided batch on a layout (nothing for a single product).
void set_batch(cublasLtMatrixLayout_t l, int64_t count, int64_t stride) {
    if (count == 1) return;
    const int32_t n = int32_t(count);
    ZAYA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof(n)));
    ZAYA_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
}

// Everything cuBLASLt needs for one GEMM shape besides the pointers and scalars: the operation, the three layouts
// and the algorithm its heuristic chose. Creating them and asking the heuristic costs tens of microseconds of host
// time, and a training step runs thousands of GEMMs of a few dozen shapes (Muon's Newton–Schulz alone ~3000), so
// each shape's plan is made once and kept.
struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t lb = nullptr, la = nullptr, lc = nullptr;
    cublasLtMatmulAlgo_t algo{};
    size_t workspace = 0;
};
// What a plan depends on: operand types, transposes, sizes, leading dimensions, the batch and the alignments.
using PlanKey = std::array<int64_t, 17>;

void destroy(const Plan &p) {
    cublasLtMatrixLayoutDestroy(p.lb), cublasLtMatrixLayoutDestroy(p.la), cublasLtMatrixLayoutDestroy(p.lc);
    cublasLtMatmulDescDestroy(p.op);
}

// D[M,N] = alpha·op(A)·op(B) + beta·C, all row-major, A/B of element type `ab`, C and D of type `cd` with one
// layout: a new plan for this shape.
Plan make_plan(cudaDataType_t ab, cudaDataType_t cd, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
               int64_t lda, int64_t ldb, int64_t ldc, const Batch &batch, uint32_t align_first, uint32_t align_second,
               uint32_t align_c) {
    // cuBLAS is column-major, and a row-major X[r,c] (leading dimension ld) is the column-major c×r matrix Xᵀ. So
    // row-major C = op(A)·op(B) is column-major Cᵀ[N×M] = op(B)ᵀ·op(A)ᵀ: cuBLAS's first operand is B, its second A.
    //   B as stored is column-major N×K when !trans_b (row-major [K,N]) — already op(B)ᵀ, so OP_N — and K×N when
    //   trans_b (row-major [N,K]), which OP_T turns into N×K. Likewise A: K×M when !trans_a (OP_N), M×K when
    //   trans_a (OP_T). The layouts below give each operand's stored column-major rows × cols and its ld.
    const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    Plan p;
    ZAYA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    ZAYA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)));
    ZAYA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)));
    ZAYA_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p.lb, ab, uint64_t(trans_b ? K : N), uint64_t(trans_b ? N : K), ldb));
    ZAYA_CUBLAS_CHECK(
        cublasLtMatrixLayoutCreate(&p.la, ab, uint64_t(trans_a ? M : K), uint64_t(trans_a ? K : M), lda));
    ZAYA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.lc, cd, uint64_t(N), uint64_t(M), ldc));
    set_batch(p.lb, batch.count, batch.stride_b);
    set_batch(p.la, batch.count, batch.stride_a);
    set_batch(p.lc, batch.count, batch.stride_c);

    cublasLtMatmulPreference_t pref = nullptr;
    ZAYA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = kWorkspaceBytes;
    ZAYA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof(ws)));
    ZAYA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                           &align_first, sizeof(align_first)));
    ZAYA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                           &align_second, sizeof(align_second)));
    ZAYA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                           &align_c, sizeof(align_c)));
    ZAYA_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                           &align_c, sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t best{};
    int found = 0;
    ZAYA_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle(), p.op, p.lb, p.la, p.lc, p.lc, pref, 1, &best, &found));
    cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
        destroy(p);
        fail("cuBLASLt has no algorithm for a {}x{}x{} GEMM (trans {} {}, alignments {} {} {})", M, N, K, trans_a,
             trans_b, align_second, align_first, align_c);
    }
    p.algo = best.algo, p.workspace = best.workspaceSize;
    return p;
}

// The plans made so far, by shape (their descriptors are host objects, freed at exit). Bounded: past kMaxPlans
// shapes (only varying sizes, e.g. prompts of every length, get there) the cache starts over. GEMMs come from one
// host thread, as the rest of the ops' scratch assumes; the lock only keeps the map itself consistent.
struct PlanCache {
    static constexpr size_t kMaxPlans = 4096;
    std::mutex mu;
    std::map<PlanKey, Plan> plans;
    ~PlanCache() {
        for (const auto &kp : plans) destroy(kp.second);
    }
    // make() builds the plan on a miss (a template: a std::function of the caller's lambda would allocate per GEMM).
    template <class Make> Plan get(const PlanKey &key, Make &&make) {
        std::lock_guard<std::mutex> lock(mu);
        if (auto it = plans.find(key); it != plans.end()) return it->second;
        if (plans.size() >= kMaxPlans) {
            synchronize(); // no GEMM still in flight uses a descriptor about to go
            for (const auto &kp : plans) destroy(kp.second);
            plans.clear();
        }
        return plans.emplace(key, make()).first->second;
    }
};

// D[M,N] = alpha·op(A)·op(B) + beta·C, all row-major, A/B of element type `ab`, C and D of type `cd` sharing ldc
// and the batch stride (C may be D); for each of batch.count products. The epilogue runs in fp32 before D is
// rounded to its type.
void lt_gemm(cudaDataType_t ab, cudaDataType_t cd, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
             float alpha, const void *A, int64_t lda, const void *B, int64_t ldb, float beta, const void *C, void *D,
             int64_t ldc, const Batch &batch = {}) {
    if (M == 0 || N == 0) return;
    ZAYA_ASSERT(K > 0 && M > 0 && N > 0);
    if (batch.count < 1 || batch.count > INT32_MAX) fail("gemm: batch of {} products", batch.count);
    const size_t ab_bytes = ab == CUDA_R_32F ? 4 : 2, cd_bytes = cd == CUDA_R_32F ? 4 : 2;
    const uint32_t align_first = alignment_of(B, ldb, batch.stride_b, ab_bytes),
                   align_second = alignment_of(A, lda, batch.stride_a, ab_bytes),
                   align_c = std::min(alignment_of(C, ldc, batch.stride_c, cd_bytes),
                                      alignment_of(D, ldc, batch.stride_c, cd_bytes));
    const PlanKey key{int64_t(ab),    int64_t(cd),    trans_a,     trans_b,        M,
                      N,              K,              lda,         ldb,            ldc,
                      batch.count,    batch.stride_a, batch.stride_b, batch.stride_c, align_first,
                      align_second,   align_c};
    static PlanCache cache;
    const Plan p = cache.get(key, [&] {
        return make_plan(ab, cd, trans_a, trans_b, M, N, K, lda, ldb, ldc, batch, align_first, align_second,
                         align_c);
    });
    ZAYA_CUBLAS_CHECK(cublasLtMatmul(handle(), p.op, &alpha, B, p.lb, A, p.la, &beta, C, p.lc, D, p.lc, &p.algo,
                                     workspace(), p.workspace, nullptr));
}

} // namespace

void gemm_f32(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
              const float *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    lt_gemm(CUDA_R_32F, CUDA_R_32F, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, C, ldc);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
               int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc) {
    lt_gemm(CUDA_R_16BF, CUDA_R_32F, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, C, ldc);
}

void gemm_bf16_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                       int64_t lda, int64_t stride_a, const uint16_t *B, int64_t ldb, int64_t stride_b, float beta,
                       const uint16_t *C, uint16_t *D, int64_t ldc, int64_t stride_c, int64_t count) {
    lt_gemm(CUDA_R_16BF, CUDA_R_16BF, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, D, ldc,
            Batch{count, stride_a, stride_b, stride_c});
}

void gemm_bf16_nt(float *C, int64_t ldc, const uint16_t *A, const uint16_t *B, int64_t M, int64_t N, int64_t K,
                  float beta) {
    gemm_bf16(false, true, M, N, K, 1.0f, A, K, B, K, beta, C, ldc);
}

} // namespace zaya::cuda
