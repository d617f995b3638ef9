// ZeRO-1 sharding (optim/zero_shard.h): every piece of optimizer state has exactly one owner, shares are balanced,
// and N sharded optimizers, each updating its own share, produce bit for bit what one optimizer does.
#include "core/rng.h"
#include "dist/comm.h"
#include "model/activations.h"
#include "model/backward.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/init.h"
#include "model/params.h"
#include "optim/optimizer.h"
#include "optim/zero_shard.h"
#include "train/memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

namespace zaya {
namespace {

// One rank of N as the optimizer sees it; the broadcasts are done by the test, which holds every rank's buffers.
// (Every collective is the single process's no-op; only the rank and the size differ.)
class FakeRank final : public SingleProcess {
  public:
    FakeRank(int rank, int size) : rank_(rank), size_(size) {}
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string name() const override { return "fake"; }
    void send(const float *, size_t, int) override {}
    void recv(float *, size_t, int) override {}

  private:
    int rank_, size_;
};

ParamGroups groups_of(const char *preset) {
    const ZayaConfig c = config_preset(preset);
    return ParamGroups::classify(ParamLayout::build(c), c);
}

TEST(ShardPlan, OneRankOwnsEverythingWithTheSameStateOffsets) {
    const ParamGroups g = groups_of("tiny");
    const ShardPlan p = ShardPlan::make(g, 1);
    const ParamGroups l = p.local(g, 0);
    ASSERT_EQ(l.muon.size(), g.muon.size());
    for (size_t k = 0; k < g.muon.size(); ++k) EXPECT_EQ(l.muon[k].state_offset, g.muon[k].state_offset);
    ASSERT_EQ(l.adamw.size(), g.adamw.size());
    for (size_t k = 0; k < g.adamw.size(); ++k) {
        EXPECT_EQ(l.adamw[k].offset, g.adamw[k].offset);
        EXPECT_EQ(l.adamw[k].state_offset, g.adamw[k].state_offset);
    }
}

TEST(ShardPlan, EveryParameterHasExactlyOneOwnerAndSharesAreBalanced) {
    for (const char *preset : {"tiny", "small"})
        for (int n : {2, 3, 4, 8}) {
            const ZayaConfig c = config_preset(preset);
            const ParamLayout layout = ParamLayout::build(c);
            const ParamGroups g = ParamGroups::classify(layout, c);
            const ShardPlan p = ShardPlan::make(g, n);
            std::vector<int> owners(layout.total, 0);
            size_t total = 0, largest = 0;
            for (int r = 0; r < n; ++r) {
                for (const Communicator::Block &b : p.param_blocks(g, r))
                    for (size_t i = b.offset; i < b.offset + b.count; ++i) ++owners[i];
                const size_t s = p.state_floats(g, r);
                total += s;
                largest = std::max(largest, s);
            }
            std::vector<int> want(layout.total, 0);
            for (const MuonMatrix &m : g.muon) std::fill_n(want.begin() + long(m.offset), m.numel(), 1);
            for (const AdamWRange &r : g.adamw) std::fill_n(want.begin() + long(r.offset), r.numel, 1);
            EXPECT_EQ(owners, want) << preset << ", " << n << " ranks: every trainable element once, nothing else";
            EXPECT_EQ(total, g.muon_state_size + 2 * g.adamw_state_size) << preset << ", " << n << " ranks";
            if (std::string(preset) == "small") { // whole matrices cannot split, but small has many alike ones
                EXPECT_LE(double(largest), 1.1 * double(total) / n) << n << " ranks";
            }
        }
}

TEST(ShardPlan, TrainMemoryReportsEachRanksShare) {
    const ZayaConfig c = config_preset("small");
    const TrainMemory one = train_memory(c, 2, 64, 1), four = train_memory(c, 2, 64, 4);
    ASSERT_EQ(four.optimizer_per_rank.size(), 4u);
    EXPECT_EQ(four.optimizer, *std::max_element(four.optimizer_per_rank.begin(), four.optimizer_per_rank.end()));
    EXPECT_LT(double(four.optimizer), 0.3 * double(one.optimizer));
    EXPECT_EQ(four.params, one.params); // parameters and gradients stay replicated
}

// N optimizers, each with its rank's share of the state, each updating its copy of the parameters; then every
// rank's updated blocks (what the broadcasts send) assembled: bit-identical to one unsharded optimizer, over
// several steps (the state carries over).
TEST(ShardedOptimizer, RanksTogetherMatchOneOptimizerBitForBit) {
    const ZayaConfig c = config_preset("tiny");
    Model m = Model::create(c);
    Rng rng(11, 2);
    for (size_t i = 0; i < m.layout.total; ++i) m.params.data()[i] = real(0.02 * rng.normal());
    OptimConfig oc;
    oc.lr = 1e-2;
    oc.schedule = {ScheduleKind::Constant, 0, 10, 0.1, 0.2};
    const int n = 3;
    Optimizer whole(m.layout, c, oc);
    std::vector<std::unique_ptr<Optimizer>> ranks;
    for (int r = 0; r < n; ++r)
        ranks.push_back(std::make_unique<Optimizer>(m.layout, c, oc, std::make_shared<FakeRank>(r, n)));
    EXPECT_LT(ranks[0]->state_bytes(), whole.state_bytes() / 2);

    std::vector<real> ref(m.params.data(), m.params.data() + m.layout.total), shared = ref;
    std::vector<std::vector<real>> copies(n);
    for (int step = 0; step < 3; ++step) {
        std::vector<real> grads(m.layout.total);
        for (real &g : grads) g = real(0.1 * rng.normal());
        whole.update(ref.data(), grads.data(), oc.lr);
        for (int r = 0; r < n; ++r) {
            copies[size_t(r)] = shared;
            ranks[size_t(r)]->update(copies[size_t(r)].data(), grads.data(), oc.lr);
        }
        for (int r = 0; r < n; ++r) // the broadcasts
            for (const Communicator::Block &b : ranks[0]->plan().param_blocks(ranks[0]->groups(), r))
                std::memcpy(shared.data() + b.offset, copies[size_t(r)].data() + b.offset, b.count * sizeof(real));
        ASSERT_EQ(std::memcmp(shared.data(), ref.data(), ref.size() * sizeof(real)), 0) << "step " << step;
    }
}

// Gradient buckets (train/trainer.cpp) start summing a layer's gradients when model_backward reports the layer
// done: nothing may write them afterwards. Snapshots taken at the report equal the final gradients.
TEST(GradientBuckets, ALayersGradientsAreFinalWhenReported) {
    const ZayaConfig c = config_preset("tiny");
    Model m = Model::create(c);
    model_init_random(m, 5);
    const Batch batch = Batch::from_sequences({{5, 17, 3, 9, 44, 2, 8}, {7, 7, 30, 1}});
    const std::vector<int32_t> targets = batch.next_token_targets();
    Activations acts = Activations::plan(c, batch.num_tokens(), batch.num_sequences(), true);
    GradScratch scratch = GradScratch::plan(c, batch.num_tokens(), batch.num_sequences());
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
    model_forward(m, batch, acts, targets.data());
    std::vector<std::vector<real>> at_report(size_t(c.num_hidden_layers));
    std::vector<int64_t> order;
    auto layer_views = [&](int64_t l, auto &&f) {
        for (const ParamView &v : m.layout.views)
            if (v.name.rfind("model.layers." + std::to_string(l) + ".", 0) == 0) f(v);
    };
    model_backward(m, batch, acts, targets.data(), scratch, grads.data(), 1, [&](int64_t l) {
        order.push_back(l);
        layer_views(l, [&](const ParamView &v) {
            at_report[size_t(l)].insert(at_report[size_t(l)].end(), grads.data() + v.offset,
                                        grads.data() + v.offset + v.numel);
        });
    });
    ASSERT_EQ(order, (std::vector<int64_t>{1, 0})); // tiny has 2 layers, reported last first
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        std::vector<real> final_grads;
        layer_views(l, [&](const ParamView &v) {
            final_grads.insert(final_grads.end(), grads.data() + v.offset, grads.data() + v.offset + v.numel);
        });
        double norm = 0;
        for (real g : final_grads) norm += double(g) * double(g);
        EXPECT_GT(norm, 0) << "layer " << l << " got gradients";
        EXPECT_EQ(at_report[size_t(l)], final_grads) << "layer " << l;
    }
}

} // namespace
} // namespace zaya
