#include "model/init.h"

#include "core/rng.h"

#include <cmath>
#include <string>

namespace zaya {

void init_param(const ZayaConfig &c, const ParamLayout &layout, size_t i, real *p, uint64_t seed) {
    const ParamView &v = layout.views[i];
    Rng rng(seed, i);
    auto fill = [&](real x) { std::fill(p, p + v.numel, x); };
    auto ends = [&](const char *s) { return v.name.ends_with(s); };
    if (ends("balancing_biases")) {
        fill(0.0f);
        p[c.num_experts] = -1.0f;
    } else if (ends("qk_norm.temp")) {
        fill(1.0f);
    } else if (v.name.find("conv_qk") != std::string::npos) {
        // fan_in = in-channels per group × kernel size
        double fan_in = ends(".bias") ? 1.0 : double(v.shape[1] * v.shape[2]);
        if (ends(".bias")) {
            const ParamView &w = layout.views[i - 1]; // the conv weight precedes its bias
            fan_in = double(w.shape[1] * w.shape[2]);
        }
        double bound = 1.0 / std::sqrt(fan_in);
        for (size_t k = 0; k < v.numel; ++k) p[k] = real((2.0 * rng.uniform() - 1.0) * bound);
    } else if (ends("norm.weight") || ends("_scale") || ends("layernorm.weight")) {
        fill(1.0f);
    } else if (v.shape.size() == 1) {
        fill(0.0f); // biases
    } else {
        for (size_t k = 0; k < v.numel; ++k) p[k] = real(rng.normal() * c.initializer_range);
    }
}

void model_init_random(Model &m, uint64_t seed) {
    for (size_t i = 0; i < m.layout.views.size(); ++i)
        init_param(m.config, m.layout, i, m.params.data() + m.layout.views[i].offset, seed);
}

} // namespace zaya
