#include "train/step_guard.h"

#include "core/error.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace zaya {

namespace {

// Is x more than z standard deviations above the mean of `h`? Sums in a fixed order: decisions are deterministic.
bool spikes(const std::deque<double> &h, double x, double z) {
    double mean = 0;
    for (double v : h) mean += v;
    mean /= double(h.size());
    double var = 0;
    for (double v : h) var += (v - mean) * (v - mean);
    const double sd = std::sqrt(var / double(h.size()));
    return x > mean + z * sd && sd > 0;
}

} // namespace

const char *verdict_name(StepVerdict v) {
    switch (v) {
    case StepVerdict::Ok: return "ok";
    case StepVerdict::NonFinite: return "non-finite loss or gradient norm";
    case StepVerdict::LossSpike: return "loss spike";
    case StepVerdict::GradNormSpike: return "gradient-norm spike";
    case StepVerdict::NoTargets: return "no learned target in the batch";
    }
    return "?";
}

StepVerdict StepGuard::check(double loss, double grad_norm) const {
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) return StepVerdict::NonFinite;
    if (config_.spike_z <= 0 || int64_t(losses_.size()) < config_.min_history) return StepVerdict::Ok;
    if (spikes(losses_, loss, config_.spike_z)) return StepVerdict::LossSpike;
    if (spikes(norms_, grad_norm, config_.spike_z)) return StepVerdict::GradNormSpike;
    return StepVerdict::Ok;
}

void StepGuard::record(StepVerdict v, double loss, double grad_norm) {
    if (v != StepVerdict::Ok) {
        ++consecutive_skips_;
        return;
    }
    consecutive_skips_ = 0;
    losses_.push_back(loss);
    norms_.push_back(grad_norm);
    while (int64_t(losses_.size()) > config_.window) {
        losses_.pop_front();
        norms_.pop_front();
    }
}

nlohmann::json StepGuard::to_json() const {
    // Doubles are written with 17 significant digits by nlohmann::json: they read back bit-exactly.
    return {{"losses", losses_}, {"grad_norms", norms_}, {"consecutive_skips", consecutive_skips_}};
}

void StepGuard::restore(const nlohmann::json &j, const std::string &label) {
    try {
        std::deque<double> l = j.at("losses").get<std::deque<double>>();
        std::deque<double> n = j.at("grad_norms").get<std::deque<double>>();
        if (l.size() != n.size()) fail("{}: step guard history has {} losses but {} gradient norms", label, l.size(), n.size());
        while (int64_t(l.size()) > config_.window) { // a smaller --spike-window than the saving run's
            l.pop_front();
            n.pop_front();
        }
        losses_ = std::move(l);
        norms_ = std::move(n);
        consecutive_skips_ = j.at("consecutive_skips").get<int64_t>();
    } catch (const nlohmann::json::exception &e) {
        fail("{}: malformed step guard state: {}", label, e.what());
    }
}

} // namespace zaya
