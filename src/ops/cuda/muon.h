// Muon's Newton–Schulz orthogonalisation (optim/muon.h) on the GPU: torch's stock bf16 iteration, with exactly the
// rounding points of the CPU's Muon::newton_schulz_bf16 (optim/muon.cpp). X lives in bf16 between steps; every
// product takes bf16 operands and accumulates in fp32 (cuBLASLt), and the fused combine passes round to bf16 once:
//   X = bf16(U);  norm = max(bf16(√ΣX², the sum in double), bf16(eps));  X = bf16(X / norm)
//   `steps` times: A = bf16(X·Xᵀ);  P = bf16(c·(A·A) + b·A);  X = bf16(P·X + a·X)
//   result float(X)
// (c·(A·A) + b·A as fmaf(c, A·A, b·A) and P·X + a·X as fmaf(a, X, P·X), the contractions the CPU build makes.)
#pragma once
#include "ops/cuda/runtime.h"

#include <cstdint>

namespace zaya::cuda {

struct NewtonSchulzParams {
    float a, b, c; // the quintic's coefficients (MuonHyper::ns_coefficients)
    int steps;     // MuonHyper::ns_steps
    float eps;     // X is divided by max(‖X‖_F, eps) (both rounded to bf16)
};

// The workspace of the iteration, sized once for the largest batch of the largest matrices (as zaya::Muon); runs
// allocate nothing.
class NewtonSchulzBf16 {
  public:
    NewtonSchulzBf16(size_t max_numel, int64_t max_min_dim, int64_t max_count = 1);
    // The elements whose squares one block of the norm sums (a partial per chunk, then the chunks in order).
    static constexpr int64_t kNormChunk = int64_t(64) * 1024;
    // The device bytes the constructor allocates (a memory plan's figure: train/memory.cpp).
    static size_t bytes_needed(size_t max_numel, int64_t max_min_dim, int64_t max_count) {
        const size_t count = size_t(max_count), gram = size_t(max_min_dim) * size_t(max_min_dim) * count;
        const size_t chunks = (max_numel + size_t(kNormChunk) - 1) / size_t(kNormChunk) * count;
        return count * sizeof(float) + chunks * sizeof(double) + 2 * max_numel * count * 2 + 2 * gram * 2;
    }

    // x[count, rows, cols] (device, fp32) ← the bf16 iteration above, matrix by matrix, returned as fp32 (every value
    // a bf16). For rows > cols the iteration runs on Xᵀ, computed as A = XᵀX, X ← X·Pᵀ + a·X (muon.cpp) with the same
    // roundings. The `count` matrices run together: each GEMM is one strided-batched call with bf16 output, the
    // step's polynomial in its epilogue (a layer's experts cost what one matrix costs in launches; no elementwise
    // pass per step).
    void run(float *x, int64_t rows, int64_t cols, const NewtonSchulzParams &p, int64_t count = 1);

  private:
    size_t max_numel_;
    int64_t max_min_dim_, max_count_;
    DeviceArray<float> norm_;                     // the norms
    DeviceArray<double> norm_partials_;           // the norms' per-chunk sums of squares [count, chunks]
    DeviceArray<uint16_t> x16_[2], gram16_, poly16_; // the bf16 iterate X (this step's and the next), A and P
};

} // namespace zaya::cuda
