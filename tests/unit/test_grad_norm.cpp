// The global gradient norm of data-parallel ranks that each hold only their own gradient sums (optim/grad_norm.h,
// ZeRO-1's sums onto owners): N ranks, the rest of each one's buffer NaN, compute one process's Σg² (to the bit
// where no chunk straddles two owners), and the parts a gradient bucket is summed in (parts_within) cover exactly
// the owned elements of the bucket, each onto its owner.
#include "core/error.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "model/config.h"
#include "model/params.h"
#include "optim/grad_norm.h"
#include "optim/param_groups.h"
#include "optim/sum_squares.h"
#include "optim/zero_shard.h"
#include "thread_ranks.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

namespace zaya {
namespace {

using test::ThreadRanks;

struct Gradients {
    ZayaConfig config;
    ParamLayout layout;
    ParamGroups groups;
    std::vector<real> grads; // the summed gradients (one process's)
    explicit Gradients(const char *preset)
        : config(config_preset(preset)), layout(ParamLayout::build(config)),
          groups(ParamGroups::classify(layout, config)), grads(layout.total, 0) {
        Rng rng(3, 1);
        for (const ParamView &v : layout.views)
            if (v.trainable)
                for (size_t i = 0; i < v.numel; ++i) grads[v.offset + i] = real(rng.normal());
    }
};

TEST(GradSumSquares, OneProcessAddsEachViewsSumSquaresInLayoutOrder) {
    const Gradients s("small"); // its embedding is 32 chunks
    double want = 0.0;
    for (const ParamView &v : s.layout.views)
        if (v.trainable) want += sum_squares(s.grads.data() + v.offset, v.numel);
    GradSumSquares norm(s.layout);
    EXPECT_EQ(norm(s.grads.data(), cpu_backend()), want);
    EXPECT_EQ(norm(s.grads.data(), cpu_backend()), want) << "a second call, on the kept buffers";
}

TEST(GradSumSquares, RanksHoldingOnlyTheirOwnSumsComputeOneProcesssNorm) {
    for (const char *preset : {"tiny", "small"})
        for (int n : {2, 3, 4}) {
            const Gradients s(preset);
            const double one = GradSumSquares(s.layout)(s.grads.data(), cpu_backend());
            const size_t one_pieces = GradSumSquares(s.layout).pieces();
            const ShardPlan plan = ShardPlan::make(s.groups, n);
            const std::vector<Communicator::Part> owners = plan.owners(s.groups);
            ThreadRanks all(n);
            std::vector<double> got(size_t(n), -1.0);
            size_t pieces = 0;
            std::vector<std::thread> threads;
            for (int r = 0; r < n; ++r)
                threads.emplace_back([&, r] {
                    // Only the sums this rank received are real; the rest of its buffer must not be read.
                    std::vector<real> mine(s.layout.total, std::numeric_limits<real>::quiet_NaN());
                    for (const Communicator::Part &p : owners)
                        if (p.owner == r)
                            std::copy_n(s.grads.begin() + long(p.offset), p.count, mine.begin() + long(p.offset));
                    ThreadRanks::Rank comm(all, r);
                    GradSumSquares norm(s.layout, owners, r);
                    got[size_t(r)] = norm(mine.data(), cpu_backend(), &comm);
                    EXPECT_EQ(comm.calls, 1) << "one all-reduce of the pieces";
                    if (r == 0) pieces = norm.pieces();
                });
            for (std::thread &t : threads) t.join();
            for (int r = 1; r < n; ++r) EXPECT_EQ(got[size_t(r)], got[0]) << preset << ", rank " << r << " of " << n;
            if (pieces == one_pieces) {
                EXPECT_EQ(got[0], one) << preset << ", " << n << " ranks: no chunk straddles";
            } else { // a straddled chunk's pieces are added apart: its rounding differs (~2e-14 unvectorised);
                     // one element left out would be ~4e-6 of this norm
                EXPECT_NEAR(got[0], one, 1e-12 * one) << preset << ", " << n << " ranks";
            }
            // tiny's expert matrices (12288 elements) straddle chunks: the split path runs.
            if (std::string(preset) == "tiny") {
                EXPECT_GT(pieces, one_pieces) << n << " ranks";
            }
        }
}

TEST(GradSumSquares, AnElementWithoutAnOwnerIsAnError) {
    const Gradients s("tiny");
    std::vector<Communicator::Part> owners = ShardPlan::make(s.groups, 2).owners(s.groups);
    owners.erase(owners.begin() + long(owners.size() / 2));
    EXPECT_THROW(GradSumSquares(s.layout, owners, 0), Error);
}

// Every bucket a trainer could cut (random ranges, and each layer's) splits into parts that are exactly its owned
// elements, in order, each onto the element's owner.
TEST(ShardPlan, PartsWithinABucketAreItsOwnedElementsEachOntoItsOwner) {
    const Gradients s("tiny");
    const ShardPlan plan = ShardPlan::make(s.groups, 3);
    const std::vector<Communicator::Part> owners = plan.owners(s.groups);
    std::vector<int> owner_of(s.layout.total, -1);
    for (const Communicator::Part &p : owners)
        for (size_t i = p.offset; i < p.offset + p.count; ++i) {
            ASSERT_EQ(owner_of[i], -1) << "element " << i << " has two owners";
            owner_of[i] = p.owner;
        }
    Rng rng(8, 0);
    std::vector<std::pair<size_t, size_t>> buckets = {{0, s.layout.total}, {0, 0}, {5, 5}};
    for (int k = 0; k < 200; ++k) {
        size_t a = size_t(rng.uniform() * double(s.layout.total)), b = size_t(rng.uniform() * double(s.layout.total));
        buckets.push_back({std::min(a, b), std::max(a, b)});
    }
    for (const auto &[b, e] : buckets) {
        std::vector<int> got(s.layout.total, -1);
        size_t last_end = b;
        for (const Communicator::Part &p : parts_within(owners, b, e)) {
            ASSERT_GE(p.offset, last_end) << "parts in order, disjoint";
            ASSERT_LE(p.offset + p.count, e);
            ASSERT_GT(p.count, 0u);
            for (size_t i = p.offset; i < p.offset + p.count; ++i) got[i] = p.owner;
            last_end = p.offset + p.count;
        }
        for (size_t i = 0; i < s.layout.total; ++i)
            ASSERT_EQ(got[i], i >= b && i < e ? owner_of[i] : -1) << "bucket [" << b << ", " << e << "), element " << i;
    }
}

} // namespace
} // namespace zaya
