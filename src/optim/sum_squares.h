// Deterministic Σx² in double: the same bits for any thread count (design decision 5), so gradient norms, clip
// factors and Muon's normalisation never depend on how many threads ran.
#pragma once
#include "core/real.h"

#include <cstddef>

namespace zaya {

// Fixed chunks (a function of n only) are summed in parallel, then the per-chunk partials in order.
double sum_squares(const real *x, size_t n);

} // namespace zaya
