#include "optim/sum_squares.h"

#include <algorithm>

namespace zaya {

namespace {
constexpr size_t kMaxChunks = 1024; // partials live on the stack: no allocation per call
static_assert((size_t(1) << 40) / sum_squares_chunk(size_t(1) << 40) <= kMaxChunks);
} // namespace

double sum_squares_partial(const real *x, size_t n) {
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
    return s;
}

double sum_squares(const real *x, size_t n) {
    if (n <= sum_squares_chunk(0)) return sum_squares_partial(x, n);
    const size_t chunk = sum_squares_chunk(n);
    const size_t chunks = (n + chunk - 1) / chunk;
    double partial[kMaxChunks];
#pragma omp parallel for schedule(static)
    for (size_t c = 0; c < chunks; ++c) {
        const size_t a = c * chunk;
        partial[c] = sum_squares_partial(x + a, std::min(chunk, n - a));
    }
    double s = 0.0;
    for (size_t c = 0; c < chunks; ++c) s += partial[c];
    return s;
}

} // namespace zaya
