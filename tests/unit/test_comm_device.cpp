// The Communicator's default device collectives (dist/comm_single.cpp), which stage a device backend's buffers
// through host memory: what a started sum onto owners adds, where (only to this rank's parts), and only what was
// started; several sums in flight at once (the gradient buckets of a backward pass), round after round. The CPU backend stands in for the device (its
// download and upload are copies); a fake second rank supplies the other half of each sum.
#include "dist/comm.h"
#include "ops/backend.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace zaya {
namespace {

// Rank 0 of two. The other rank's contribution to element i of a part is peer(i) (i counted from the part's start),
// added when wait_all() completes the sums (as MPI completes them), into the host buffers that were started, which
// must still be alive then; only to the parts rank 0 owns (a reduce leaves the others' as they were).
class TwoRanks final : public SingleProcess {
  public:
    static float peer(size_t i) { return 1000.0f + float(i); }
    int size() const override { return 2; }
    std::string name() const override { return "fake-two"; }
    void start_reduce_sum(float *base, const std::vector<Part> &parts) override {
        for (const Part &p : parts) pending_.push_back({base + p.offset, p.count, p.owner});
        ++started;
    }
    void wait_all() override {
        for (const auto &[data, n, owner] : pending_)
            if (owner == rank())
                for (size_t i = 0; i < n; ++i) data[i] += peer(i);
        pending_.clear();
    }
    int started = 0;

  private:
    struct Pending {
        float *data;
        size_t n;
        int owner;
    };
    std::vector<Pending> pending_;
};

std::vector<float> iota_buffer(size_t n, float first) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = first + float(i);
    return v;
}

using Parts = std::vector<Communicator::Part>;

TEST(CommunicatorDevice, StagedSumsAddOnlyTheStartedOwnedPartsAtTheWait) {
    Backend &be = cpu_backend();
    TwoRanks comm;
    std::vector<float> grads = iota_buffer(14, 1.0f);
    const std::vector<float> before = grads;
    // Three buckets in flight at once, out of order (a backward pass starts the last layer first), with parts owned
    // by either rank and gaps between them; [3, 5) and [13, 14) are never started, and the parts rank 1 owns are
    // summed there, not here: all of those stay as they were.
    const Parts buckets[] = {{{8, 2, 0}, {10, 1, 1}, {12, 1, 0}}, {{5, 3, 1}}, {{0, 1, 0}, {1, 2, 0}}};
    for (const Parts &parts : buckets) comm.start_reduce_sum_device(grads.data(), parts, be);
    EXPECT_EQ(comm.started, 3);
    EXPECT_EQ(grads, before) << "a sum must land only when waited for";
    comm.wait_all_device(be);
    std::vector<float> want = before;
    for (const Parts &parts : buckets)
        for (const Communicator::Part &p : parts)
            if (p.owner == 0)
                for (size_t i = 0; i < p.count; ++i) want[p.offset + i] += TwoRanks::peer(i);
    EXPECT_EQ(grads, want);

    // The next step: a larger bucket than any before (the staging buffers grow) and one of the old size.
    grads = iota_buffer(14, -5.0f);
    comm.start_reduce_sum_device(grads.data(), {{1, 10, 0}}, be);
    comm.start_reduce_sum_device(grads.data(), {{11, 1, 0}}, be);
    comm.wait_all_device(be);
    for (size_t i = 0; i < 14; ++i)
        EXPECT_EQ(grads[i], -5.0f + float(i) + (i == 0 || i > 11 ? 0.0f : TwoRanks::peer(i == 11 ? 0 : i - 1)))
            << i;

    // A wait with nothing started, or a start with no parts, changes nothing.
    const std::vector<float> now = grads;
    comm.start_reduce_sum_device(grads.data(), {}, be);
    comm.wait_all_device(be);
    EXPECT_EQ(grads, now);
}

} // namespace
} // namespace zaya
