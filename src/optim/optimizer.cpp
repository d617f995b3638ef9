#include "optim/optimizer.h"

#include "dist/comm.h"

#include <algorithm>
#include <omp.h>
#include <chrono>

#include "core/profile.h"

#include "core/error.h"
#include "core/parallel.h"
#include "optim/clip.h"

#include <cmath>
#include <utility>

namespace zaya {

void OptimConfig::validate() const {
    if (!(lr >= 0.0)) fail("optimizer: lr must be >= 0, got {}", lr);
    if (!(weight_decay >= 0.0)) fail("optimizer: weight_decay must be >= 0, got {}", weight_decay);
    if (!(beta1 >= 0.0 && beta1 < 1.0)) fail("optimizer: beta1 must be in [0, 1), got {}", beta1);
    if (!(beta2 >= 0.0 && beta2 < 1.0)) fail("optimizer: beta2 must be in [0, 1), got {}", beta2);
    if (!(eps >= 0.0)) fail("optimizer: eps must be >= 0, got {}", eps);
    if (!(muon_momentum >= 0.0 && muon_momentum < 1.0))
        fail("optimizer: muon_momentum must be in [0, 1), got {}", muon_momentum);
    if (ns_steps < 0 || ns_steps >= 100) fail("optimizer: ns_steps must be in [0, 100), got {}", ns_steps);
    if (!(muon_eps > 0.0)) fail("optimizer: muon_eps must be > 0, got {}", muon_eps);
    schedule.validate();
}

MuonHyper OptimConfig::muon_hyper() const {
    return {muon_momentum, nesterov, ns_coefficients, ns_steps, muon_eps, muon_lr_adjust, ns_precision};
}

AdamWHyper OptimConfig::adamw_hyper() const { return {beta1, beta2, eps}; }

Optimizer::Optimizer(const ParamLayout &layout, const ZayaConfig &config, const OptimConfig &oc,
                     std::shared_ptr<Communicator> comm, Backend &backend)
    : Optimizer(layout, ParamGroups::classify(layout, config), oc, std::move(comm), backend) {}

Optimizer::Optimizer(const ParamLayout &layout, ParamGroups groups, const OptimConfig &oc,
                     std::shared_ptr<Communicator> comm, Backend &backend)
    : backend_(&backend), layout_(layout), groups_(std::move(groups)), comm_(comm && comm->size() > 1 ? std::move(comm) : nullptr),
      rank_(comm_ ? comm_->rank() : 0), plan_(ShardPlan::make(groups_, comm_ ? comm_->size() : 1)),
      local_(plan_.local(groups_, rank_)), owners_(comm_ ? plan_.owners(groups_) : std::vector<Communicator::Part>{}),
      grad_sum_squares_(layout_, owners_, rank_), config_((oc.validate(), oc)), schedule_(oc.lr_schedule()),
      // On a device the backend runs Muon: no CPU workspaces.
      muon_(oc.muon_hyper(), local_.max_muon_numel(), local_.max_muon_min_dim(),
            backend.host_memory() ? omp_get_max_threads() : 0),
      adamw_(oc.adamw_hyper()), momentum_(backend.alloc(local_.muon_state_size)),
      exp_avg_(backend.alloc(local_.adamw_state_size)), exp_avg_sq_(backend.alloc(local_.adamw_state_size)) {
    if (!backend.host_memory()) {
        if (oc.ns_precision != NsPrecision::BF16)
            fail("optimizer: ns_precision fp32 runs on the CPU only; --device {} runs Newton-Schulz in bf16",
                 backend.name());
        host_momentum_ = RealBuffer::zeros(momentum_.size);
        host_exp_avg_ = RealBuffer::zeros(exp_avg_.size);
        host_exp_avg_sq_ = RealBuffer::zeros(exp_avg_sq_.size);
    }
    if (comm_)
        for (int r = 0; r < plan_.ranks; ++r) blocks_.push_back(plan_.param_blocks(groups_, r));
    own_blocks_ = plan_.param_blocks(groups_, rank_);
    // Largest matrices first, so that the threads finish together (ties keep layout order: a fixed order).
    muon_order_.resize(local_.muon.size());
    for (size_t i = 0; i < muon_order_.size(); ++i) muon_order_[i] = i;
    std::stable_sort(muon_order_.begin(), muon_order_.end(), [&](size_t a, size_t b) {
        return local_.muon[a].rows * local_.muon[a].cols > local_.muon[b].rows * local_.muon[b].cols;
    });
    device_muon_runs_ = local_.muon_runs();
}

const RealBuffer &Optimizer::host(const RealBuffer &state) const {
    if (backend_->host_memory()) return state;
    return &state == &momentum_ ? host_momentum_ : &state == &exp_avg_ ? host_exp_avg_ : host_exp_avg_sq_;
}

void Optimizer::state_to_host() {
    if (backend_->host_memory()) return;
    backend_->download(host_momentum_.data(), momentum_.data(), momentum_.size * sizeof(real));
    backend_->download(host_exp_avg_.data(), exp_avg_.data(), exp_avg_.size * sizeof(real));
    backend_->download(host_exp_avg_sq_.data(), exp_avg_sq_.data(), exp_avg_sq_.size * sizeof(real));
}

void Optimizer::state_to_device() {
    if (backend_->host_memory()) return;
    backend_->upload(momentum_.data(), host_momentum_.data(), momentum_.size * sizeof(real));
    backend_->upload(exp_avg_.data(), host_exp_avg_.data(), exp_avg_.size * sizeof(real));
    backend_->upload(exp_avg_sq_.data(), host_exp_avg_sq_.data(), exp_avg_sq_.size * sizeof(real));
}

StepStats Optimizer::step(real *params, real *grads, double lr) {
    ZAYA_PROFILE("optimizer_step");
    StepStats s;
    s.grad_norm = grad_norm(grads);
    if (!std::isfinite(s.grad_norm)) {
        s.skipped = true;
        return s;
    }
    if (config_.grad_clip > 0.0) s.clip_coef = clip_coefficient(s.grad_norm, config_.grad_clip);
    clip_and_update(params, grads, lr, s.grad_norm);
    return s;
}

double Optimizer::grad_norm(const real *grads) {
    return std::sqrt(grad_sum_squares_(grads, *backend_, comm_.get()));
}

void Optimizer::clip_and_update(real *params, real *grads, double lr, double grad_norm) {
    // Only the gradients this rank updates from: with N ranks the rest of the buffer is not summed (and not read).
    const double coef = config_.grad_clip > 0.0 ? clip_coefficient(grad_norm, config_.grad_clip) : 1.0;
    if (coef != 1.0)
        for (const Communicator::Block &b : own_blocks_) backend_->scale(grads + b.offset, b.count, real(coef));
    update(params, grads, lr);
}

void Optimizer::update(real *params, const real *grads, double lr) {
    ++step_;
    ZAYA_PROFILE("optimizer_update");
    if (!backend_->host_memory()) { // on the whole device, one run of same-shaped matrices after another
        backend_->phase("step.muon");
        for (const auto &[first, count] : device_muon_runs_) {
            const MuonMatrix &m = local_.muon[first];
            backend_->muon_step(params + m.offset, grads + m.offset, momentum_.data() + m.state_offset, count, m.rows,
                                m.cols, lr, config_.weight_decay, muon_.hyper());
        }
        backend_->phase("step.adamw");
        for (const AdamWRange &r : local_.adamw)
            backend_->adamw_update(params + r.offset, grads + r.offset, exp_avg_.data() + r.state_offset,
                                   exp_avg_sq_.data() + r.state_offset, r.numel, lr,
                                   r.decay ? config_.weight_decay : 0.0, adamw_, step_);
        comm_seconds_ = 0;
        if (!comm_) return;
        backend_->phase("step.param_broadcast");
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < plan_.ranks; ++r) comm_->broadcast_blocks_device(params, blocks_[size_t(r)], r, *backend_);
        comm_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return;
    }
    backend_->phase("step.optimizer");
    // Whole matrices per thread, each with its own workspace and single-threaded GEMMs: the matrices are small
    // (hundreds of rows), where one GEMM split over threads runs well below the per-thread rate. A matrix's result
    // does not depend on which thread computed it, so the step is deterministic.
    FirstError error;
#pragma omp parallel for schedule(dynamic, 1) num_threads(muon_.workspaces())
    for (size_t i = 0; i < muon_order_.size(); ++i) {
        error.run([&] {
            const MuonMatrix &m = local_.muon[muon_order_[i]];
            muon_.step(params + m.offset, grads + m.offset, momentum_.data() + m.state_offset, m.rows, m.cols, lr,
                       config_.weight_decay, omp_get_thread_num());
        });
    }
    error.rethrow();
    for (const AdamWRange &r : local_.adamw)
        adamw_update(params + r.offset, grads + r.offset, exp_avg_.data() + r.state_offset,
                     exp_avg_sq_.data() + r.state_offset, r.numel, lr, r.decay ? config_.weight_decay : 0.0,
                     adamw_, step_);
    comm_seconds_ = 0;
    if (!comm_) return;
    // Each owner's updated parameters to everyone, straight from and into the parameter buffer.
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < plan_.ranks; ++r) comm_->broadcast_blocks(params, blocks_[size_t(r)], r);
    comm_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace zaya
