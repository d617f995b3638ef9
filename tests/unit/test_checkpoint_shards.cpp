// Checkpoints written by several ranks at once (train/checkpoint.h): ranks as threads, each holding parts of
// made-up tensors as ZeRO-1 does (pieces cut anywhere, a rank's pieces of one tensor apart), write their own
// files; any other division of the tensors reads them back exactly; the asynchronous writer's images are the same
// bytes; a rank whose part fails fails the save and is named; version 2 manifests are still read.
#include "core/atomic_file.h"
#include "core/error.h"
#include "test_helpers.h"
#include "thread_ranks.h"
#include "train/checkpoint.h"
#include "train/checkpoint_format.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <set>

namespace zaya {
namespace {

namespace fs = std::filesystem;
using test::ThreadRanks;

// The made-up state: its tensors' values, and which rank holds which elements of the sharded ones.
struct ShardedState {
    struct Tensor {
        std::string group, name;
        std::vector<int64_t> shape;
        std::vector<float> values;
        std::vector<std::pair<size_t, int>> cuts; // (start, owner) in element order; empty: every rank holds it
    };
    std::vector<Tensor> tensors;

    ShardedState() {
        auto fill = [](size_t n, float base) {
            std::vector<float> v(n);
            for (size_t i = 0; i < n; ++i) v[i] = base + 0.001f * float(i);
            return v;
        };
        tensors.push_back({"model", "w.embed", {40, 8}, fill(320, 1), {}});
        tensors.push_back({"model", "w.norm", {8}, fill(8, 2), {}});
        tensors.push_back({"model", "w.proj", {8, 12}, fill(96, 3), {}});
        // Muon momentum of 4 expert matrices held by ranks 0, 1, 0, 2: rank 0's two pieces are apart.
        tensors.push_back({"optimizer", "w.experts.muon_momentum", {4, 3, 5}, fill(60, 4),
                           {{0, 0}, {15, 1}, {30, 0}, {45, 2}}});
        // AdamW moments cut anywhere, one rank holding nothing of one of them.
        tensors.push_back({"optimizer", "w.norm.exp_avg", {8}, fill(8, 5), {{0, 0}, {3, 2}}});
        tensors.push_back({"optimizer", "w.proj.exp_avg", {8, 12}, fill(96, 6), {{0, 2}, {7, 1}, {90, 0}}});
        tensors.push_back({"optimizer", "bias.exp_avg", {4}, fill(4, 7), {}});
    }

    // Rank `rank`'s view: pieces pointing into `mine` (its own copy of what it holds; other ranks' parts null).
    // One process holds every tensor whole, its sharded ones as one piece of its own (as checkpoint_tensors has it).
    std::vector<CheckpointTensor> view(int rank, int ranks, std::vector<std::vector<float>> &mine) const {
        mine.clear();
        std::vector<CheckpointTensor> out;
        for (const Tensor &t : tensors) {
            mine.push_back(t.values);
            CheckpointTensor c{t.group, t.name, t.shape, t.values.size(), {}};
            if (t.cuts.empty() || ranks == 1)
                c.pieces.push_back({0, t.values.size(), t.cuts.empty() ? -1 : 0, mine.back().data()});
            if (ranks == 1) {
                out.push_back(std::move(c));
                continue;
            }
            for (size_t k = 0; k < t.cuts.size(); ++k) {
                const size_t at = t.cuts[k].first;
                const size_t end = k + 1 < t.cuts.size() ? t.cuts[k + 1].first : t.values.size();
                const int owner = t.cuts[k].second;
                c.pieces.push_back({at, end - at, owner, owner == rank ? mine.back().data() + at : nullptr});
            }
            out.push_back(std::move(c));
        }
        return out;
    }

    // `parts` pieces of each tensor, cut at other places than the writers' (poisoned buffers): rank `rank` of them.
    std::vector<CheckpointTensor> reader(int rank, int parts, std::vector<std::vector<float>> &into) const {
        into.clear();
        std::vector<CheckpointTensor> out;
        for (const Tensor &t : tensors) {
            into.emplace_back(t.values.size(), std::nanf(""));
            CheckpointTensor c{t.group, t.name, t.shape, t.values.size(), {}};
            for (int k = 0; k < parts; ++k) {
                const size_t at = t.values.size() * size_t(k) / size_t(parts) + (k > 0 ? 1 : 0);
                const size_t end =
                    k + 1 < parts ? t.values.size() * size_t(k + 1) / size_t(parts) + 1 : t.values.size();
                c.pieces.push_back({at, end - at, k, k == rank ? into.back().data() + at : nullptr});
            }
            out.push_back(std::move(c));
        }
        return out;
    }
};

nlohmann::json meta(int64_t step) {
    return {{"format", checkpoint_format::kFormat}, {"version", checkpoint_format::kVersion}, {"step", step}};
}

// Every rank of `n` saves (synchronously) step `step` of the state into `run`; rank 0's result (its error as the
// directory, after "error: ").
CheckpointSaved save_on_ranks(const ShardedState &s, int n, const std::string &run, int64_t step) {
    auto results = test::on_thread_ranks(n, [&](ThreadRanks::Rank &comm) {
        std::vector<std::vector<float>> mine;
        try {
            return checkpoint_save_tensors(comm, run, step, s.view(comm.rank(), n, mine), meta(step));
        } catch (const Error &e) {
            return CheckpointSaved{std::string("error: ") + e.what(), 0};
        }
    });
    return results[0];
}

std::string file_bytes(const fs::path &p) { return read_file_bytes(p.string()); }

TEST(CheckpointShards, RanksWriteTheirOwnPartsThatAnyDivisionReadsBack) {
    const ShardedState s;
    test::TempDir tmp;
    const CheckpointSaved saved = save_on_ranks(s, 3, tmp.str("run"), 7);
    const std::string &dir = saved.dir;
    ASSERT_EQ(dir, tmp.str("run/checkpoints/step_00000007"));
    uint64_t bytes = 0; // rank 0 counts every rank's files
    for (const auto &e : fs::directory_iterator(dir))
        if (e.path().filename() != "manifest.json") bytes += e.file_size();
    EXPECT_EQ(saved.bytes, bytes);
    // Each rank's files; a split tensor's chunks under "NAME[at:end]", flat; a whole one under its name and shape.
    for (int r = 1; r <= 3; ++r)
        EXPECT_TRUE(fs::exists(fmt::format("{}/optimizer-{:05d}-of-00003.safetensors", dir, r))) << r;
    EXPECT_FALSE(fs::exists(dir + "/optimizer.safetensors"));
    EXPECT_EQ(test::read_tensor(dir + "/optimizer-00001-of-00003.safetensors", "w.experts.muon_momentum[30:45]"),
              std::vector<float>(s.tensors[3].values.begin() + 30, s.tensors[3].values.begin() + 45));
    const nlohmann::json m = nlohmann::json::parse(file_bytes(fs::path(dir) / "manifest.json"));
    EXPECT_EQ(m.at("tensors").at(3).at("chunks").size(), 4u);
    // The replicated tensors are shared out: no rank writes all of them (the embedding alone is most of them).
    std::set<std::string> model_files;
    for (size_t i = 0; i < 3; ++i) model_files.insert(m.at("tensors").at(i).at("chunks").at(0).at("file"));
    EXPECT_EQ(model_files.size(), 2u);

    // Read back by one process, and by 2 and 4 ranks cutting every tensor elsewhere.
    for (int parts : {1, 2, 4}) {
        for (int r = 0; r < parts; ++r) {
            std::vector<std::vector<float>> into;
            const std::vector<CheckpointTensor> want = s.reader(r, parts, into);
            checkpoint_read_tensors(dir, want);
            for (size_t t = 0; t < want.size(); ++t)
                for (const CheckpointPiece &p : want[t].pieces)
                    for (size_t i = p.at; i < p.at + p.numel; ++i) {
                        if (p.data) {
                            EXPECT_EQ(into[t][i], s.tensors[t].values[i]) << want[t].name << " " << i;
                        } else {
                            EXPECT_TRUE(std::isnan(into[t][i])) << "written outside its piece: " << want[t].name;
                        }
                    }
        }
    }

    // The asynchronous writer's images: byte-identical files, the same manifest tensor table.
    auto images_dir = test::on_thread_ranks(3, [&](ThreadRanks::Rank &comm) {
        std::vector<std::vector<float>> mine;
        const std::vector<CheckpointTensor> tensors = s.view(comm.rank(), 3, mine);
        std::vector<CheckpointImage> images = checkpoint_images(tensors, comm.rank(), 3);
        for (CheckpointImage &img : images) checkpoint_image_snapshot(img);
        const std::string begun = checkpoint_begin(comm, tmp.str("async"), 7);
        return checkpoint_write_images(tmp.str("async"), 7, comm.rank(), 3, tensors, images, meta(7), begun).dir;
    })[0];
    size_t files = 0;
    for (const auto &e : fs::directory_iterator(dir)) {
        EXPECT_EQ(file_bytes(e.path()), file_bytes(fs::path(images_dir) / e.path().filename())) << e.path();
        ++files;
    }
    EXPECT_EQ(files, 6u); // 2 model files, 3 optimizer files, the manifest
}

TEST(CheckpointShards, ARanksFailedPartFailsTheSaveAndIsNamed) {
    const ShardedState s;
    test::TempDir tmp;
    const std::string run = tmp.str("run");
    const std::string first = save_on_ranks(s, 3, run, 5).dir;
    ::setenv("ZAYA_FAULT_CKPT_PART", "10", 1); // the last rank's part of step 10's checkpoint
    const std::string second = save_on_ranks(s, 3, run, 10).dir;
    ::unsetenv("ZAYA_FAULT_CKPT_PART");
    EXPECT_EQ(second, "error: rank 2: injected fault (ZAYA_FAULT_CKPT_PART) at step 10");
    EXPECT_FALSE(fs::exists(run + "/checkpoints/step_00000010"));
    EXPECT_FALSE(fs::exists(run + "/checkpoints/step_00000010.tmp")) << "the other ranks' files are removed";
    EXPECT_EQ(checkpoint_latest(run), first);
    std::vector<std::vector<float>> into;
    EXPECT_NO_THROW(checkpoint_read_tensors(first, s.reader(0, 1, into)));
}

TEST(CheckpointShards, ADamagedChunkIsNamedAndNothingIsRead) {
    const ShardedState s;
    test::TempDir tmp;
    const std::string dir = save_on_ranks(s, 3, tmp.str("run"), 3).dir;
    const nlohmann::json m = nlohmann::json::parse(file_bytes(fs::path(dir) / "manifest.json"));
    const nlohmann::json &chunk = m.at("tensors").at(5).at("chunks").at(1); // w.proj.exp_avg[7:90], rank 1's
    {
        std::fstream f(dir + "/" + chunk.at("file").get<std::string>(),
                       std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(std::streamoff(chunk.at("offset").get<size_t>() + 8));
        f.put('\x7f');
    }
    std::vector<std::vector<float>> into;
    const std::vector<CheckpointTensor> want = s.reader(0, 1, into);
    const std::string msg = test::error_of([&] { checkpoint_read_tensors(dir, want); });
    EXPECT_NE(msg.find("tensor 'w.proj.exp_avg[7:90]' does not match its checksum (corrupted)"), std::string::npos)
        << msg;
    for (const auto &v : into)
        for (float x : v) ASSERT_TRUE(std::isnan(x)) << "nothing is read from a damaged checkpoint";
}

TEST(CheckpointShards, Version2ManifestsAreStillRead) {
    const ShardedState s;
    test::TempDir tmp;
    const std::string dir = save_on_ranks(s, 1, tmp.str("run"), 4).dir;
    EXPECT_TRUE(fs::exists(dir + "/model.safetensors") && fs::exists(dir + "/optimizer.safetensors"));
    // Version 2 wrote the same files from one process; its manifest had each tensor's one chunk in the entry.
    nlohmann::json m = nlohmann::json::parse(file_bytes(fs::path(dir) / "manifest.json"));
    m["version"] = 2;
    for (nlohmann::json &t : m["tensors"]) {
        ASSERT_EQ(t.at("chunks").size(), 1u);
        for (const char *k : {"file", "offset", "bytes", "xxh64"}) t[k] = t["chunks"][0][k];
        t.erase("chunks");
    }
    std::ofstream(dir + "/manifest.json", std::ios::trunc) << m.dump(1);
    std::vector<std::vector<float>> into;
    checkpoint_read_tensors(dir, s.reader(0, 1, into));
    for (size_t t = 0; t < into.size(); ++t) EXPECT_EQ(into[t], s.tensors[t].values) << s.tensors[t].name;

    m["version"] = 4;
    std::ofstream(dir + "/manifest.json", std::ios::trunc) << m.dump(1);
    const std::string msg = test::error_of([&] { checkpoint_read_tensors(dir, s.reader(0, 1, into)); });
    EXPECT_NE(msg.find("checkpoint format version 4 (this zaya reads versions 2 to 3)"), std::string::npos) << msg;
}

} // namespace
} // namespace zaya
