#include "optim/optimizer.h"

#include "dist/comm.h"

#include <algorithm>
#include <chrono>
#include <numeric>

#include "core/profile.h"

#include "core/error.h"
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
    return {muon_momentum, nesterov, ns_coefficients, ns_steps, muon_eps, muon_lr_adjust};
}

AdamWHyper OptimConfig::adamw_hyper() const { return {beta1, beta2, eps}; }

Optimizer::Optimizer(const ParamLayout &layout, const ZayaConfig &config, const OptimConfig &oc)
    : Optimizer(layout, ParamGroups::classify(layout, config), oc) {}

Optimizer::Optimizer(const ParamLayout &layout, ParamGroups groups, const OptimConfig &oc)
    : layout_(layout), groups_(std::move(groups)), config_((oc.validate(), oc)), schedule_(oc.lr_schedule()),
      muon_(oc.muon_hyper(), groups_.max_muon_numel(), groups_.max_muon_min_dim()), adamw_(oc.adamw_hyper()),
      momentum_(RealBuffer::zeros(groups_.muon_state_size)), exp_avg_(RealBuffer::zeros(groups_.adamw_state_size)),
      exp_avg_sq_(RealBuffer::zeros(groups_.adamw_state_size)) {}

void Optimizer::set_communicator(std::shared_ptr<Communicator> comm) {
    comm_ = std::move(comm);
    muon_owner_.clear();
    if (!comm_ || comm_->size() <= 1) return;
    // Greedy: most expensive matrix first, to the least loaded rank (ties to the lower rank): deterministic.
    const int ranks = comm_->size();
    std::vector<size_t> order(groups_.muon.size());
    std::iota(order.begin(), order.end(), size_t(0));
    auto cost = [&](size_t k) {
        const MuonMatrix &m = groups_.muon[k];
        return double(m.rows) * double(m.cols) * double(std::min(m.rows, m.cols));
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost(a) > cost(b); });
    std::vector<double> load(size_t(ranks), 0.0);
    std::vector<size_t> elems(size_t(ranks), 0);
    muon_owner_.assign(groups_.muon.size(), 0);
    for (size_t k : order) {
        const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
        muon_owner_[k] = r;
        load[size_t(r)] += cost(k);
        elems[size_t(r)] += groups_.muon[k].numel();
    }
    exchange_ = RealBuffer::zeros(*std::max_element(elems.begin(), elems.end()));
}

StepStats Optimizer::step(real *params, real *grads, double lr) {
    ZAYA_PROFILE("optimizer_step");
    StepStats s;
    s.grad_norm = std::sqrt(grad_sum_squares(layout_, grads));
    if (!std::isfinite(s.grad_norm)) {
        s.skipped = true;
        return s;
    }
    if (config_.grad_clip > 0.0) s.clip_coef = clip_coefficient(s.grad_norm, config_.grad_clip);
    clip_and_update(params, grads, lr, s.grad_norm);
    return s;
}

void Optimizer::clip_and_update(real *params, real *grads, double lr, double grad_norm) {
    if (config_.grad_clip > 0.0) scale_grads(layout_, grads, clip_coefficient(grad_norm, config_.grad_clip));
    update(params, grads, lr);
}

void Optimizer::update(real *params, const real *grads, double lr) {
    ++step_;
    // Matrices one after another: each GEMM is already multithreaded, and one workspace serves them all.
    const int me = comm_ ? comm_->rank() : 0;
    for (size_t k = 0; k < groups_.muon.size(); ++k) {
        const MuonMatrix &m = groups_.muon[k];
        muon_.step(params + m.offset, grads + m.offset, momentum_.data() + m.state_offset, m.rows, m.cols, lr,
                   config_.weight_decay, muon_owner_.empty() || muon_owner_[k] == me);
    }
    comm_seconds_ = 0;
    if (comm_ && comm_->size() > 1) // each owner's matrices, packed, to everyone
        for (int r = 0; r < comm_->size(); ++r) {
            size_t n = 0;
            for (size_t k = 0; k < groups_.muon.size(); ++k)
                if (muon_owner_[k] == r) {
                    const MuonMatrix &m = groups_.muon[k];
                    if (r == me) std::copy_n(params + m.offset, m.numel(), exchange_.data() + n);
                    n += m.numel();
                }
            const auto t0 = std::chrono::steady_clock::now();
            comm_->broadcast(exchange_.data(), n, r);
            comm_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            if (r == me) continue;
            n = 0;
            for (size_t k = 0; k < groups_.muon.size(); ++k)
                if (muon_owner_[k] == r) {
                    const MuonMatrix &m = groups_.muon[k];
                    std::copy_n(exchange_.data() + n, m.numel(), params + m.offset);
                    n += m.numel();
                }
        }
    for (const AdamWRange &r : groups_.adamw)
        adamw_update(params + r.offset, grads + r.offset, exp_avg_.data() + r.state_offset,
                     exp_avg_sq_.data() + r.state_offset, r.numel, lr, r.decay ? config_.weight_decay : 0.0,
                     adamw_, step_);
}

} // namespace zaya
