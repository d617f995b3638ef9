#include "optim/schedule.h"

#include "core/error.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace zaya {

ScheduleKind schedule_kind_from_string(const std::string &name) {
    if (name == "constant") return ScheduleKind::Constant;
    if (name == "cosine") return ScheduleKind::Cosine;
    if (name == "wsd") return ScheduleKind::Wsd;
    fail("unknown lr schedule '{}' (known: constant, cosine, wsd)", name);
}

const char *schedule_kind_name(ScheduleKind kind) {
    switch (kind) {
    case ScheduleKind::Constant: return "constant";
    case ScheduleKind::Cosine: return "cosine";
    case ScheduleKind::Wsd: return "wsd";
    }
    return "?";
}

namespace {
int64_t wsd_decay_steps(const ScheduleConfig &c) { return int64_t(std::llround(c.decay_frac * double(c.total_steps))); }
} // namespace

void ScheduleConfig::validate() const {
    if (total_steps < 1) fail("schedule: total_steps must be >= 1, got {}", total_steps);
    if (warmup_steps < 0 || warmup_steps > total_steps)
        fail("schedule: warmup_steps must be in [0, total_steps={}], got {}", total_steps, warmup_steps);
    if (!(min_lr_ratio >= 0.0 && min_lr_ratio <= 1.0))
        fail("schedule: min_lr_ratio must be in [0, 1], got {}", min_lr_ratio);
    if (kind == ScheduleKind::Wsd) {
        if (!(decay_frac >= 0.0 && decay_frac <= 1.0)) fail("schedule: decay_frac must be in [0, 1], got {}", decay_frac);
        if (warmup_steps + wsd_decay_steps(*this) > total_steps)
            fail("schedule: warmup_steps ({}) + decay steps ({}) exceed total_steps ({})", warmup_steps,
                 wsd_decay_steps(*this), total_steps);
    }
}

LrSchedule::LrSchedule(const ScheduleConfig &c, double peak) : config(c), peak_lr(peak) {
    c.validate();
    if (!(peak >= 0.0)) fail("schedule: peak lr must be >= 0, got {}", peak);
}

double LrSchedule::lr(int64_t step) const {
    if (step < 1) fail("schedule: step must be >= 1, got {}", step);
    const ScheduleConfig &c = config;
    if (step <= c.warmup_steps) return peak_lr * double(step) / double(c.warmup_steps);
    const double floor = c.min_lr_ratio * peak_lr;
    switch (c.kind) {
    case ScheduleKind::Constant: return peak_lr;
    case ScheduleKind::Cosine: {
        const int64_t span = c.total_steps - c.warmup_steps;
        const double tau = span > 0 ? std::min(1.0, double(step - c.warmup_steps) / double(span)) : 1.0;
        return floor + (peak_lr - floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * tau));
    }
    case ScheduleKind::Wsd: {
        const int64_t decay = wsd_decay_steps(c), start = c.total_steps - decay;
        if (decay == 0 || step <= start) return peak_lr; // decay_frac 0: warmup + constant
        const double t = std::min(1.0, double(step - start) / double(decay));
        return peak_lr + (floor - peak_lr) * t;
    }
    }
    return peak_lr;
}

} // namespace zaya
