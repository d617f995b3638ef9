// The Communicator's default device collectives (dist/comm_single.cpp), which stage a device backend's buffers
// through host memory: what a started sum adds, where, and only what was started; several sums in flight at once
// (the gradient buckets of a backward pass), round after round. The CPU backend stands in for the device (its
// download and upload are copies); a fake second rank supplies the other half of each sum.
#include "dist/comm.h"
#include "ops/backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace zaya {
namespace {

// Rank 0 of two. The other rank's contribution to element i of a sum is peer(i), added when wait_all() completes
// the sums (as MPI completes them), into the host buffers that were started, which must still be alive then.
class TwoRanks final : public SingleProcess {
  public:
    static float peer(size_t i) { return 1000.0f + float(i); }
    int size() const override { return 2; }
    std::string name() const override { return "fake-two"; }
    void start_allreduce_sum(float *data, size_t n) override { pending_.push_back({data, n}), ++started; }
    void wait_all() override {
        for (const auto &[data, n] : pending_)
            for (size_t i = 0; i < n; ++i) data[i] += peer(i);
        pending_.clear();
    }
    int started = 0;

  private:
    std::vector<std::pair<float *, size_t>> pending_;
};

std::vector<float> iota_buffer(size_t n, float first) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = first + float(i);
    return v;
}

TEST(CommunicatorDevice, StagedSumsAddOnlyTheStartedBucketsAtTheWait) {
    Backend &be = cpu_backend();
    TwoRanks comm;
    std::vector<float> grads = iota_buffer(12, 1.0f);
    const std::vector<float> before = grads;
    // Three buckets in flight at once, out of order (a backward pass starts the last layer first); [3, 5) and
    // [11, 12) are never started and stay as they were.
    const std::pair<size_t, size_t> buckets[] = {{8, 11}, {5, 8}, {0, 3}};
    for (const auto &[b, e] : buckets) comm.start_allreduce_sum_device(grads.data() + b, e - b, be);
    EXPECT_EQ(comm.started, 3);
    EXPECT_EQ(grads, before) << "a sum must land only when waited for";
    comm.wait_all_device(be);
    std::vector<float> want = before;
    for (const auto &[b, e] : buckets)
        for (size_t i = b; i < e; ++i) want[i] += TwoRanks::peer(i - b);
    EXPECT_EQ(grads, want);

    // The next step: a larger bucket than any before (the staging buffers grow) and one of the old size.
    grads = iota_buffer(12, -5.0f);
    comm.start_allreduce_sum_device(grads.data() + 1, 10, be);
    comm.start_allreduce_sum_device(grads.data() + 11, 1, be);
    comm.wait_all_device(be);
    for (size_t i = 0; i < 12; ++i)
        EXPECT_EQ(grads[i], -5.0f + float(i) + (i == 0 ? 0.0f : TwoRanks::peer(i == 11 ? 0 : i - 1))) << i;

    // A wait with nothing started changes nothing.
    const std::vector<float> now = grads;
    comm.wait_all_device(be);
    EXPECT_EQ(grads, now);
}

} // namespace
} // namespace zaya
