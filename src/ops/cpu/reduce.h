// Deterministic column reductions, used by every parameter gradient of a per-feature vector (biases, norm weights,
// scales). Work is split by columns, each column summed over rows in order: the result does not depend on the
// thread count.
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya::cpu {

// Runs f(i0, i1) over column ranges of [0, D) in parallel (chunks of 64 columns); each call owns its columns, so
// a loop over rows inside it accumulates in row order without races.
inline constexpr int64_t kColumnChunk = 64;
template <class F> void for_column_chunks(int64_t D, F &&f, bool parallel = true) {
    const int64_t chunks = (D + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t i0 = ch * kColumnChunk;
        f(i0, i0 + kColumnChunk < D ? i0 + kColumnChunk : D);
    }
}

// out[i] += Σ_n a[n·lda + i] · b[n·ldb + i]   (b null: Σ_n a[n·lda + i]),  i < D
void column_dot_add(real *out, const real *a, int64_t lda, const real *b, int64_t ldb, int64_t N, int64_t D);

} // namespace zaya::cpu
