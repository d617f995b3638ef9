// Learning-rate schedules (spec §C.2 leaves the shape open: "WSD or cosine — a project choice"). Steps count
// from 1 (the first optimizer step); W = warmup_steps, T = total_steps, peak = the configured lr,
// floor = min_lr_ratio·peak.
//
//   warmup (all kinds):  step ≤ W  →  peak · step / W                       (step 1 is peak/W, never 0)
//   constant:            step > W  →  peak
//   cosine:              step > W  →  floor + (peak − floor) · ½(1 + cos(π·τ)),  τ = (step − W)/(T − W) clamped to [0,1]
//   wsd:                 D = round(decay_frac · T) decay steps, S = T − D;
//                        W < step ≤ S → peak;   step > S → peak + (floor − peak) · min(1, (step − S)/D)
//
// Both cosine and WSD reach the floor exactly at step T and hold it after.
#pragma once
#include <cstdint>
#include <string>

namespace zaya {

enum class ScheduleKind : uint8_t { Constant, Cosine, Wsd };

ScheduleKind schedule_kind_from_string(const std::string &name); // "constant" | "cosine" | "wsd"
const char *schedule_kind_name(ScheduleKind kind);

// The shape of a schedule; the peak lr lives in OptimConfig.
struct ScheduleConfig {
    ScheduleKind kind = ScheduleKind::Cosine;
    int64_t warmup_steps = 0;
    int64_t total_steps = 1;
    double min_lr_ratio = 0.1;
    double decay_frac = 0.2; // WSD only: fraction of total_steps spent decaying

    void validate() const; // throws zaya::Error naming the bad field
};

struct LrSchedule {
    ScheduleConfig config;
    double peak_lr = 0.0;

    LrSchedule(const ScheduleConfig &c, double peak); // validates
    double lr(int64_t step) const;                    // step >= 1
};

} // namespace zaya
