// Deterministic column reductions, used by every parameter gradient of a per-feature vector (biases, norm weights,
// scales). Work is split by columns, each column summed over rows in order: the result does not depend on the
// thread count.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// out[i] += Σ_n a[n·lda + i] · b[n·ldb + i]   (b null: Σ_n a[n·lda + i]),  i < D
void column_dot_add(real *out, const real *a, int64_t lda, const real *b, int64_t ldb, int64_t N, int64_t D);

} // namespace zaya::cpu
