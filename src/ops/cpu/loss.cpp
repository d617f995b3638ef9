#include "core/fastmath.h"
#include "core/profile.h"
#include "ops/cpu/loss.h"

#include <algorithm>
#include <cmath>

namespace zaya::cpu {

namespace {
real row_max(const real *l, int64_t V) {
    real m = l[0];
#pragma omp simd reduction(max : m)
    for (int64_t v = 1; v < V; ++v) m = l[v] > m ? l[v] : m; // (std::max here kept GCC 12 from vectorising)
    return m;
}
// Σ exp(l − m) in the element type: the terms lie in (0, 1] and V ≤ 2^24, so fp32 keeps ~1e-6 relative accuracy.
real row_sum_exp(const real *l, int64_t V, real m) {
    real sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t v = 0; v < V; ++v) sum += fast_exp(l[v] - m);
    return sum;
}
} // namespace

double cross_entropy_forward(real *losses, const real *logits, const int32_t *targets, int64_t N, int64_t V) {
    ZAYA_PROFILE("cross_entropy");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        if (targets[n] < 0) {
            losses[n] = 0.0f;
            continue;
        }
        const real *l = logits + n * V;
        const real m = row_max(l, V);
        losses[n] = real(std::log(double(row_sum_exp(l, V, m))) + double(m) - double(l[targets[n]]));
    }
    // The mean in row order, after the parallel part: the reported loss must not depend on the thread count.
    double total = 0.0;
    int64_t count = 0;
    for (int64_t n = 0; n < N; ++n)
        if (targets[n] >= 0) total += double(losses[n]), ++count;
    return count ? total / double(count) : 0.0;
}

void cross_entropy_backward(real *logits, const int32_t *targets, int64_t N, int64_t V, real scale) {
    ZAYA_PROFILE("cross_entropy_backward");
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        real *l = logits + n * V;
        if (targets[n] < 0) {
            std::fill(l, l + V, real(0));
            continue;
        }
        const real m = row_max(l, V);
        const real f = scale / row_sum_exp(l, V, m);
#pragma omp simd
        for (int64_t v = 0; v < V; ++v) l[v] = f * fast_exp(l[v] - m);
        l[targets[n]] -= scale;
    }
}

} // namespace zaya::cpu
