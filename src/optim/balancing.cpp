#include "optim/balancing.h"

#include "core/error.h"

#include <cmath>
#include <fmt/format.h>

namespace zaya {

void balancing_error(const int64_t *counts, int64_t num_experts, real *error) {
    int64_t total = 0;
    for (int64_t e = 0; e <= num_experts; ++e) {
        if (counts[e] < 0) fail("balancing: negative routing count {} for class {}", counts[e], e);
        total += counts[e];
    }
    if (total == 0) fail("balancing: no routed tokens in the batch");
    const double target = 1.0 / double(num_experts);
    for (int64_t e = 0; e <= num_experts; ++e)
        error[e] = real(double(counts[e]) / double(total) - (e < num_experts ? target : 0.0));
}

double normalised_routing_entropy(const int64_t *counts, int64_t num_experts) {
    if (num_experts <= 1) return 1.0;
    int64_t total = 0;
    for (int64_t e = 0; e < num_experts; ++e) total += counts[e];
    if (total == 0) return 0.0;
    double h = 0.0;
    for (int64_t e = 0; e < num_experts; ++e) {
        if (counts[e] == 0) continue;
        const double p = double(counts[e]) / double(total);
        h -= p * std::log(p);
    }
    return h / std::log(double(num_experts));
}

BalancingController::BalancingController(const ParamLayout &layout, const ZayaConfig &config,
                                         const BalancingConfig &bc)
    : config_(bc), num_experts_(config.num_experts) {
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
        const std::string name = fmt::format("model.layers.{}.mlp.gate.balancing_biases", l);
        const ParamView *v = layout.find(name);
        if (!v) fail("balancing: no parameter named '{}'", name);
        if (v->numel != size_t(num_classes())) fail("balancing: '{}' has {} values, expected {}", name, v->numel, num_classes());
        offsets_.push_back(v->offset);
    }
    const size_t n = offsets_.size() * size_t(num_classes());
    exp_avg_ = RealBuffer::zeros(n);
    exp_avg_sq_ = RealBuffer::zeros(n);
    error_ = RealBuffer::zeros(size_t(num_classes()));
    entropy_.assign(offsets_.size(), 0.0);
}

void BalancingController::update(real *params, const int64_t *counts) {
    const size_t k = size_t(num_classes());
    ++step_;
    for (size_t l = 0; l < offsets_.size(); ++l) {
        const int64_t *c = counts + l * k;
        balancing_error(c, num_experts_, error_.data());
        adamw_update(params + offsets_[l], error_.data(), exp_avg_.data() + l * k, exp_avg_sq_.data() + l * k, k,
                     config_.lr, config_.weight_decay, config_.adam, step_);
        entropy_[l] = normalised_routing_entropy(c, num_experts_);
    }
}

} // namespace zaya
