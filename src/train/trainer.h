// One training process: model, optimizer, balancing controller, data loader and every buffer a step needs,
// all allocated once in the constructor (design decision 3). step() is one training step over the global batch
// (gradient accumulation over micro-batches) whose update the step guard may refuse; evaluate() is the mean
// validation loss.
//
// Two counters: iteration() counts training steps taken, skipped ones included — it names checkpoints and drives
// the run loop; the optimizer's step count counts updates — it drives the lr schedule and Adam's bias correction
// (as Megatron does when it skips a step).
//
// Fault injection for the fault-tolerance tests: ZAYA_FAULT_NAN_GRAD=3,7 makes the gradient of iterations 3 and 7
// NaN, ZAYA_FAULT_SPIKE_GRAD=... multiplies it by 1e4, ZAYA_FAULT_HANG=... hangs (for the supervisor's heartbeat);
// each fires once per process. Data parallel: ZAYA_FAULT_RANK=R keeps them to rank R (default: every rank). A NaN
// or spike goes into the gradient sums rank R holds (the ranges it owns), so it reaches the global gradient norm
// that every rank's step guard judges: all ranks skip the step together, as they must.
#pragma once
#include "data/dataset.h"
#include "dist/comm.h"
#include "dist/context_parallel.h"
#include "data/loader.h"
#include "model/activations.h"
#include "model/backward.h"
#include "ops/cpu/gemm.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"
#include "train/step_guard.h"
#include "train/train_config.h"

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace zaya {

struct StepResult {
    int64_t step = 0;          // 1-based number of the training step just taken (skipped ones count)
    double loss = 0;           // mean next-token loss over the global batch, before the update
    double grad_norm = 0;      // global L2 norm before clipping
    double lr = 0;
    double seconds = 0;        // wall time of the step
    double fwd_bwd_seconds = 0; // of which forward and backward, gradients summed and on the host
    double comm_seconds = 0;   // of which in collectives (data parallel)
    int64_t tokens = 0;        // tokens processed (inputs)
    int64_t learned = 0;       // targets the loss averages over (all ranks): fewer with loss masks or padding
    bool skipped = false;      // the guard refused the update (train/step_guard.h); `verdict` says why
    StepVerdict verdict = StepVerdict::Ok;
    std::vector<double> entropy; // per layer: normalised routing entropy of this step's choices
};

// What a step trained on (`zaya train --dump-batches`, for tools/train_reference.py): token rows and, when the
// batches carry them (loss masks, packed rows), each token's flag (data/loader.h TokenBatch::learned), in order.
struct BatchLog {
    std::vector<int32_t> tokens, learned;
    void clear() { tokens.clear(), learned.clear(); }
};

class Trainer {
  public:
    // `data` may be null for benchmarks, which then feed step_on() themselves (no evaluate()). With a
    // communicator of N ranks (data parallel, dist/comm.h), each rank takes its slice of every global batch
    // (`micro_batch` sequences per rank per forward/backward); routing counts and losses are summed over ranks,
    // and each gradient onto the rank that owns it, before the guard and the optimizer see them. The optimizer
    // state is sharded (ZeRO-1, optim/zero_shard.h), each rank updating its own parameters from its gradient
    // sums; parameters, the balancing controller and the guard stay replicated.
    // With tc.context_parallel = n > 1, the ranks form groups of n consecutive ranks that share each sequence
    // (dist/context_parallel.h); the groups take the slices of the global batch.
    Trainer(const TrainConfig &tc, Model model, std::shared_ptr<const DataSet> data,
            std::shared_ptr<Communicator> comm = nullptr);

    // One optimizer step on the loader's next batch. If `batch_log` is given, the step's token rows
    // (micro-batches in order, each row seq+1 tokens) are appended to it, and their flags if they carry any.
    StepResult step(BatchLog *batch_log = nullptr);
    // The same on micro-batches from `next_micro_batch(sequences)` (this rank's sequences).
    StepResult step_on(const std::function<TokenBatch(int64_t)> &next_micro_batch, BatchLog *batch_log = nullptr);
    // Forward and backward only, over one global batch (one process): the gradients stay where backward ran, the
    // model is not updated. For benchmarks of the device's share of a step. Returns the mean loss.
    double forward_backward_on(const std::function<TokenBatch(int64_t)> &next_micro_batch);
    double evaluate(); // mean loss over up to eval_batches validation batches (all if the split is smaller)

    // The host copy of the parameters (downloaded first when a device holds newer ones).
    const Model &model() const {
        sync_host_params();
        return model_;
    }
    const TrainConfig &config() const { return tc_; }
    Communicator &comm() const { return *comm_; }
    int64_t step_count() const { return iteration_; }
    double flops_per_step() const { return flops_per_step_; } // model FLOPs: forward + backward (≈ 3× forward)
    Backend &backend() { return backend_; }                   // where forward and backward run (phase timing)
    size_t memory_bytes() const;                              // params, grads, optimizer state, activations
    // The last step's gradients (one process on the CPU: the global batch's; nullptr on a device), as clipped.
    const real *host_gradients() const { return device_model_ ? nullptr : grads_.data(); }

    // The whole training state, for checkpoints (train/checkpoint.h).
    // The host copies, for checkpoints to read or restore: on a device, downloaded first and uploaded again before
    // the device next uses them.
    Model &mutable_model() {
        sync_host();
        return model_;
    }
    Optimizer &optimizer() {
        sync_host();
        return opt_;
    }
    // Brings the host copies of parameters and optimizer state up to date (a no-op on the CPU), for a reader that
    // kept pointers into them (the asynchronous checkpoint writer).
    void refresh_host_copies() { sync_host(); }
    BalancingController &balancing() { return balance_; }
    bool has_loader() const { return loader_.has_value(); }
    const TrainLoader &loader() const { return *loader_; }
    LoaderState loader_state() const { return loader_->state(); }
    void restore_loader(const LoaderState &s) { loader_->restore(s); }
    void set_step_count(int64_t iteration) { iteration_ = iteration; }
    StepGuard &guard() { return guard_; }
    // Called right before the parameters and optimizer state are modified (an asynchronous checkpoint writer
    // waits there until its snapshot of them is complete).
    void set_before_update(std::function<void()> f) { before_update_ = std::move(f); }

  private:
    void plan_gradient_buckets();
    // Starts summing the parts of the gradients over the ranks onto their owners (host or device, where backward
    // accumulates).
    void start_gradient_sum(const std::vector<Communicator::Part> &parts);
    // The model forward and backward run on: model_ itself on the CPU, else its device copy refreshed from model_.
    const Model &run_model();
    void sync_host_params() const; // device → host parameters, if the device's are newer
    void sync_host();              // the same for parameters and optimizer state; marks the device copies stale
    void update_balancing();
    size_t total_grads() const { return model_.layout.total; }
    int64_t *step_counts(); // where the step's routing counts accumulate: counts_, or on a device device_counts_
    // Forward and backward over this rank's micro-batches of a step: loss, tokens and routing counts into r, the
    // gradients accumulated where backward runs (returned: grads_ or the device's); data parallel on host
    // gradients starts summing each layer's as soon as it is final.
    real *accumulate(const std::function<TokenBatch(int64_t)> &next_micro_batch, BatchLog *batch_log,
                     StepResult &r);

    TrainConfig tc_;
    cpu::MatmulPrecision matmul_precision_; // of forward and backward (tc_.precision)
    Backend &backend_;                      // of forward and backward (tc_.device)
    std::shared_ptr<Communicator> comm_;
    mutable Model model_;                // the host copy (model() downloads into it when the device's is newer)
    int32_t doc_eos_ = -1;               // --doc-mask: the data's EOS id, where sequences are cut (else −1)
    std::optional<Model> device_model_;  // on a device backend: the parameters the step updates
    RealBuffer device_grads_;            // on a device backend: the gradients backward accumulates into
    std::vector<const ParamView *> bias_views_; // on a device backend: the balancing biases (host-updated)
    RealBuffer device_counts_;           // on a device backend: the step's routing counts ([L, E+1] int64)
    bool device_stale_ = false;              // the host copies may have changed since the device's were written
    mutable bool params_host_stale_ = false; // the device's parameters are newer than the host copy
    bool opt_host_stale_ = false;            // the device's optimizer state is newer than the host copy
    std::shared_ptr<const DataSet> data_;
    std::optional<TrainLoader> loader_;
    Optimizer opt_;
    BalancingController balance_;
    Activations acts_;
    GradScratch scratch_;
    RealBuffer grads_;
    std::vector<int64_t> counts_; // [L, E+1] routing choices of the current step
    // Data parallel: the gradient buckets summed over ranks onto their owners while the last micro-batch's backward
    // pass runs — one per layer (its parameters are contiguous in the layout), then what lies before and after the
    // layers; each cut into parts at ownership boundaries.
    std::vector<std::vector<Communicator::Part>> layer_parts_, other_parts_;
    // Context parallelism (tc.context_parallel > 1): this rank's group and the exchange the passes run through
    // (acts_.context). The data-parallel view then counts groups: data_rank() of data_ranks().
    std::unique_ptr<ContextParallel> context_;
    int data_rank() const { return comm_->rank() / int(tc_.context_parallel); }
    int data_ranks() const { return comm_->size() / int(tc_.context_parallel); }
    double flops_per_step_ = 0;
    int64_t iteration_ = 0;
    StepGuard guard_;
    std::function<void()> before_update_;
    std::set<int64_t> fault_nan_, fault_spike_, fault_hang_; // iterations with an injected fault not yet fired
};

} // namespace zaya
