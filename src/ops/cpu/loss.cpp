#include "core/profile.h"
#include "ops/cpu/loss.h"

#include <algorithm>
#include <cmath>

namespace zaya::cpu {

double cross_entropy_forward(real *losses, const real *logits, const int32_t *targets, int64_t N, int64_t V) {
    ZAYA_PROFILE("cross_entropy");
    double total = 0.0;
    int64_t count = 0;
#pragma omp parallel for schedule(static) reduction(+ : total, count)
    for (int64_t n = 0; n < N; ++n) {
        if (targets[n] < 0) {
            losses[n] = 0.0f;
            continue;
        }
        const real *l = logits + n * V;
        real m = l[0];
        for (int64_t v = 1; v < V; ++v) m = std::max(m, l[v]);
        double sum = 0.0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v] - m));
        double loss = std::log(sum) + double(m) - double(l[targets[n]]);
        losses[n] = real(loss);
        total += loss;
        ++count;
    }
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
        real m = l[0];
        for (int64_t v = 1; v < V; ++v) m = std::max(m, l[v]);
        double sum = 0.0;
        for (int64_t v = 0; v < V; ++v) sum += std::exp(double(l[v] - m));
        const double inv = 1.0 / sum;
        for (int64_t v = 0; v < V; ++v) l[v] = real(double(scale) * std::exp(double(l[v] - m)) * inv);
        l[targets[n]] -= scale;
    }
}

} // namespace zaya::cpu
