// Keeps bad steps out of the weights (ZAYA1's fault tolerance, spec §D.6). Before each update the trainer asks
// the guard about the step's loss and global gradient norm:
//
//   non-finite loss or norm                     → skip the update
//   x > mean + z·std over the last `window`     → skip (a spike), for x = loss and x = norm; one-sided, and only
//     accepted steps, once `min_history` exist     once there are min_history accepted steps to compare with
//
// Skipped steps do not enter the history. `rollback_after` consecutive skips tell the run loop to roll back to
// the last checkpoint and skip the data window that caused them (train/run.cpp). The history is part of the
// training state: it is saved in checkpoints so that a resumed run takes exactly the decisions a straight one does.
#pragma once
#include <cstdint>
#include <deque>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace zaya {

struct GuardConfig {
    double spike_z = 8.0;       // 0 disables spike detection (non-finite steps are always skipped)
    int64_t window = 100;       // accepted steps the mean and std are taken over
    int64_t min_history = 20;   // no spike verdicts before this many accepted steps
    int64_t rollback_after = 3; // consecutive skipped steps that ask for a rollback; 0 = never
};

// NoTargets: the step's batch had no learned target at all (loss masks, padding): nothing to learn from, so no
// update; not the guard's verdict and not counted towards a rollback.
enum class StepVerdict { Ok, NonFinite, LossSpike, GradNormSpike, NoTargets };
const char *verdict_name(StepVerdict v); // "ok", "non-finite loss or gradient norm", "loss spike", ...

class StepGuard {
  public:
    explicit StepGuard(const GuardConfig &c = {}) : config_(c) {}

    StepVerdict check(double loss, double grad_norm) const;
    // Records the verdict of the step just taken: accepted steps join the history, skipped ones count up.
    void record(StepVerdict v, double loss, double grad_norm);
    int64_t consecutive_skips() const { return consecutive_skips_; }
    bool wants_rollback() const { return config_.rollback_after > 0 && consecutive_skips_ >= config_.rollback_after; }
    void clear_skips() { consecutive_skips_ = 0; }

    nlohmann::json to_json() const;
    void restore(const nlohmann::json &j, const std::string &label); // errors name `label`

  private:
    GuardConfig config_;
    std::deque<double> losses_, norms_; // accepted steps, oldest first, at most `window`
    int64_t consecutive_skips_ = 0;
};

} // namespace zaya
