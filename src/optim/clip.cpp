#include "optim/clip.h"

#include "optim/sum_squares.h"

#include <algorithm>
#include <cmath>

namespace zaya {

double grad_sum_squares(const ParamLayout &layout, const real *grads) {
    double s = 0.0;
    for (const ParamView &v : layout.views)
        if (v.trainable) s += sum_squares(grads + v.offset, v.numel);
    return s;
}

double clip_coefficient(double total_norm, double max_norm) {
    if (!std::isfinite(total_norm)) return 1.0;
    return std::min(1.0, max_norm / (total_norm + 1e-6));
}

void scale_grads(const ParamLayout &layout, real *grads, double coef) {
    if (coef == 1.0) return;
    const real c = real(coef);
    for (const ParamView &v : layout.views) {
        if (!v.trainable) continue;
        real *g = grads + v.offset;
        const size_t n = v.numel;
#pragma omp parallel for simd if (n > (size_t(1) << 15))
        for (size_t i = 0; i < n; ++i) g[i] *= c;
    }
}

double clip_grad_norm(const ParamLayout &layout, real *grads, double max_norm) {
    const double norm = std::sqrt(grad_sum_squares(layout, grads));
    scale_grads(layout, grads, clip_coefficient(norm, max_norm));
    return norm;
}

} // namespace zaya
