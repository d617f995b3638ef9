// Deterministic Σx² in double: the same bits for any thread count (design decision 5), so gradient norms, clip
// factors and Muon's normalisation never depend on how many threads ran.
#pragma once
#include "core/real.h"

#include <algorithm>
#include <cstddef>

namespace zaya {

// The chunk length sum_squares cuts n elements into (a function of n only; the last chunk may be shorter). Every
// backend's sums of squares chunk this way, so a gradient held in parts (optim/grad_norm.h) is summed as one.
// Inline: the CUDA kernels' library (ops/cuda/optim.cu) chunks the same way without linking this one.
constexpr size_t sum_squares_chunk(size_t n) {
    constexpr size_t min_chunk = size_t(1) << 15, max_chunks = 1024;
    return std::max(min_chunk, (n + max_chunks - 1) / max_chunks);
}

// One chunk's partial: Σx² over x[0, n) in double, on the calling thread.
double sum_squares_partial(const real *x, size_t n);

// The chunks' partials (computed in parallel), then added in order.
double sum_squares(const real *x, size_t n);

} // namespace zaya
