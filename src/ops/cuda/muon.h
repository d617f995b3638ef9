// Muon's Newton–Schulz orthogonalisation (optim/muon.h) on the GPU, on bf16 GEMMs: every GEMM operand is rounded
// to bf16, products accumulate in fp32 (cuBLASLt), and the iterate X stays fp32 between steps (as do the b·A and
// a·X terms). torch runs the whole iteration in bf16; this keeps strictly more precision than that.
#pragma once
#include "ops/cuda/runtime.h"

#include <cstdint>

namespace zaya::cuda {

struct NewtonSchulzParams {
    float a, b, c; // the quintic's coefficients (MuonHyper::ns_coefficients)
    int steps;     // MuonHyper::ns_steps
    float eps;     // X is divided by max(‖X‖_F, eps)
};

// The workspace of the iteration, sized once for the largest matrix (as zaya::Muon); runs allocate nothing.
class NewtonSchulzBf16 {
  public:
    NewtonSchulzBf16(size_t max_numel, int64_t max_min_dim);

    // x[rows, cols] (device, fp32) ← X/max(‖X‖_F, eps), then `steps` times A = X·Xᵀ; P = b·A + c·A·A;
    // X ← a·X + P·X — for rows > cols the same on Xᵀ, computed as A = XᵀX, X ← a·X + X·Pᵀ (muon.cpp).
    void run(float *x, int64_t rows, int64_t cols, const NewtonSchulzParams &p);

  private:
    size_t max_numel_;
    int64_t max_min_dim_;
    DeviceArray<float> y_, gram_, poly_, norm_;
    DeviceArray<uint16_t> x16_, gram16_, poly16_;
};

} // namespace zaya::cuda
