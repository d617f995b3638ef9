// One training process: model, optimizer, balancing controller, data loader and every buffer a step needs,
// all allocated once in the constructor (design decision 3). step() is one optimizer step over the global batch
// (gradient accumulation over micro-batches); evaluate() is the mean validation loss.
#pragma once
#include "data/dataset.h"
#include "data/loader.h"
#include "model/activations.h"
#include "model/backward.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"
#include "train/train_config.h"

#include <functional>
#include <memory>
#include <optional>
#include <vector>

namespace zaya {

struct StepResult {
    int64_t step = 0;          // 1-based number of the optimizer step just taken
    double loss = 0;           // mean next-token loss over the global batch, before the update
    double grad_norm = 0;      // global L2 norm before clipping
    double lr = 0;
    double seconds = 0;        // wall time of the step
    int64_t tokens = 0;        // tokens processed (inputs)
    bool skipped = false;      // non-finite gradient: no update
    std::vector<double> entropy; // per layer: normalised routing entropy of this step's choices
};

class Trainer {
  public:
    // `data` may be null for benchmarks, which then feed step_on() themselves (no evaluate()).
    Trainer(const TrainConfig &tc, Model model, std::shared_ptr<const DataSet> data);

    // One optimizer step on the loader's next batch. If `batch_log` is given, the step's token rows
    // (micro-batches in order, each row seq+1 tokens) are appended to it.
    StepResult step(std::vector<int32_t> *batch_log = nullptr);
    // The same on micro-batches from `next_micro_batch(sequences)`.
    StepResult step_on(const std::function<TokenBatch(int64_t)> &next_micro_batch,
                       std::vector<int32_t> *batch_log = nullptr);
    double evaluate(); // mean loss over up to eval_batches validation batches (all if the split is smaller)

    const Model &model() const { return model_; }
    const TrainConfig &config() const { return tc_; }
    int64_t step_count() const { return opt_.step_count(); }
    double flops_per_step() const { return flops_per_step_; } // model FLOPs: forward + backward (≈ 3× forward)
    size_t memory_bytes() const;                              // params, grads, optimizer state, activations

    // The whole training state, for checkpoints (train/checkpoint.h).
    Model &mutable_model() { return model_; }
    Optimizer &optimizer() { return opt_; }
    BalancingController &balancing() { return balance_; }
    bool has_loader() const { return loader_.has_value(); }
    LoaderState loader_state() const { return loader_->state(); }
    void restore_loader(const LoaderState &s) { loader_->restore(s); }

  private:
    TrainConfig tc_;
    Model model_;
    std::shared_ptr<const DataSet> data_;
    std::optional<TrainLoader> loader_;
    Optimizer opt_;
    BalancingController balance_;
    Activations acts_;
    GradScratch scratch_;
    RealBuffer grads_;
    std::vector<int64_t> counts_; // [L, E+1] routing choices of the current step
    double flops_per_step_ = 0;
};

} // namespace zaya
