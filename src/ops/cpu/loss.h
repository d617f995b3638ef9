// Softmax cross-entropy over the vocabulary.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// losses[N] = −log softmax(logits[n])[targets[n]]; rows with target < 0 are ignored (loss 0).
// Returns the mean over non-ignored rows (0 if none).
double cross_entropy_forward(real *losses, const real *logits, const int32_t *targets, int64_t N, int64_t V);

// In place: logits[n] ← scale·(softmax(logits[n]) − onehot(target)) for rows with target ≥ 0, else 0.
// With scale = 1/count this is the gradient of the mean cross-entropy.
void cross_entropy_backward(real *logits, const int32_t *targets, int64_t N, int64_t V, real scale);

} // namespace zaya::cpu
