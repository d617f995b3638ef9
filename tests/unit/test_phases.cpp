// Phase timing (Backend::phase, `zaya bench train --phases`) on the CPU backend: a forward and backward pass report
// every phase the model code marks, once per layer where it is per layer, with times that are non-negative and add
// up to no more than the pass's wall time; a report starts over; with timing off nothing is recorded.
#include "model/backward.h"
#include "model/forward.h"
#include "model/init.h"
#include "ops/backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>

namespace zaya {
namespace {

TEST(Phases, ForwardAndBackwardReportEveryPhase) {
    ZayaConfig c = config_preset("tiny");
    c.num_hidden_layers = 3;
    c.layer_types.assign(3, LayerType::Hybrid);
    c.validate();
    Model m = Model::create(c);
    model_init_random(m, 5);
    const Batch batch = Batch::from_sequences({std::vector<int32_t>(12, 3), std::vector<int32_t>(7, 9)});
    const std::vector<int32_t> targets = batch.next_token_targets();
    Backend &be = cpu_backend();
    Activations acts = Activations::plan(c, batch.num_tokens(), batch.num_sequences(), true, be);
    GradScratch scratch = GradScratch::plan(c, batch.num_tokens(), batch.num_sequences(), be);
    RealBuffer grads = be.alloc(m.layout.total);

    be.set_phase_timing(false);
    model_forward(m, batch, acts, targets.data());
    EXPECT_TRUE(be.phase_report().empty()) << "timing off records nothing";

    be.set_phase_timing(true);
    const auto t0 = std::chrono::steady_clock::now();
    model_forward(m, batch, acts, targets.data(), /*loss_in_backward=*/true); // the CPU computes the loss here anyway
    model_backward(m, batch, acts, targets.data(), scratch, grads.data());
    const std::vector<PhaseTime> report = be.phase_report();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    be.set_phase_timing(false);

    std::map<std::string, int64_t> marks;
    double total = 0;
    for (const PhaseTime &p : report) {
        EXPECT_TRUE(marks.emplace(p.name, p.marks).second) << p.name << " reported twice";
        EXPECT_GE(p.seconds, 0.0) << p.name;
        total += p.seconds;
    }
    EXPECT_LE(total, wall);
    EXPECT_GT(total, 0.0);
    const int64_t L = c.num_hidden_layers;
    const std::map<std::string, int64_t> expected = {
        {"fwd.embed", 1},      {"fwd.attn.proj", L}, {"fwd.attn.conv", L}, {"fwd.attn.core", L},
        {"fwd.attn.out", L},   {"fwd.router", L},    {"fwd.experts", L},   {"fwd.lm_head", 1},
        {"bwd.lm_head", 1},    {"bwd.experts", L},   {"bwd.router", L},    {"bwd.attn.out", L},
        {"bwd.attn.core", L},  {"bwd.attn.conv", L}, {"bwd.attn.proj", L}, {"bwd.embed", 1}};
    EXPECT_EQ(marks, expected);
    // Reported in order of first appearance: the forward's phases before the backward's.
    ASSERT_FALSE(report.empty());
    EXPECT_EQ(report.front().name, "fwd.embed");
    EXPECT_EQ(report.back().name, "bwd.embed");
    EXPECT_TRUE(be.phase_report().empty()) << "a report starts over";
}

} // namespace
} // namespace zaya
