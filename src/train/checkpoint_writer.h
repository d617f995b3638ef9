// Asynchronous checkpoint saving (spec §D.5): training stops at most for a snapshot copy of its state; a
// background thread writes, checksums and fsyncs the checkpoint (train/checkpoint.h) while training goes on.
//
//   start(t)        waits for the previous save to finish, begins the new one with the other data-parallel ranks
//                   (every rank has a writer and calls start at the same step: rank 0 clears the temporary
//                   directory, the others wait for that), records the manifest fields (step, loader position,
//                   guard history — small) and hands the save to the writer thread.
//   writer thread   copies (and hashes) this rank's part of the state — its chunks, train/checkpoint.h — into the
//                   file images allocated once in the constructor (headers already in place), signals "snapshot
//                   taken", then writes the images with O_DIRECT (io/direct_write.h). Rank 0 then waits for the
//                   other ranks' reports, writes the manifest, renames into place, updates `latest`, prunes; the
//                   others report their part to it. No rank holds more than its own part: ZeRO-1's optimizer
//                   state and a 1/N share of the parameters.
//   wait_snapshot() blocks until the copy is complete. The trainer calls it right before the next update modifies
//                   the parameters and optimizer state (Trainer::set_before_update), so the copy overlaps the next
//                   step's forward and backward, which only read them.
//
// Errors (a full disk, an unwritable directory, on any rank) fail that save only: the temporary directory is
// removed, every complete checkpoint stays as it was, and the error is reported by poll()/finish() for the run to
// log — rank 0's report names every rank's error; another rank's report is done when its own part is.
#pragma once
#include "model/params.h"
#include "train/checkpoint.h"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace zaya {

struct SaveReport {
    int64_t step = 0;
    std::string dir;     // the checkpoint directory, when it succeeded (rank 0)
    std::string error;   // empty on success
    uint64_t bytes = 0;  // file bytes written: by every rank on rank 0, by this rank on the others
    double copy_s = 0;   // snapshot copy and hashing (writer thread)
    double write_s = 0;  // writing, fsync, rename, pointer update (writer thread); pruning is not counted
    bool ok() const { return error.empty(); }
};

class CheckpointWriter {
  public:
    // `keep` > 0 prunes to the newest `keep` checkpoints after each successful save.
    CheckpointWriter(Trainer &t, std::string run_dir, int64_t keep);
    ~CheckpointWriter(); // finishes the save in flight
    CheckpointWriter(const CheckpointWriter &) = delete;
    CheckpointWriter &operator=(const CheckpointWriter &) = delete;

    void start(Trainer &t);
    void wait_snapshot();
    std::optional<SaveReport> finish(); // waits for the save in flight; its report if not yet taken by poll()
    std::vector<SaveReport> poll();     // reports of saves completed since the last poll/finish, without waiting
    bool busy() const;

    double blocked_seconds() const { return blocked_s_; } // training time spent in start() and wait_snapshot()
    size_t snapshot_bytes() const; // memory of the images

  private:
    void run();

    std::string run_dir_;
    int64_t keep_;
    int rank_, ranks_;
    std::vector<CheckpointTensor> tensors_;
    std::vector<CheckpointImage> images_;
    std::string begun_; // checkpoint_begin's error for the save in flight
    mutable std::mutex mu_;
    std::condition_variable cv_;
    bool have_job_ = false, snapshot_done_ = true, busy_ = false, stop_ = false;
    int64_t step_ = 0;
    nlohmann::json meta_;
    std::vector<SaveReport> reports_;
    double blocked_s_ = 0;
    std::thread thread_;
};

} // namespace zaya
