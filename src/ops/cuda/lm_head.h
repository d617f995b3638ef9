// The LM head with its softmax cross-entropy on the GPU, in row chunks so the [N,V] logits never exist whole.
#pragma once
#include <cstddef>
#include <cstdint>

namespace zaya::cuda {

// With logits = x·Wᵀ (x[N,D] the final hidden states, W[V,D] the tied embedding) and targets[N] (< 0: ignored),
// returns the mean cross-entropy over the rows with a target (0 if none), writes dx[N,D] (=) and adds to dW[V,D]
// (+=) the gradients of loss_scale × that mean — cpu::cross_entropy_forward/backward around the two GEMMs of
// the head. Logits pass chunk_rows rows at a time through a device scratch of chunk_rows·V floats; all GEMMs fp32.
double lm_head_cross_entropy(float *dx, float *dW, const float *x, const float *W, const int32_t *targets, int64_t N,
                             int64_t D, int64_t V, float loss_scale, int64_t chunk_rows);

// Rows per chunk that keep the logits scratch within `scratch_bytes` (at least one row).
inline int64_t lm_head_chunk_rows(int64_t V, size_t scratch_bytes = size_t(256) << 20) {
    const int64_t rows = int64_t(scratch_bytes / (sizeof(float) * size_t(V)));
    return rows > 0 ? rows : 1;
}

} // namespace zaya::cuda
