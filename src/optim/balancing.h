// The balancing-bias controller (spec §B.1, [8B] eq. 5): once per optimizer step, for every MoE layer l,
//
//   p_l     = counts_l / Σ counts_l          top-1 choices over E + 1 classes (E = the skip slot) for the whole
//                                            global batch (all micro-batches, all data-parallel ranks)
//   error_l = p_l − target                   target = 1/E for each real expert, 0 for the skip slot
//   b_l     ← AdamW(b_l, error_l)            its own state; lr 1e-3, betas (0.9, 0.95), eps 1e-8, no weight decay
//
// An over-used expert has a positive error, so its bias falls and it wins fewer argmaxes. The skip slot takes
// part with target 0: unused, its error and its update are exactly 0 (bias stays at its init −1); used, its bias
// is pushed down. The biases are the non-trainable `model.layers.{l}.mlp.gate.balancing_biases` views of the
// parameter buffer, kept in fp32; no autograd is involved.
//
// Diagnostic ([8B] Fig. 4): normalised routing entropy H(p_real)/ln E per layer, p_real the distribution over the
// E real experts only (1 = perfectly balanced).
#pragma once
#include "core/real.h"
#include "model/config.h"
#include "model/params.h"
#include "optim/adamw.h"

#include <cstdint>
#include <vector>

namespace zaya {

struct BalancingConfig {
    double lr = 1e-3;
    AdamWHyper adam{0.9, 0.95, 1e-8};
    double weight_decay = 0.0;
};

// error = counts/total − target for the E + 1 classes of one layer; total must be > 0.
void balancing_error(const int64_t *counts, int64_t num_experts, real *error);

// H(p)/ln E of the real-expert choices (0·ln 0 = 0); 0 if no token chose a real expert, 1 when E = 1.
double normalised_routing_entropy(const int64_t *counts, int64_t num_experts);

class BalancingController {
  public:
    BalancingController(const ParamLayout &layout, const ZayaConfig &config, const BalancingConfig &bc = {});

    // `counts` is num_layers × (E + 1), layer-major. Updates every layer's biases in `params`, records entropies.
    void update(real *params, const int64_t *counts);

    int64_t num_layers() const { return int64_t(offsets_.size()); }
    int64_t num_classes() const { return num_experts_ + 1; }
    int64_t step_count() const { return step_; }
    void set_step_count(int64_t step) { step_ = step; }
    const std::vector<double> &entropy() const { return entropy_; } // from the last update
    real *exp_avg() const { return exp_avg_.data(); }               // num_layers × (E + 1), for checkpoints
    real *exp_avg_sq() const { return exp_avg_sq_.data(); }

  private:
    BalancingConfig config_;
    int64_t num_experts_;
    std::vector<size_t> offsets_; // of each layer's balancing_biases in the parameter buffer
    RealBuffer exp_avg_, exp_avg_sq_, error_;
    std::vector<double> entropy_;
    int64_t step_ = 0;
};

} // namespace zaya
