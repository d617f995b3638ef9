#include "optim/clip.h"

#include "optim/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace zaya {

double grad_sum_squares(const ParamLayout &layout, const real *grads, Backend &backend) {
    return GradSumSquares(layout)(grads, backend); // one pass (one device synchronisation) for every view
}

double clip_coefficient(double total_norm, double max_norm) {
    if (!std::isfinite(total_norm)) return 1.0;
    return std::min(1.0, max_norm / (total_norm + 1e-6));
}

void scale_grads(const ParamLayout &layout, real *grads, double coef, Backend &backend) {
    if (coef == 1.0) return;
    for (const ParamView &v : layout.views)
        if (v.trainable) backend.scale(grads + v.offset, v.numel, real(coef));
}

double clip_grad_norm(const ParamLayout &layout, real *grads, double max_norm) {
    const double norm = std::sqrt(grad_sum_squares(layout, grads));
    scale_grads(layout, grads, clip_coefficient(norm, max_norm));
    return norm;
}

} // namespace zaya
