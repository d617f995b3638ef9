// Row-major single-precision GEMM, C = alpha·op(A)·op(B) + beta·C, dispatched to the fastest library here.
// oneDNN's sgemm measured fastest on this machine (machine.md: 91–98% of FP32 peak); OpenBLAS is kept for
// comparison in `zaya bench gemm` and selectable with ZAYA_GEMM=openblas.
#pragma once
#include <cstdint>
#include <string>

namespace zaya::cpu {

enum class GemmLib : uint8_t { OneDNN, OpenBLAS };

// Operand precision of gemm(float): like torch.autocast(bfloat16) for the model's matmuls, BF16 rounds A and B to
// bf16 and accumulates in fp32 (gemm_bf16); C, and everything outside GEMMs, stays fp32. Process-wide (the GEMMs of
// OpenMP worker threads follow it); Trainer sets it around forward and backward only, never around the optimizer.
enum class MatmulPrecision : uint8_t { F32, BF16 };
MatmulPrecision matmul_precision();
MatmulPrecision matmul_precision_from_string(const std::string &s); // "fp32" | "bf16"; fails naming the value
const char *matmul_precision_name(MatmulPrecision p);
class MatmulPrecisionScope { // sets the precision for its lifetime, then restores the previous one
  public:
    explicit MatmulPrecisionScope(MatmulPrecision p);
    ~MatmulPrecisionScope();
    MatmulPrecisionScope(const MatmulPrecisionScope &) = delete;
    MatmulPrecisionScope &operator=(const MatmulPrecisionScope &) = delete;

  private:
    MatmulPrecision saved_;
};

// A is M×K (or K×M if trans_a), B is K×N (or N×K if trans_b), C is M×N; leading dimensions in elements.
// Follows matmul_precision(); gemm_with always runs fp32.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A, int64_t lda,
          const float *B, int64_t ldb, float beta, float *C, int64_t ldc);
void gemm_with(GemmLib lib, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float *A,
               int64_t lda, const float *B, int64_t ldb, float beta, float *C, int64_t ldc);

// bf16 GEMM with fp32 accumulation and output (oneDNN matmul; ~1.9× the fp32 rate on AVX512_BF16, machine.md): A and
// B hold raw bf16 bits, layouts as in gemm(). Primitives are cached per thread and shape, so repeated shapes cost one
// lookup. Inside an OpenMP parallel region it runs on the calling thread only. On a CPU where oneDNN has no bf16
// matmul (AVX2 only), the operands are widened to fp32 (exactly) for an SGEMM: the same products and fp32 sums.
void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
               int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc);
bool gemm_bf16_native(); // false: this CPU's bf16 GEMMs run widened to fp32 (no faster than fp32)
// That fallback itself, on any CPU (tests hold it against the native one where there is one).
void gemm_bf16_widened(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t *A,
                       int64_t lda, const uint16_t *B, int64_t ldb, float beta, float *C, int64_t ldc);

// fp64 GEMM (OpenBLAS dgemm), used by the double-precision build of the ops for finite-difference tests.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const double *A, int64_t lda,
          const double *B, int64_t ldb, double beta, double *C, int64_t ldc);

// Best-of-`reps` GFLOP/s of one n×n×n SGEMM (C = A·Bᵀ, the model's layout), after one warm-up call: the peak that
// throughput and MFU figures are reported against, measured in the same run.
double gemm_peak_gflops(GemmLib lib, int64_t n, int reps);

// The same for the GEMMs a precision runs: SGEMM of the default library, or the bf16 matmul (bf16 operands) —
// what MFU is reported against.
double matmul_peak_gflops(MatmulPrecision p, int64_t n, int reps);

GemmLib gemm_default_lib(); // from ZAYA_GEMM (onednn|openblas), default oneDNN
const char *gemm_lib_name(GemmLib lib);

} // namespace zaya::cpu
