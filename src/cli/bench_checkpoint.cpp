// zaya bench checkpoint — what an asynchronous checkpoint costs training, next to a synchronous save of the same
// state and the disk's sequential write bandwidth, all measured in one run in the same directory:
//
//   disk       write (O_DIRECT, 32 MiB pieces) + fsync of as many bytes as a checkpoint holds, 3 per round; the
//              disk's bandwidth is the median of all of them (the best is printed too: cloud disks vary a lot)
//   sync save  checkpoint_save: training is blocked for all of it
//   async save CheckpointWriter: blocked = time in start() + the next step's wait for the snapshot copy;
//              write = the writer thread's write + fsync + rename, while the next training step runs beside it
// Save figures are medians of 3 rounds; a round takes the disk probes, then one save of each kind.
// Under mpirun every rank trains and writes its part of each checkpoint (train/checkpoint.h) while rank 0 alone
// probes the disk (with the whole checkpoint's bytes) and prints; the save times are rank 0's, which end when every
// rank's part is written and the checkpoint committed.
#include "cli/bench.h"
#include "cli/model_arg.h"
#include "core/error.h"
#include "dist/comm.h"
#include "io/direct_write.h"
#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <unistd.h>
#include <vector>

namespace zaya::cli {

namespace fs = std::filesystem;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Seconds to write `bytes` sequentially to a new file in `dir` with O_DIRECT and fsync it: what the disk can take
// when nothing else is in the way.
double disk_write_seconds(const fs::path &dir, const AlignedBytes &bytes) {
    const fs::path p = dir / "disk_probe.bin";
    const auto t0 = std::chrono::steady_clock::now();
    write_file_direct(p.string(), bytes);
    const double s = since(t0);
    fs::remove(p);
    return s;
}

} // namespace

void bench_checkpoint(const BenchArgs &a) {
    Model m = load_or_create_model(a.model, 1234);
    TrainConfig tc;
    tc.batch = a.batch;
    tc.micro_batch = a.micro_batch;
    tc.seq = a.seq_len;
    tc.steps = 1000;
    tc.warmup = 1;
    if (tc.micro() > tc.batch || tc.batch % tc.micro() != 0)
        fail("--micro-batch ({}) must divide --batch ({})", tc.micro(), tc.batch);
    const int64_t vocab = m.config.vocab_size;
    std::shared_ptr<Communicator> comm = communicator_from_environment();
    Communicator &c = *comm;
    const bool root = c.is_root();
    Trainer trainer(tc, std::move(m), nullptr, comm);
    RandomTokens next(tc.seq, vocab);

    std::error_code ec;
    fs::create_directories(a.dir, ec);
    int64_t pid = root ? int64_t(::getpid()) : 0; // one directory for all ranks: rank 0's
    c.allreduce_sum(&pid, 1);
    const fs::path run = fs::path(a.dir) / fmt::format("zaya-bench-checkpoint.{}", pid);
    if (root) fs::create_directories(run, ec);
    if (ec) fail("bench checkpoint: cannot create '{}': {}", run.string(), ec.message());
    c.barrier();
    struct Cleanup {
        fs::path p;
        bool root;
        ~Cleanup() {
            std::error_code e;
            if (root) fs::remove_all(p, e);
        }
    } cleanup{run, root};

    const int rounds = 3;
    std::vector<double> step_plain, step_with_save, sync_s, blocked_s, write_s, disk_s;
    trainer.step_on(std::ref(next)); // warm-up
    for (int i = 0; i < rounds; ++i) step_plain.push_back(trainer.step_on(std::ref(next)).seconds);

    size_t bytes = 0;
    for (const CheckpointTensor &t : checkpoint_tensors(trainer)) bytes += t.numel * sizeof(real);
    // Rounds interleave the three measurements, so that all of them meet the disk in the same state (cloud
    // disks slow down after many GB written).
    CheckpointWriter w(trainer, run.string(), 1);
    uint64_t file_bytes = 0;
    AlignedBytes probe(bytes);
    for (size_t i = 0; i < bytes; ++i) probe.data()[i] = uint8_t(i * 2654435761u >> 24); // not all zeros
    for (int i = 0; i < rounds; ++i) {
        if (root)
            for (int k = 0; k < 3; ++k) disk_s.push_back(disk_write_seconds(run, probe));

        trainer.step_on(std::ref(next));
        c.barrier();
        auto t0 = std::chrono::steady_clock::now();
        checkpoint_save(trainer, run.string());
        sync_s.push_back(since(t0));
        if (root) checkpoint_prune(run.string(), 1);

        trainer.step_on(std::ref(next));
        trainer.set_before_update([&w] { w.wait_snapshot(); });
        const double blocked0 = w.blocked_seconds();
        w.start(trainer);
        step_with_save.push_back(trainer.step_on(std::ref(next)).seconds); // overlaps the copy and the write
        const std::optional<SaveReport> r = w.finish();
        if (!r || !r->ok()) fail("bench checkpoint: the asynchronous save failed: {}", r ? r->error : "no report");
        blocked_s.push_back(w.blocked_seconds() - blocked0);
        write_s.push_back(r->write_s);
        file_bytes = r->bytes; // rank 0's report: the files of every rank
        trainer.set_before_update(nullptr);
    }
    // Each rank's image of its part (the whole state for one process).
    std::vector<int64_t> part_bytes(size_t(c.size()), 0);
    part_bytes[size_t(c.rank())] = int64_t(w.snapshot_bytes());
    c.allreduce_sum(part_bytes.data(), part_bytes.size());
    c.barrier(); // every rank's last save is done before rank 0 removes the directory
    if (!root) return;
    std::string parts;
    for (int64_t b : part_bytes) parts += fmt::format("{}{:.1f}", parts.empty() ? "" : " / ", double(b) / 1e6);

    // The disk's bandwidth: the median of its probes (the save figures are medians too); the best is shown beside.
    const double disk = double(bytes) / median(disk_s);
    const double disk_best = double(bytes) / *std::min_element(disk_s.begin(), disk_s.end());
    const double sync = median(sync_s), blocked = median(blocked_s), wr = median(write_s);
    const double plain = median(step_plain), overlapped = median(step_with_save);
    if (a.json) {
        nlohmann::json j = {{"model", a.model},
                            {"checkpoint_bytes", bytes},
                            {"ranks", c.size()},
                            {"snapshot_bytes_per_rank", part_bytes},
                            {"threads", omp_get_max_threads()},
                            {"blocked_s", blocked},
                            {"sync_save_s", sync},
                            {"blocked_fraction_of_sync", blocked / sync},
                            {"write_s", wr},
                            {"write_mb_s", double(file_bytes) / wr / 1e6},
                            {"disk_mb_s", disk / 1e6},
                            {"disk_best_mb_s", disk_best / 1e6},
                            {"write_fraction_of_disk", double(file_bytes) / wr / disk},
                            {"step_s", plain},
                            {"step_during_save_s", overlapped}};
        fmt::print("{}\n", j.dump());
        return;
    }
    fmt::print("checkpoint  model {}  {:.1f} MB of state (weights, Muon momentum, AdamW moments, balancing)  in {}\n",
               a.model, double(bytes) / 1e6, fs::absolute(a.dir).string());
    if (c.size() > 1)
        fmt::print("  {} ranks, each writing its part; asynchronous writer's images per rank: {} MB\n", c.size(),
                   parts);
    fmt::print("  disk: sequential write + fsync       {:8.1f} MB/s (median of {}; best {:.1f} MB/s)\n", disk / 1e6,
               disk_s.size(), disk_best / 1e6);
    fmt::print("  synchronous save: training blocked   {:8.1f} ms\n", 1e3 * sync);
    fmt::print("  asynchronous save: training blocked  {:8.2f} ms  = {:.1f}% of the synchronous save (goal ≤ 5%)\n",
               1e3 * blocked, 100 * blocked / sync);
    fmt::print("  asynchronous save: write in background {:6.1f} ms  = {:.1f} MB/s = {:.0f}% of the disk (goal ≥ 70%)\n",
               1e3 * wr, double(file_bytes) / wr / 1e6, 100 * double(file_bytes) / wr / disk);
    fmt::print("  training step {:.1f} ms alone, {:.1f} ms while the save runs beside it (medians of {})\n", 1e3 * plain,
               1e3 * overlapped, rounds);
}

} // namespace zaya::cli
