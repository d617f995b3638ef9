// N ranks as threads of one process (a test's data-parallel or context-parallel group): all-reduces of doubles,
// broadcasts of blocks, sums onto owners, barriers and point-to-point messages, through shared memory, each sum
// in rank order as one MPI reduce does. Each thread makes its Rank (a Communicator) and calls in the same order as
// the others.
#pragma once
#include "dist/comm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace zaya::test {

class ThreadRanks {
  public:
    explicit ThreadRanks(int n) : n_(n), sync_(n), shared_(size_t(n)), bases_(size_t(n)) {}

    class Rank final : public SingleProcess {
      public:
        Rank(ThreadRanks &all, int rank) : all_(all), rank_(rank) {}
        int rank() const override { return rank_; }
        int size() const override { return all_.n_; }
        std::string name() const override { return "threads"; }
        void allreduce_sum(double *data, size_t n) override {
            all_.shared_[size_t(rank_)].assign(data, data + n);
            all_.sync_.arrive_and_wait();
            for (size_t i = 0; i < n; ++i) {
                double s = 0.0;
                for (const auto &v : all_.shared_) s += v[i];
                data[i] = s;
            }
            all_.sync_.arrive_and_wait(); // nobody overwrites a buffer another still reads
            ++calls;
        }
        void broadcast_blocks(float *base, const std::vector<Block> &blocks, int root) override {
            all_.bases_[size_t(rank_)] = base;
            all_.sync_.arrive_and_wait();
            if (rank_ != root)
                for (const Block &b : blocks)
                    std::copy_n(all_.bases_[size_t(root)] + b.offset, b.count, base + b.offset);
            all_.sync_.arrive_and_wait(); // the root's buffer is read before anyone moves on
        }
        void start_reduce_sum(float *base, const std::vector<Part> &parts) override {
            pending_.emplace_back(base, parts);
        }
        void wait_all() override {
            for (const auto &[base, parts] : pending_) {
                all_.bases_[size_t(rank_)] = base;
                all_.sync_.arrive_and_wait();
                std::vector<std::vector<float>> sums;
                for (const Part &p : parts) {
                    if (p.owner != rank_) continue;
                    std::vector<float> s(p.count, 0.0f);
                    for (int r = 0; r < all_.n_; ++r)
                        for (size_t i = 0; i < p.count; ++i) s[i] += all_.bases_[size_t(r)][p.offset + i];
                    sums.push_back(std::move(s));
                }
                all_.sync_.arrive_and_wait(); // every rank has read every buffer
                size_t k = 0;
                for (const Part &p : parts)
                    if (p.owner == rank_) std::copy(sums[k].begin(), sums[k].end(), base + p.offset), ++k;
            }
            pending_.clear();
        }
        void send(const float *data, size_t n, int dest) override {
            std::lock_guard lk(all_.mu_);
            all_.mail_[{rank_, dest}].emplace_back(data, data + n);
            all_.cv_.notify_all();
        }
        void recv(float *data, size_t n, int src) override {
            std::unique_lock lk(all_.mu_);
            auto &box = all_.mail_[{src, rank_}];
            all_.cv_.wait(lk, [&] { return !box.empty(); });
            ASSERT_EQ(box.front().size(), n);
            std::copy(box.front().begin(), box.front().end(), data);
            box.pop_front();
        }
        void barrier() override { all_.sync_.arrive_and_wait(); }
        int calls = 0; // all-reduces

      private:
        ThreadRanks &all_;
        int rank_;
        std::vector<std::pair<float *, std::vector<Part>>> pending_;
    };

  private:
    int n_;
    std::barrier<> sync_;
    std::vector<std::vector<double>> shared_;
    std::vector<float *> bases_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::map<std::pair<int, int>, std::deque<std::vector<float>>> mail_;
};

// f(rank) on n threads, each with its Rank of one group of n; the results in rank order.
template <class F> auto on_thread_ranks(int n, F &&f) {
    ThreadRanks group(n);
    std::vector<decltype(f(std::declval<ThreadRanks::Rank &>()))> results(static_cast<size_t>(n));
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
            ThreadRanks::Rank rank(group, r);
            results[size_t(r)] = f(rank);
        });
    for (auto &t : threads) t.join();
    return results;
}

} // namespace zaya::test
