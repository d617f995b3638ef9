// Batch loader (src/data/loader.h): chunking, determinism, bit-identical resume from a saved state, rank
// slices, validation batches.
#include "core/error.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/shards.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <set>

namespace fs = std::filesystem;
using namespace zaya;
using zaya::test::TempDir;

namespace {

constexpr uint64_t kVocab = 1 << 20; // large, so token = stream position and chunks can be recognised

// A data directory whose train stream is 0, 1, 2, ... split over shards of the given sizes, and whose val
// stream continues the count in one shard.
std::shared_ptr<const DataSet> make_data(const TempDir &d, const std::vector<uint64_t> &train_shards,
                                         uint64_t val_tokens) {
    DataManifest m;
    m.vocab_size = kVocab;
    m.dtype = "u32";
    m.eos_id = 3;
    int32_t next = 0;
    auto write = [&](const std::string &split, size_t i, uint64_t n, SplitInfo &info) {
        std::vector<int32_t> t(n);
        for (auto &v : t) v = next++;
        const std::string name = split + "_" + std::to_string(i) + ".bin";
        shard_write(d.str(name), t, kVocab);
        info.shards.push_back(name);
        info.tokens += n;
        info.docs += 1;
    };
    for (size_t i = 0; i < train_shards.size(); ++i) write("train", i, train_shards[i], m.train);
    if (val_tokens) write("val", 0, val_tokens, m.val);
    manifest_save(m, d.str());
    return DataSet::open(d.str());
}

std::vector<std::vector<int32_t>> take(TrainLoader &l, int batches, int64_t B) {
    std::vector<std::vector<int32_t>> out;
    for (int i = 0; i < batches; ++i) out.push_back(l.next_batch(B).tokens);
    return out;
}

} // namespace

TEST(DataLoader, ChunksAreContiguousWindowsWithinShards) {
    TempDir d;
    // T = 8: shard 0 (50 tokens) has (50-1)/8 = 6 chunks, shard 1 (9) has 1, shard 2 (5) none, shard 3 (33) 4.
    auto data = make_data(d, {50, 9, 5, 33}, 0);
    TrainLoader l(data, 8, 42);
    EXPECT_EQ(l.chunks_per_epoch(), 11u);
    const std::vector<int32_t> shard_start = {0, 50, 59, 64};
    std::set<int32_t> starts;
    for (int i = 0; i < 11; ++i) {
        const TokenBatch b = l.next_batch(1);
        ASSERT_EQ(b.sequences, 1);
        ASSERT_EQ(b.tokens.size(), 9u);
        for (size_t k = 1; k < 9; ++k) ASSERT_EQ(b.tokens[k], b.tokens[0] + int32_t(k));
        starts.insert(b.tokens[0]);
    }
    // One epoch visits each chunk once: starts at shard_start + 8c.
    std::set<int32_t> want;
    for (int c = 0; c < 6; ++c) want.insert(shard_start[0] + 8 * c);
    want.insert(shard_start[1]);
    for (int c = 0; c < 4; ++c) want.insert(shard_start[3] + 8 * c);
    EXPECT_EQ(starts, want);
    EXPECT_EQ(l.state().epoch, 0u);
    l.next_batch(1);
    EXPECT_EQ(l.state().epoch, 1u);
    EXPECT_EQ(l.state().cursor, 1u);
}

TEST(DataLoader, InputsAndTargets) {
    TempDir d;
    auto data = make_data(d, {100}, 0);
    TrainLoader l(data, 4, 1);
    const TokenBatch b = l.next_batch(3);
    const Batch in = b.inputs();
    ASSERT_EQ(in.num_sequences(), 3);
    ASSERT_EQ(in.num_tokens(), 12);
    const auto tg = b.targets();
    ASSERT_EQ(tg.size(), 12u);
    for (int64_t s = 0; s < 3; ++s)
        for (int64_t t = 0; t < 4; ++t) {
            EXPECT_EQ(in.tokens[size_t(s * 4 + t)], b.row(s)[t]);
            EXPECT_EQ(in.positions[size_t(s * 4 + t)], t);
            EXPECT_EQ(tg[size_t(s * 4 + t)], b.row(s)[t + 1]);
        }
}

TEST(DataLoader, SameSeedSameBatches) {
    TempDir d;
    auto data = make_data(d, {1000, 700}, 0);
    TrainLoader a(data, 16, 7), b(data, 16, 7), c(data, 16, 8);
    const auto ba = take(a, 20, 4), bb = take(b, 20, 4), bc = take(c, 20, 4);
    EXPECT_EQ(ba, bb);
    EXPECT_NE(ba, bc);
}

TEST(DataLoader, RestoreGivesIdenticalBatches) {
    TempDir d;
    auto data = make_data(d, {1000, 700}, 0); // 62 + 43 = 105 chunks of 16
    TrainLoader a(data, 16, 99);
    take(a, 30, 6); // 180 chunks: into the second epoch
    const LoaderState st = a.state();
    EXPECT_EQ(st.epoch, 1u);
    const auto j = loader_state_to_json(st);
    const auto expected = take(a, 40, 6); // crosses into the third epoch

    TrainLoader b(data, 16, 12345); // seed comes from the state
    b.restore(loader_state_from_json(nlohmann::json::parse(j.dump()), "state.json"));
    EXPECT_EQ(b.state(), st);
    EXPECT_EQ(take(b, 40, 6), expected);

    TrainLoader wrong_t(data, 32, 99);
    EXPECT_THROW(wrong_t.restore(st), Error);
    TempDir d2;
    TrainLoader other_data(make_data(d2, {1000}, 0), 16, 99);
    EXPECT_THROW(other_data.restore(st), Error);
    LoaderState bad = st;
    bad.cursor = st.chunks + 1;
    EXPECT_THROW(b.restore(bad), Error);
    EXPECT_THROW(loader_state_from_json(nlohmann::json{{"seed", 1}}, "state.json"), Error);
}

TEST(DataLoader, RankSlicesPartitionTheGlobalBatch) {
    TempDir d;
    auto data = make_data(d, {5000}, 0);
    TrainLoader global(data, 8, 3);
    std::vector<TrainLoader> ranks;
    for (int r = 0; r < 4; ++r) ranks.emplace_back(data, 8, 3, r, 4);
    for (int step = 0; step < 10; ++step) {
        const TokenBatch g = global.next_batch(8);
        std::vector<int32_t> joined;
        std::set<int32_t> starts;
        for (auto &l : ranks) {
            const TokenBatch b = l.next_batch(8);
            EXPECT_EQ(b.sequences, 2);
            joined.insert(joined.end(), b.tokens.begin(), b.tokens.end());
            for (int64_t s = 0; s < b.sequences; ++s) starts.insert(b.row(s)[0]);
            EXPECT_EQ(l.state(), global.state()); // every rank holds the same position
        }
        EXPECT_EQ(joined, g.tokens);
        EXPECT_EQ(starts.size(), 8u); // disjoint
    }
    EXPECT_THROW(ranks[0].next_batch(6), Error); // not a multiple of the world size
    EXPECT_THROW(TrainLoader(data, 8, 3, 4, 4), Error);
}

TEST(DataLoader, ValidationBatchesAreSequential) {
    TempDir d;
    auto data = make_data(d, {100}, 90); // val tokens 100..189: (90-1)/8 = 11 chunks of 8
    ValBatches v = val_batches(data, 4, 8);
    EXPECT_EQ(v.num_batches(), 3);
    std::vector<int32_t> firsts;
    TokenBatch b;
    std::vector<int64_t> sizes;
    while (v.next(b)) {
        sizes.push_back(b.sequences);
        for (int64_t s = 0; s < b.sequences; ++s) firsts.push_back(b.row(s)[0]);
    }
    EXPECT_EQ(sizes, (std::vector<int64_t>{4, 4, 3}));
    std::vector<int32_t> want;
    for (int c = 0; c < 11; ++c) want.push_back(100 + 8 * c);
    EXPECT_EQ(firsts, want); // each val token after the first is a target exactly once
    v.reset();
    ASSERT_TRUE(v.next(b));
    EXPECT_EQ(b.row(0)[0], 100);

    // Two ranks split every batch, the short last one included.
    std::vector<int32_t> joined;
    for (int r = 0; r < 2; ++r) {
        ValBatches vr(data, 4, 8, r, 2);
        int n = 0;
        while (vr.next(b)) {
            for (int64_t s = 0; s < b.sequences; ++s) joined.push_back(b.row(s)[0]);
            ++n;
        }
        EXPECT_EQ(n, 3);
    }
    std::sort(joined.begin(), joined.end());
    EXPECT_EQ(joined, want);
}

TEST(DataLoader, TooLittleData) {
    TempDir d;
    auto data = make_data(d, {8}, 0);
    EXPECT_THROW(TrainLoader(data, 8, 1), Error);
    TokenBatch b;
    ValBatches v(data, 4, 8);
    EXPECT_FALSE(v.next(b)); // an empty val split yields nothing
}

TEST(DataLoader, DataSetChecksManifestAgainstShards) {
    TempDir d;
    make_data(d, {100}, 10);
    auto m = manifest_load(d.str());
    m.train.tokens = 99;
    manifest_save(m, d.str());
    try {
        DataSet::open(d.str());
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("data.json"), std::string::npos) << e.what();
    }
    m.train.tokens = 100;
    m.train.shards = {"../escape.bin"};
    manifest_save(m, d.str());
    EXPECT_THROW(DataSet::open(d.str()), Error);
    TempDir empty;
    EXPECT_THROW(DataSet::open(empty.str()), Error);
}
