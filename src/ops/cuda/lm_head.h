// The LM head with its softmax cross-entropy on the GPU, in row chunks so the [N,V] logits never exist whole.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>

namespace zaya::cuda {

// With logits = x·Wᵀ + bias (x[N,D] the final hidden states, W[V,D] the head's weight, bias[V] or null for none)
// and targets[N] (< 0: ignored), returns the mean cross-entropy over the rows with a target (0 if none), writes
// dx[N,D] (=) and adds to dW[V,D] and dbias[V] (+=; dbias may be null) the gradients of loss_scale × that mean —
// cpu::cross_entropy_forward/backward around cpu::linear_forward/backward. Logits pass chunk_rows rows at a time
// through a device scratch of chunk_rows·V floats; dbias sums rows in order (deterministic). GEMMs in true fp32, or
// with `bf16` (and D, V multiples of 8, as the tensor cores need) on bf16 copies of x, W and each chunk's logit
// gradient, fp32 accumulation — autocast's treatment, as the CPU's bf16 matmuls; the softmax stays fp32.
double lm_head_cross_entropy(float *dx, float *dW, float *dbias, const float *x, const float *W, const float *bias,
                             const int32_t *targets, int64_t N, int64_t D, int64_t V, float loss_scale,
                             int64_t chunk_rows, bool bf16 = false);

// The forward alone (evaluation): losses[N] (device) = each row's cross-entropy (0 where target < 0), and returns
// their mean over the rows with a target (0 if none), as lm_head_cross_entropy; same chunking, no gradient.
double lm_head_loss(float *losses, const float *x, const float *W, const float *bias, const int32_t *targets,
                    int64_t N, int64_t D, int64_t V, int64_t chunk_rows, bool bf16 = false);

// The bf16 operand copies under bf16 matmuls, pieces of one scratch: W [V,D], a chunk's x rows [chunk,D] and its
// logit gradient [chunk,V].
inline std::array<size_t, 3> lm_head_bf16_pieces(int64_t chunk, int64_t D, int64_t V) {
    return {size_t(V * D) * 2, size_t(chunk * D) * 2, size_t(chunk * V) * 2};
}

// Rows per chunk that keep the logits scratch within `scratch_bytes` (at least one row).
inline int64_t lm_head_chunk_rows(int64_t V, size_t scratch_bytes = size_t(256) << 20) {
    const int64_t rows = int64_t(scratch_bytes / (sizeof(float) * size_t(V)));
    return rows > 0 ? rows : 1;
}

} // namespace zaya::cuda
