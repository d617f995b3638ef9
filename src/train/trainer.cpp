#include "train/trainer.h"

#include "train/evaluate.h"

#include "core/error.h"
#include "core/profile.h"
#include "ops/cpu/gemm.h"
#include "model/flops.h"
#include "model/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

namespace zaya {

namespace {
BalancingConfig balancing_config(const TrainConfig &tc) {
    BalancingConfig b;
    b.lr = tc.balance_lr;
    return b;
}

// Tokens of a sequence one forward pass holds, and sequences of a micro-batch: with context parallelism, this rank's
// two parts of each (model/chunk_exchange.h).
int64_t pass_seq(const TrainConfig &tc) { return tc.seq / std::max<int64_t>(1, tc.context_parallel); }
int64_t pass_seqs(const TrainConfig &tc) {
    return TokenBatch::max_sequences(tc.micro(), tc.seq, tc.doc_mask, tc.context_parallel);
}

GuardConfig guard_config(const TrainConfig &tc) {
    GuardConfig g;
    g.spike_z = tc.spike_z;
    g.window = tc.spike_window;
    g.rollback_after = tc.spike_rollback;
    return g;
}

// "3,7,12" from an environment variable (fault injection); empty if unset.
std::set<int64_t> env_iterations(const char *name) {
    std::set<int64_t> out;
    const char *v = std::getenv(name);
    if (!v) return out;
    std::stringstream ss(v);
    std::string item;
    while (std::getline(ss, item, ',')) {
        try {
            out.insert(std::stoll(item));
        } catch (const std::exception &) {
            fail("environment variable {}: '{}' is not a list of step numbers", name, v);
        }
    }
    return out;
}
} // namespace

Trainer::Trainer(const TrainConfig &tc, Model model, std::shared_ptr<const DataSet> data,
                 std::shared_ptr<Communicator> comm)
    : tc_(tc), matmul_precision_(cpu::matmul_precision_from_string(tc.precision)),
      backend_(backend_named(tc.device)), comm_(comm ? std::move(comm) : std::make_shared<SingleProcess>()), model_(std::move(model)), data_(std::move(data)), opt_(model_.layout, model_.config, tc.optim_config(), comm_, backend_),
      balance_(model_.layout, model_.config, balancing_config(tc)),
      // A device with bf16 matmuls: the linears' inputs get bf16 copies where they are produced (no conversions).
      acts_(Activations::plan(model_.config, tc.micro() * pass_seq(tc), pass_seqs(tc), /*keep_all_layers=*/true,
                              backend_,
                              !backend_.host_memory() && matmul_precision_ == cpu::MatmulPrecision::BF16)),
      scratch_(GradScratch::plan(model_.config, tc.micro() * pass_seq(tc), pass_seqs(tc), backend_)),
      grads_(RealBuffer::zeros(backend_.host_memory() ? model_.layout.total : 0)),
      counts_(size_t(model_.config.num_hidden_layers * model_.config.router_classes()), 0), guard_(guard_config(tc)),
      fault_nan_(env_iterations("ZAYA_FAULT_NAN_GRAD")), fault_spike_(env_iterations("ZAYA_FAULT_SPIKE_GRAD")),
      fault_hang_(env_iterations("ZAYA_FAULT_HANG")) {
    if (tc.context_parallel > 1) {
        const int n = int(tc.context_parallel);
        ContextParallel::check_chunks(model_.config, tc.seq, n);
        context_ = std::make_unique<ContextParallel>(ContextParallel::group_of("train", *comm_, n), model_.config,
                                                     tc.seq, tc.micro(), /*keep_all_layers=*/true);
        acts_.context = context_.get();
    }
    if (tc.batch % (tc.micro() * data_ranks()) != 0)
        fail("train: batch ({}) must be a multiple of micro_batch ({}) × ranks ({}){}", tc.batch, tc.micro(),
             data_ranks(), tc.context_parallel > 1 ? " (groups of --context-parallel ranks)" : "");
    if (data_) loader_.emplace(data_, tc.seq, tc.seed, data_rank(), data_ranks(), tc.row_layout().packing);
    if (tc.doc_mask) {
        if (!data_) fail("train: doc_mask needs a data set (its EOS id)");
        doc_eos_ = tc.row_layout().cut_eos(*data_);
    }
    if (const char *r = std::getenv("ZAYA_FAULT_RANK"); r && std::atoi(r) != comm_->rank()) {
        fault_nan_.clear(); // the injected faults are for another rank
        fault_spike_.clear();
        fault_hang_.clear();
    }
    if (data_ && int64_t(data_->manifest().vocab_size) > model_.config.vocab_size)
        fail("data in '{}' has vocab_size {} but the model's is {}", data_->dir(), data_->manifest().vocab_size,
             model_.config.vocab_size);
    if (comm_->size() > 1) plan_gradient_buckets();
    if (!backend_.host_memory()) { // parameters, gradients and optimizer state live on the device
        device_model_.emplace(model_on(model_, backend_));
        device_grads_ = backend_.alloc(model_.layout.total);
        device_counts_ = backend_.alloc(2 * counts_.size()); // int64 counts: two reals each (alloc is 64-byte aligned)
        backend_.set_matmul_precision(matmul_precision_);
        for (const ParamView &v : model_.layout.views)
            if (!v.trainable) bias_views_.push_back(&v);
    }
    flops_per_step_ = 3.0 * forward_flops(model_.config, std::vector<int64_t>(size_t(tc.batch), tc.seq));
}

void Trainer::plan_gradient_buckets() {
    const ParamLayout &layout = model_.layout;
    const int64_t L = model_.config.num_hidden_layers;
    std::vector<std::pair<size_t, size_t>> layers(size_t(L), {layout.total, 0}); // [begin, end) of each layer
    for (const ParamView &v : layout.views) {
        int64_t l = -1;
        if (std::sscanf(v.name.c_str(), "model.layers.%ld.", &l) != 1 || l < 0 || l >= L) continue;
        auto &[b, e] = layers[size_t(l)];
        b = std::min(b, v.offset);
        e = std::max(e, v.offset + v.numel);
    }
    // Each layer's bucket must hold its own parameters only: otherwise it would be summed while another layer (or
    // the embedding, final norm, head) still writes into it.
    for (const ParamView &v : layout.views)
        for (int64_t l = 0; l < L; ++l) {
            const auto [b, e] = layers[size_t(l)];
            if (v.offset < e && v.offset + v.numel > b && v.name.rfind(fmt::format("model.layers.{}.", l), 0) != 0)
                fail("train: '{}' lies among layer {}'s parameters; gradient buckets need each layer contiguous",
                     v.name, l);
        }
    // Each bucket's gradients are summed onto their owners (ZeRO-1: the rank whose optimizer state they update),
    // cut at ownership boundaries; what nobody owns (alignment gaps, balancing biases) is not summed at all.
    const std::vector<Communicator::Part> &owners = opt_.owners();
    layer_parts_.clear();
    for (const auto &[b, e] : layers) layer_parts_.push_back(parts_within(owners, b, e));
    // Everything else, summed after the backward pass: what lies outside the layers' ranges.
    std::vector<std::pair<size_t, size_t>> sorted = layers;
    std::sort(sorted.begin(), sorted.end());
    other_parts_.clear();
    size_t at = 0;
    for (const auto &[b, e] : sorted) {
        if (b > at) other_parts_.push_back(parts_within(owners, at, b));
        at = std::max(at, e);
    }
    if (at < layout.total) other_parts_.push_back(parts_within(owners, at, layout.total));
}

void Trainer::start_gradient_sum(const std::vector<Communicator::Part> &parts) {
    if (device_model_) comm_->start_reduce_sum_device(device_grads_.data(), parts, backend_);
    else comm_->start_reduce_sum(grads_.data(), parts);
}

const Model &Trainer::run_model() {
    if (!device_model_) return model_;
    if (device_stale_) { // the host copies were handed out (checkpoint restore, tests): they may hold news
        upload_params(*device_model_, model_, backend_);
        opt_.state_to_device();
        device_stale_ = false;
    }
    return *device_model_;
}

void Trainer::sync_host_params() const {
    if (!params_host_stale_) return;
    backend_.download(model_.params.data(), device_model_->params.data(), model_.layout.total * sizeof(real));
    params_host_stale_ = false;
}

void Trainer::sync_host() {
    sync_host_params();
    if (opt_host_stale_) opt_.state_to_host();
    opt_host_stale_ = false;
    if (device_model_) device_stale_ = true; // whoever asked may write them
}

// The balancing controller runs on the host (a few numbers per layer). On a device only the biases travel: down
// before the update, back up after it.
void Trainer::update_balancing() {
    if (!device_model_) return balance_.update(model_.params.data(), counts_.data());
    for (const ParamView *v : bias_views_)
        backend_.download(model_.params.data() + v->offset, device_model_->params.data() + v->offset,
                          v->numel * sizeof(real));
    balance_.update(model_.params.data(), counts_.data());
    for (const ParamView *v : bias_views_)
        backend_.upload(device_model_->params.data() + v->offset, model_.params.data() + v->offset,
                        v->numel * sizeof(real));
}

int64_t *Trainer::step_counts() {
    return device_model_ ? reinterpret_cast<int64_t *>(device_counts_.data()) : counts_.data();
}

size_t Trainer::memory_bytes() const {
    return (model_.params.size + grads_.size + device_grads_.size) * sizeof(real) + acts_.bytes() + scratch_.buf.size * sizeof(real) +
           opt_.state_bytes() + (context_ ? context_->bytes() : 0);
}

StepResult Trainer::step(BatchLog *batch_log) {
    if (!loader_) fail("Trainer::step needs a data set");
    const int64_t ranks = data_ranks();
    return step_on([this, ranks](int64_t n) { return loader_->next_batch(n * ranks); }, batch_log);
}

real *Trainer::accumulate(const std::function<TokenBatch(int64_t)> &next_micro_batch, BatchLog *batch_log,
                          StepResult &r) {
    const ZayaConfig &c = model_.config;
    const int64_t ranks = comm_->size(), micro = tc_.micro(), accum = tc_.batch / (micro * data_ranks());
    const int64_t K = c.router_classes();
    RealBuffer &gbuf = device_model_ ? device_grads_ : grads_; // where backward accumulates
    real *grads = gbuf.data();
    backend_.zero(grads, gbuf.size * sizeof(real));
    int64_t *counts = step_counts(); // [L, K], where the routing choices are
    backend_.zero(counts, counts_.size() * sizeof(int64_t));
    const Model &m = run_model();
    const cpu::MatmulPrecisionScope precision(matmul_precision_); // forward + backward only
    const WeightsUnchanged frozen(backend_); // until the optimizer: a GPU converts each matrix to bf16 once per step
    // The step's loss is the mean over the global batch's learned targets, each micro-batch weighted by its share of
    // them: with loss masks (fine-tuning data) micro-batches and ranks hold unequal counts, and a mean of their means
    // would weigh a token of a short answer more than one of a long one. Without masks every share is
    // 1/(accum·ranks), exactly as a mean of means.
    std::vector<TokenBatch> micro_batches;
    std::vector<std::vector<int32_t>> micro_targets; // each micro-batch's targets, −1 where not learned
    std::vector<int64_t> micro_learned;              // and how many are learned
    std::vector<char> micro_empty; // no input in any row: nothing to run (with context parallelism: on any rank)
    double learned = 0;
    for (int64_t a = 0; a < accum; ++a) {
        TokenBatch rows = next_micro_batch(micro);
        if (batch_log) { // whole rows, with context parallelism too
            batch_log->tokens.insert(batch_log->tokens.end(), rows.tokens.begin(), rows.tokens.end());
            batch_log->learned.insert(batch_log->learned.end(), rows.learned.begin(), rows.learned.end());
        }
        micro_empty.push_back(!rows.any_inputs()); // whole rows: every rank of a group judges alike
        micro_batches.push_back(context_ ? rows.chunk(context_->chunk(), context_->chunks(), doc_eos_)
                                         : std::move(rows));
        micro_targets.push_back(micro_batches.back().targets(doc_eos_));
        const std::vector<int32_t> &t = micro_targets.back();
        micro_learned.push_back(int64_t(std::count_if(t.begin(), t.end(), [](int32_t x) { return x >= 0; })));
        learned += double(micro_learned.back());
    }
    // the same data and flags on every rank: the same answer (with context parallelism each rank holds an equal
    // share of the targets, its chunks)
    const bool masked = !micro_batches[0].learned.empty() || doc_eos_ >= 0;
    if (masked && ranks > 1) comm_->allreduce_sum(&learned, 1);
    else learned *= double(ranks);
    r.learned = int64_t(learned);
    for (int64_t a = 0; a < accum; ++a) {
        const TokenBatch &tb = micro_batches[size_t(a)];
        Batch batch = tb.inputs(doc_eos_);
        const std::vector<int32_t> &targets = micro_targets[size_t(a)];
        const double share = learned > 0 ? double(micro_learned[size_t(a)]) / learned : 0.0;
        const bool overlap = ranks > 1 && a == accum - 1;
        // Packed rows of one-token documents only: nothing to run. With context parallelism a rank whose parts are
        // all padding still runs the pass, with no tokens: its group's exchanges are collective.
        if (micro_empty[size_t(a)]) {
            if (overlap) // in start_through's order (last layer first): every rank starts the same sums in turn
                for (auto it = layer_parts_.rbegin(); it != layer_parts_.rend(); ++it) start_gradient_sum(*it);
            continue;
        }
        // The GPU's LM head backward recomputes the logits: its loss is the step's, and the forward skips the head.
        const ForwardResult f = model_forward(m, batch, acts_, targets.data(), /*loss_in_backward=*/true);
        r.tokens += batch.num_tokens();
        for (int64_t l = 0; l < c.num_hidden_layers; ++l)
            backend_.add_group_sizes(counts + l * K, acts_.layer(l).offsets, K);
        // Last micro-batch, data parallel: each layer's gradients are final once its backward is done (layers come
        // last to first), and are summed over the ranks while the layers below it are differentiated (on a GPU
        // with NCCL: on a stream of their own, after the layer's kernels, while the next layers' run).
        int64_t next = c.num_hidden_layers - 1; // the next layer to start: the same order on every rank
        auto start_through = [&](int64_t l) {
            for (; next >= l; --next) start_gradient_sum(layer_parts_[size_t(next)]);
            comm_->progress();
        };
        const real scale = real(share);
        const double backward_loss =
            overlap ? model_backward(m, batch, acts_, targets.data(), scratch_, grads, scale, start_through)
                    : model_backward(m, batch, acts_, targets.data(), scratch_, grads, scale);
        r.loss += (f.loss_deferred ? backward_loss : f.loss) * share;
        if (overlap) start_through(0); // those not reported (a micro-batch without targets reports none)
    }
    // A device's counts come down once, after the last backward pass is queued (no wait per layer or micro-batch).
    if (device_model_) backend_.download(counts_.data(), counts, counts_.size() * sizeof(int64_t));
    return grads;
}

double Trainer::forward_backward_on(const std::function<TokenBatch(int64_t)> &next_micro_batch) {
    if (comm_->size() > 1) fail("Trainer::forward_backward_on is for one process (benchmarks)");
    StepResult r;
    accumulate(next_micro_batch, nullptr, r);
    backend_.synchronize();
    return r.loss;
}

StepResult Trainer::step_on(const std::function<TokenBatch(int64_t)> &next_micro_batch,
                            BatchLog *batch_log) {
    auto t0 = std::chrono::steady_clock::now();
    const ZayaConfig &c = model_.config;
    const int64_t ranks = comm_->size();
    StepResult r;
    real *grads = accumulate(next_micro_batch, batch_log, r); // on a device: there, and so is the optimizer
    if (ranks > 1) { // the global batch's mean gradient on its owners; loss and routing counts on every rank
        backend_.phase("step.grad_sync");
        const auto c0 = std::chrono::steady_clock::now();
        for (const auto &parts : other_parts_) start_gradient_sum(parts); // the embedding, final norm, head
        if (device_model_) comm_->wait_all_device(backend_);
        else comm_->wait_all();
        comm_->allreduce_sum(counts_.data(), counts_.size());
        double sums[2] = {r.loss, double(r.tokens)};
        comm_->allreduce_sum(sums, 2);
        r.loss = sums[0]; // each rank's loss is already weighted by its share of the global batch
        r.tokens = int64_t(sums[1]);
        r.comm_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    }
    r.fwd_bwd_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t it = iteration_ + 1;
    const size_t total = total_grads();
    if (fault_nan_.erase(it)) { // into a gradient this rank holds the sum of: the global norm sees it
        size_t at = 0;
        for (const Communicator::Part &p : opt_.owners())
            if (p.owner == comm_->rank()) {
                at = p.offset;
                break;
            }
        const real nan = std::numeric_limits<real>::quiet_NaN();
        backend_.upload(grads + at, &nan, sizeof(real));
    }
    if (fault_hang_.erase(it)) std::this_thread::sleep_for(std::chrono::hours(24 * 365));
    if (fault_spike_.erase(it)) backend_.scale(grads, total, real(1e4));

    r.lr = opt_.scheduled_lr();
    {
        ZAYA_PROFILE("grad_norm");
        backend_.phase("step.grad_norm"); // with the guard's verdict and the gradient clipping
        r.grad_norm = opt_.grad_norm(grads); // from every rank's owned sums
    }
    if (r.learned == 0) {
        r.verdict = StepVerdict::NoTargets;
    } else {
        r.verdict = guard_.check(r.loss, r.grad_norm);
        guard_.record(r.verdict, r.loss, r.grad_norm);
    }
    r.skipped = r.verdict != StepVerdict::Ok;
    if (!r.skipped) {
        if (before_update_) before_update_();
        real *params = device_model_ ? device_model_->params.data() : model_.params.data();
        opt_.clip_and_update(params, grads, r.lr, r.grad_norm);
        if (tc_.balance) {
            backend_.phase("step.balance");
            update_balancing();
        }
        if (device_model_) params_host_stale_ = opt_host_stale_ = true;
        r.comm_seconds += opt_.last_comm_seconds();
    }
    r.entropy.resize(size_t(c.num_hidden_layers));
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        r.entropy[size_t(l)] = normalised_routing_entropy(counts_.data() + l * c.router_classes(), c.num_experts);
    iteration_ = it;
    r.step = it;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
}

double Trainer::evaluate() {
    if (!data_) fail("Trainer::evaluate needs a data set");
    // eval_batches counts batches of `batch` sequences; a forward pass takes micro-batch × ranks of them.
    const int64_t max_batches = tc_.eval_batches * (tc_.batch / (tc_.micro() * data_ranks()));
    const cpu::MatmulPrecisionScope precision(matmul_precision_);
    // The weights hold still through an evaluation: a GPU converts each matrix to bf16 once for all its batches
    // (into the copies a step keeps), not at every use into buffers of its own.
    const WeightsUnchanged frozen(backend_);
    return evaluate_loss(run_model(), data_, tc_.micro(), tc_.seq, max_batches, acts_, *comm_, tc_.row_layout()).loss;
}

} // namespace zaya
