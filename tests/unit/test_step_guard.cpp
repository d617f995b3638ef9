// The step guard: non-finite steps are always refused; spikes only once there is history to judge them by; the
// window is bounded; the saved history restores the same decisions.
#include "core/error.h"
#include "test_helpers.h"
#include "train/step_guard.h"

#include <cmath>
#include <gtest/gtest.h>
#include <limits>
#include <nlohmann/json.hpp>

namespace zaya {
namespace {

GuardConfig config(double z, int64_t window, int64_t min_history, int64_t rollback) {
    GuardConfig c;
    c.spike_z = z;
    c.window = window;
    c.min_history = min_history;
    c.rollback_after = rollback;
    return c;
}

// A loss around 3 with a little noise, a gradient norm around 1.
void feed(StepGuard &g, int n) {
    for (int i = 0; i < n; ++i) {
        const double loss = 3.0 + 0.01 * std::sin(i), norm = 1.0 + 0.02 * std::cos(3 * i);
        ASSERT_EQ(g.check(loss, norm), StepVerdict::Ok) << "step " << i;
        g.record(StepVerdict::Ok, loss, norm);
    }
}

TEST(StepGuard, NonFiniteIsAlwaysRefused) {
    StepGuard g(config(0, 10, 5, 3)); // spike detection off
    EXPECT_EQ(g.check(std::nan(""), 1.0), StepVerdict::NonFinite);
    EXPECT_EQ(g.check(2.0, std::numeric_limits<double>::infinity()), StepVerdict::NonFinite);
    EXPECT_EQ(g.check(2.0, 1e30), StepVerdict::Ok);
}

TEST(StepGuard, SpikesNeedHistoryAndAreOneSided) {
    StepGuard g(config(6, 50, 20, 3));
    feed(g, 19);
    EXPECT_EQ(g.check(30.0, 1.0), StepVerdict::Ok); // 19 < min_history: no verdict yet
    feed(g, 1);
    EXPECT_EQ(g.check(30.0, 1.0), StepVerdict::LossSpike);
    EXPECT_EQ(g.check(3.0, 50.0), StepVerdict::GradNormSpike);
    EXPECT_EQ(g.check(0.5, 0.01), StepVerdict::Ok); // a sudden improvement is not a spike
}

TEST(StepGuard, ConsecutiveSkipsAskForRollback) {
    StepGuard g(config(6, 50, 20, 3));
    feed(g, 25);
    for (int k = 1; k <= 3; ++k) {
        EXPECT_FALSE(g.wants_rollback());
        g.record(g.check(3.0, 100.0), 3.0, 100.0);
        EXPECT_EQ(g.consecutive_skips(), k);
    }
    EXPECT_TRUE(g.wants_rollback());
    g.record(StepVerdict::Ok, 3.0, 1.0); // an accepted step resets the count
    EXPECT_FALSE(g.wants_rollback());
}

TEST(StepGuard, WindowForgetsOldSteps) {
    StepGuard g(config(6, 20, 20, 3));
    for (int i = 0; i < 20; ++i) g.record(StepVerdict::Ok, 10.0 + 0.1 * (i % 2), 1.0 + 0.01 * (i % 2));
    EXPECT_EQ(g.check(3.0, 1.0), StepVerdict::Ok);
    feed(g, 20); // the window now holds only losses near 3: 10 is a spike
    EXPECT_EQ(g.check(10.0, 1.0), StepVerdict::LossSpike);
}

TEST(StepGuard, SavedHistoryRestoresTheSameDecisions) {
    StepGuard g(config(4, 30, 10, 3));
    feed(g, 40);
    g.record(StepVerdict::LossSpike, 9.0, 1.0);
    const nlohmann::json saved = nlohmann::json::parse(g.to_json().dump()); // through text, as in a manifest
    StepGuard h(config(4, 30, 10, 3));
    h.restore(saved, "test");
    EXPECT_EQ(h.to_json(), g.to_json());
    EXPECT_EQ(h.consecutive_skips(), 1);
    for (double x : {3.0, 3.02, 3.05, 3.1, 3.3, 4.0})
        EXPECT_EQ(h.check(x, 1.0), g.check(x, 1.0)) << x;
    const std::string msg = test::error_of([&] { h.restore(nlohmann::json{{"losses", {1.0}}}, "ckpt/manifest.json"); });
    EXPECT_NE(msg.find("ckpt/manifest.json"), std::string::npos) << msg;
}

} // namespace
} // namespace zaya
