// Bit-exact resume: N+M steps straight equal N steps, checkpoint, a fresh trainer restored from it, M steps —
// same per-step losses, parameters and optimizer state, bit for bit. And damaged checkpoints are refused.
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/prepare.h"
#include "model/init.h"
#include "ops/cpu/gemm.h"
#include "test_helpers.h"
#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>

namespace zaya {
namespace {

struct Fixture {
    test::TempDir tmp;
    TrainConfig tc;
    std::shared_ptr<const DataSet> data;

    Fixture() {
        std::filesystem::create_directories(tmp.str("corpus"));
        for (int i = 0; i < 30; ++i) {
            std::ofstream f(tmp.str("corpus/doc" + std::to_string(i) + ".txt"));
            f << "Document " << i << ": the quick brown fox jumps over the lazy dog " << i * 7 << " times.\n"
              << "Routing tokens to experts keeps the compute per token small.\n";
        }
        PrepareOptions o;
        o.inputs = {tmp.str("corpus")};
        o.out_dir = tmp.str("data");
        o.vocab_size = 400;
        o.progress = false;
        prepare_data(o);
        data = DataSet::open(tmp.str("data"));
        tc.data = tmp.str("data");
        tc.out = tmp.str("run");
        tc.model = "tiny";
        tc.steps = 6;
        tc.batch = 4;
        tc.micro_batch = 2;
        tc.seq = 16;
        tc.warmup = 2;
    }
    Trainer make_trainer() const {
        ZayaConfig c = config_preset("tiny");
        c.vocab_size = int64_t(data->manifest().vocab_size);
        Model m = Model::create(c);
        model_init_random(m, tc.seed);
        return Trainer(tc, std::move(m), data);
    }
};

std::vector<real> snapshot(Trainer &t) {
    std::vector<real> v(t.model().params.data(), t.model().params.data() + t.model().params.size);
    const ParamGroups &g = t.optimizer().groups();
    v.insert(v.end(), t.optimizer().muon_momentum(), t.optimizer().muon_momentum() + g.muon_state_size);
    v.insert(v.end(), t.optimizer().exp_avg(), t.optimizer().exp_avg() + g.adamw_state_size);
    v.insert(v.end(), t.optimizer().exp_avg_sq(), t.optimizer().exp_avg_sq() + g.adamw_state_size);
    return v;
}

TEST(Checkpoint, ResumeIsBitExact) {
    Fixture f;
    Trainer straight = f.make_trainer();
    std::vector<double> losses;
    for (int s = 0; s < 6; ++s) losses.push_back(straight.step().loss);

    Trainer first = f.make_trainer();
    for (int s = 0; s < 3; ++s) ASSERT_EQ(first.step().loss, losses[size_t(s)]);
    const std::string dir = checkpoint_save(first, f.tc.out).dir;
    ASSERT_EQ(checkpoint_latest(f.tc.out), dir);

    Trainer resumed = f.make_trainer();
    for (int s = 0; s < 2; ++s) resumed.step(); // different state first: the load must overwrite all of it
    checkpoint_load(resumed, dir);
    for (int s = 3; s < 6; ++s) EXPECT_EQ(resumed.step().loss, losses[size_t(s)]) << "step " << s + 1;
    const auto a = snapshot(straight), b = snapshot(resumed);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(real)), 0);
}

// (Uses this file's training fixture.) bf16 matmul operands (--precision bf16) change the losses by the bf16 level
// only, leave the optimizer's GEMMs alone (the process precision is back to fp32 after each step), and are
// deterministic like everything else.
TEST(Trainer, Bf16MatmulsTrackFp32AndAreDeterministic) {
    Fixture f;
    std::vector<double> l32, l16a, l16b;
    Trainer t32 = f.make_trainer();
    for (int s = 0; s < 6; ++s) l32.push_back(t32.step().loss);
    f.tc.precision = "bf16";
    Trainer a = f.make_trainer(), b = f.make_trainer();
    for (int s = 0; s < 6; ++s) {
        l16a.push_back(a.step().loss);
        EXPECT_EQ(cpu::matmul_precision(), cpu::MatmulPrecision::F32);
        l16b.push_back(b.step().loss);
    }
    EXPECT_EQ(l16a, l16b);
    EXPECT_NE(l16a, l32);
    for (size_t s = 0; s < l32.size(); ++s) EXPECT_NEAR(l16a[s], l32[s], 1e-2 * l32[s]) << "step " << s + 1;
    EXPECT_NEAR(a.evaluate(), t32.evaluate(), 1e-2 * t32.evaluate());
}

TEST(Checkpoint, DamagedCheckpointsAreRefused) {
    Fixture f;
    Trainer t = f.make_trainer();
    t.step();
    const std::string dir = checkpoint_save(t, f.tc.out).dir;
    auto expect_error = [&](const std::string &needle) {
        Trainer u = f.make_trainer();
        const std::string msg = test::error_of([&] { checkpoint_load(u, dir); });
        EXPECT_NE(msg.find(needle), std::string::npos) << msg;
    };
    const std::string opt = dir + "/optimizer.safetensors";
    std::string bytes = read_file_bytes(opt);
    { // one flipped byte in the data
        std::string bad = bytes;
        bad[bad.size() - 3] ^= 0x40;
        std::ofstream(opt, std::ios::binary | std::ios::trunc) << bad;
        expect_error("checksum");
    }
    { // truncated
        std::ofstream(opt, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
        expect_error("truncated");
    }
    std::filesystem::remove(dir + "/manifest.json"); // half-written: no manifest
    expect_error("no manifest.json");
}

TEST(Checkpoint, KeepPrunesAndResumeFallsBackPastADamagedLatest) {
    Fixture f;
    Trainer straight = f.make_trainer();
    std::vector<double> losses;
    for (int s = 0; s < 4; ++s) losses.push_back(straight.step().loss);

    Trainer t = f.make_trainer();
    for (int s = 0; s < 3; ++s) {
        t.step();
        checkpoint_save(t, f.tc.out);
        checkpoint_prune(f.tc.out, 2);
    }
    const auto kept = checkpoint_list(f.tc.out);
    ASSERT_EQ(kept.size(), 2u);
    EXPECT_NE(kept[0].find("step_00000003"), std::string::npos);
    EXPECT_NE(kept[1].find("step_00000002"), std::string::npos);

    { // damage the newest: resume must fall back to step 2 and say why
        std::ofstream(kept[0] + "/model.safetensors", std::ios::binary | std::ios::trunc) << "garbage";
    }
    Trainer resumed = f.make_trainer();
    std::vector<std::string> warnings;
    const std::string used = checkpoint_resume(resumed, f.tc.out, [&](const std::string &w) { warnings.push_back(w); });
    EXPECT_EQ(used, kept[1]);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("step_00000003"), std::string::npos) << warnings[0];
    EXPECT_EQ(resumed.step_count(), 2);
    EXPECT_EQ(resumed.step().loss, losses[2]);
    EXPECT_EQ(resumed.step().loss, losses[3]);
}

TEST(Checkpoint, AsyncSaveWritesTheStateOfItsStepWhileTrainingGoesOn) {
    Fixture f;
    Trainer sync = f.make_trainer();
    for (int s = 0; s < 3; ++s) sync.step();
    const std::string sync_dir = checkpoint_save(sync, f.tmp.str("sync_run")).dir;

    Trainer t = f.make_trainer();
    for (int s = 0; s < 3; ++s) t.step();
    {
        CheckpointWriter w(t, f.tc.out, 0);
        t.set_before_update([&] { w.wait_snapshot(); });
        w.start(t);
        t.step(); // updates only after the snapshot is complete
        t.step();
        const std::optional<SaveReport> r = w.finish();
        ASSERT_TRUE(r.has_value());
        ASSERT_TRUE(r->ok()) << r->error;
        EXPECT_EQ(r->step, 3);
        EXPECT_GE(w.snapshot_bytes(), r->bytes);
        EXPECT_EQ(r->bytes, std::filesystem::file_size(r->dir + "/model.safetensors") +
                                std::filesystem::file_size(r->dir + "/optimizer.safetensors"));
        t.set_before_update(nullptr);
    }
    const std::string async_dir = f.tc.out + "/checkpoints/step_00000003";
    for (const char *file : {"model.safetensors", "optimizer.safetensors", "manifest.json"})
        EXPECT_EQ(read_file_bytes(async_dir + "/" + file), read_file_bytes(sync_dir + "/" + file)) << file;
}

TEST(Checkpoint, ACorruptedTensorIsNamedAndNothingIsLoaded) {
    Fixture f;
    Trainer t = f.make_trainer();
    t.step();
    const std::string dir = checkpoint_save(t, f.tc.out).dir;
    const std::string opt = dir + "/optimizer.safetensors";
    std::string bytes = read_file_bytes(opt);
    bytes[bytes.size() - 5] ^= 0x10; // inside the last tensor
    std::ofstream(opt, std::ios::binary | std::ios::trunc) << bytes;

    Trainer u = f.make_trainer();
    const std::vector<real> before(u.model().params.data(), u.model().params.data() + u.model().params.size);
    const std::string msg = test::error_of([&] { checkpoint_load(u, dir); });
    EXPECT_NE(msg.find("balancing_biases.exp_avg_sq' does not match its checksum"), std::string::npos) << msg;
    EXPECT_EQ(std::memcmp(before.data(), u.model().params.data(), before.size() * sizeof(real)), 0)
        << "a failed load changed the parameters";
    EXPECT_EQ(u.step_count(), 0);
}

TEST(Checkpoint, SkippedStepsCountAsStepsButNotAsUpdates) {
    Fixture f;
    ::setenv("ZAYA_FAULT_NAN_GRAD", "2", 1);
    Trainer t = f.make_trainer();
    ::unsetenv("ZAYA_FAULT_NAN_GRAD");
    t.step();
    const std::vector<real> before(t.model().params.data(), t.model().params.data() + t.model().params.size);
    const StepResult r = t.step();
    EXPECT_TRUE(r.skipped);
    EXPECT_EQ(r.verdict, StepVerdict::NonFinite);
    EXPECT_EQ(r.step, 2);
    EXPECT_EQ(t.step_count(), 2);
    EXPECT_EQ(t.optimizer().step_count(), 1);
    EXPECT_EQ(std::memcmp(before.data(), t.model().params.data(), before.size() * sizeof(real)), 0);
    EXPECT_FALSE(t.step().skipped); // fires once
}

TEST(Checkpoint, GuardHistoryAndCountersRoundTrip) {
    Fixture f;
    Trainer t = f.make_trainer();
    for (int s = 0; s < 5; ++s) t.step();
    const std::string dir = checkpoint_save(t, f.tc.out).dir;
    Trainer u = f.make_trainer();
    checkpoint_load(u, dir);
    EXPECT_EQ(u.guard().to_json(), t.guard().to_json());
    EXPECT_EQ(u.guard().to_json()["losses"].size(), 5u);
    EXPECT_EQ(u.step_count(), 5);
    EXPECT_EQ(u.optimizer().step_count(), t.optimizer().step_count());
    EXPECT_EQ(u.balancing().step_count(), t.balancing().step_count());
}

} // namespace
} // namespace zaya
