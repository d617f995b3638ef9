// The NCCL communicator with one GPU (one rank): every collective leaves the data as it was, through the host
// staging path and on device memory. Skips without a GPU, saying why.
#include "dist/comm_nccl.h"
#include "ops/cuda/runtime.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace zaya {
namespace {

TEST(NcclCommunicator, OneRankCollectivesKeepTheData) {
    std::string why;
    if (!cuda::device_available(&why)) GTEST_SKIP() << "NCCL tests skipped: " << why;
    auto comm = make_nccl_communicator(std::make_shared<SingleProcess>());
    EXPECT_EQ(comm->name(), "nccl");
    EXPECT_EQ(comm->size(), 1);
    std::vector<float> f(1000);
    std::iota(f.begin(), f.end(), 0.5f);
    const auto f0 = f;
    comm->allreduce_sum(f.data(), f.size());
    EXPECT_EQ(f, f0);
    std::vector<double> d = {1.5, -2.25};
    comm->allreduce_sum(d.data(), d.size());
    EXPECT_EQ(d, (std::vector<double>{1.5, -2.25}));
    std::vector<int64_t> i = {7, -3, 1ll << 40};
    comm->allreduce_sum(i.data(), i.size());
    EXPECT_EQ(i, (std::vector<int64_t>{7, -3, 1ll << 40}));
    comm->broadcast(f.data(), f.size(), 0);
    EXPECT_EQ(f, f0);
    comm->broadcast_blocks(f.data(), {{10, 20}, {500, 3}}, 0);
    EXPECT_EQ(f, f0);
    comm->barrier();
    comm->start_reduce_sum(f.data(), {{0, 10, 0}, {20, 980, 0}});
    comm->wait_all();
    EXPECT_EQ(f, f0);
    cuda::DeviceArray<float> dev(f.size());
    cuda::copy_to_device(dev.data(), f.data(), f.size() * sizeof(float));
    // Two buckets summed onto their owner (the one rank) on NCCL's own stream after the copy queued before them,
    // awaited together; and a host buffer's parts.
    comm->start_reduce_sum_device(dev.data(), {{600, 300, 0}, {900, 100, 0}});
    comm->start_reduce_sum_device(dev.data(), {{0, 600, 0}});
    comm->wait_all_device();
    comm->wait_all_device(); // nothing left: returns at once
    std::vector<float> back(f.size());
    cuda::copy_to_host(back.data(), dev.data(), back.size() * sizeof(float));
    EXPECT_EQ(back, f0);
}

} // namespace
} // namespace zaya
