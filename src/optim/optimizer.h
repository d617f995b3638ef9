// The training optimizer: Muon for the matrices, AdamW for the rest (param_groups.h), global-norm clipping
// (clip.h), one step count, hyper-parameters in OptimConfig. The spec publishes none of ZAYA1's optimizer
// hyper-parameters (§C.2); the defaults below are the Moonlight-like starting point it suggests.
//
// State (all fp32, design decision 6): the Muon momentum buffer (one EMA per Muon matrix, torch's
// `momentum_buffer`) and AdamW's exp_avg / exp_avg_sq, each a compact buffer indexed by the groups'
// `state_offset`s — optimizer memory is params + (2 × AdamW share), not 3 × params. With N data-parallel ranks
// the state is sharded (ZeRO-1, optim/zero_shard.h): each rank holds and updates only its share, about 1/N.
#pragma once
#include "core/real.h"
#include "model/config.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "optim/grad_norm.h"
#include "optim/muon.h"
#include "optim/param_groups.h"
#include "optim/schedule.h"
#include "optim/zero_shard.h"
#include "dist/comm.h"
#include "ops/backend.h"

#include <memory>

#include <array>
#include <cstdint>

namespace zaya {

struct OptimConfig {
    double lr = 3e-4;          // peak learning rate (Muon's before RMS matching, AdamW's as is)
    double weight_decay = 0.1; // Muon matrices and embedding / lm_head; nothing else (param_groups.h)
    double beta1 = 0.9, beta2 = 0.95, eps = 1e-8; // AdamW
    double muon_momentum = 0.95;
    bool nesterov = true;
    int ns_steps = 5;
    std::array<double, 3> ns_coefficients{3.4445, -4.7750, 2.0315};
    double muon_eps = 1e-7;
    MuonLrAdjust muon_lr_adjust = MuonLrAdjust::MatchRmsAdamW;
    NsPrecision ns_precision = NsPrecision::BF16; // torch's default; F32 for the fp32 goldens
    double grad_clip = 1.0; // max global L2 norm; <= 0 disables clipping
    ScheduleConfig schedule;

    void validate() const;
    MuonHyper muon_hyper() const;
    AdamWHyper adamw_hyper() const;
    LrSchedule lr_schedule() const { return LrSchedule(schedule, lr); }
};

struct StepStats {
    double grad_norm = 0.0; // before clipping
    double clip_coef = 1.0;
    bool skipped = false;   // non-finite gradient norm: nothing was updated
};

class Optimizer {
  public:
    // With a communicator of N > 1 ranks (dist/comm.h) the state is sharded ZeRO-1 style (optim/zero_shard.h):
    // each rank keeps the state of its Muon matrices and of its piece of the AdamW ranges, updates those
    // parameters, and then every rank's updated parameters are broadcast to all, so parameters stay replicated.
    // On a device backend (ops/backend.h) the state lives in its memory and params / grads passed in must too;
    // Muon and AdamW then run there, one matrix after another (Newton–Schulz in bf16), and data parallel
    // broadcasts the owners' parameters between the devices (Communicator::broadcast_blocks_device).
    Optimizer(const ParamLayout &layout, const ZayaConfig &config, const OptimConfig &oc,
              std::shared_ptr<class Communicator> comm = nullptr, Backend &backend = cpu_backend());
    // `groups` may be any subset of the layout's (tests); the gradient norm still covers the whole layout.
    Optimizer(const ParamLayout &layout, ParamGroups groups, const OptimConfig &oc,
              std::shared_ptr<class Communicator> comm = nullptr, Backend &backend = cpu_backend());

    // Clips the gradients in place (when grad_clip > 0), then update(). A non-finite gradient norm updates
    // nothing and leaves the step count unchanged (torch would write NaNs into the parameters). With N ranks
    // `grads` need hold the sums of this rank's owned ranges only (owners()).
    StepStats step(real *params, real *grads, double lr);
    // The same with the gradient norm already computed (and found finite) by the caller.
    void clip_and_update(real *params, real *grads, double lr, double grad_norm);
    // Muon on this rank's matrices, AdamW on its ranges, with learning rate `lr`, then the updated parameters
    // of every rank to every rank; increments the step count.
    void update(real *params, const real *grads, double lr);

    // The global L2 norm of the gradients (before clipping): of all of `grads`, or with N ranks of every rank's
    // owned ranges (the sums each received: Communicator::start_reduce_sum onto owners()), all-reduced.
    double grad_norm(const real *grads);
    // Data parallel: every rank's owned ranges of the parameter buffer, in offset order (ShardPlan::owners); empty
    // with one rank.
    const std::vector<Communicator::Part> &owners() const { return owners_; }

    double last_comm_seconds() const { return comm_seconds_; } // broadcasts of the last update

    int64_t step_count() const { return step_; }
    void set_step_count(int64_t step) { step_ = step; } // when resuming from a checkpoint
    double scheduled_lr() const { return schedule_.lr(step_ + 1); } // the lr of the next step

    const OptimConfig &config() const { return config_; }
    const ParamGroups &groups() const { return groups_; }        // every rank's: what the state means
    const ShardPlan &plan() const { return plan_; }              // which rank owns what
    const ParamGroups &local_groups() const { return local_; }   // this rank's share; indexes the buffers below
    int rank() const { return rank_; }
    // The state, on the host (checkpoints read and restore it here). On a device backend these are host copies:
    // state_to_host() fills them from the device, state_to_device() writes them back.
    real *muon_momentum() const { return host(momentum_).data(); }
    real *exp_avg() const { return host(exp_avg_).data(); }
    real *exp_avg_sq() const { return host(exp_avg_sq_).data(); }
    size_t state_bytes() const { return (momentum_.size + exp_avg_.size + exp_avg_sq_.size) * sizeof(real); }
    void state_to_host();
    void state_to_device();

  private:
    const RealBuffer &host(const RealBuffer &state) const;

    Backend *backend_;
    ParamLayout layout_;
    ParamGroups groups_;
    std::shared_ptr<class Communicator> comm_;
    int rank_ = 0;
    ShardPlan plan_;
    ParamGroups local_;
    std::vector<Communicator::Part> owners_; // data parallel: who owns (and receives the sum of) each gradient
    GradSumSquares grad_sum_squares_;
    std::vector<std::vector<Communicator::Block>> blocks_; // per rank: its updated parameters
    std::vector<Communicator::Block> own_blocks_;           // this rank's (adjacent ranges merged): clipped
    OptimConfig config_;
    LrSchedule schedule_;
    Muon muon_;
    std::vector<size_t> muon_order_; // local_.muon indices, largest first
    // On a device: runs of local_.muon matrices of one view and shape stored back to back (in parameters and
    // momentum), each updated by one batched backend call — a layer's experts together. (first index, count)
    std::vector<std::pair<size_t, int64_t>> device_muon_runs_;
    AdamWHyper adamw_;
    RealBuffer momentum_, exp_avg_, exp_avg_sq_;                // in the backend's memory
    RealBuffer host_momentum_, host_exp_avg_, host_exp_avg_sq_; // device backends: host copies for checkpoints
    double comm_seconds_ = 0;
    int64_t step_ = 0;
};

} // namespace zaya
