#include "train/checkpoint_writer.h"

#include "core/error.h"

#include <chrono>
#include <cstring>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace zaya {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
} // namespace

CheckpointWriter::CheckpointWriter(Trainer &t, std::string run_dir, int64_t keep)
    : run_dir_(std::move(run_dir)), keep_(keep), rank_(t.comm().rank()), ranks_(t.comm().size()),
      tensors_(checkpoint_tensors(t)), images_(checkpoint_images(tensors_, rank_, ranks_)) {
    thread_ = std::thread([this] { run(); });
}

size_t CheckpointWriter::snapshot_bytes() const {
    size_t n = 0;
    for (const CheckpointImage &img : images_) n += img.bytes.capacity();
    return n;
}

CheckpointWriter::~CheckpointWriter() {
    {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return !busy_; });
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void CheckpointWriter::start(Trainer &t) {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !busy_; });
    t.refresh_host_copies(); // the live pointers are host copies: on a GPU they are downloaded now
    step_ = t.step_count();
    begun_ = checkpoint_begin(t.comm(), run_dir_, step_); // on this thread: MPI is used from the main thread only
    meta_ = checkpoint_meta(t); // the tensors' live pointers were taken in the constructor: same trainer
    have_job_ = true;
    busy_ = true;
    snapshot_done_ = false;
    blocked_s_ += seconds_since(t0);
    lk.unlock();
    cv_.notify_all();
}

void CheckpointWriter::wait_snapshot() {
    const auto t0 = std::chrono::steady_clock::now();
    std::unique_lock lk(mu_);
    if (snapshot_done_) return;
    cv_.wait(lk, [&] { return snapshot_done_; });
    blocked_s_ += seconds_since(t0);
}

bool CheckpointWriter::busy() const {
    std::lock_guard lk(mu_);
    return busy_;
}

std::optional<SaveReport> CheckpointWriter::finish() {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return !busy_; });
    if (reports_.empty()) return std::nullopt;
    SaveReport r = reports_.back();
    reports_.clear();
    return r;
}

std::vector<SaveReport> CheckpointWriter::poll() {
    std::lock_guard lk(mu_);
    std::vector<SaveReport> out;
    out.swap(reports_);
    return out;
}

void CheckpointWriter::run() {
    // Ahead of the compute threads when it needs the CPU (page pinning, metadata): it mostly waits for the disk,
    // and a save that finishes sooner frees the disk and the next save's snapshot sooner. Needs CAP_SYS_NICE;
    // without it the thread keeps the default priority.
    ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), -10);
    for (;;) {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return have_job_ || stop_; });
        if (!have_job_) return;
        have_job_ = false;
        SaveReport r;
        r.step = step_;
        nlohmann::json meta = std::move(meta_);
        const std::string begun = begun_;
        lk.unlock();

        auto t0 = std::chrono::steady_clock::now();
        for (CheckpointImage &img : images_) checkpoint_image_snapshot(img);
        r.copy_s = seconds_since(t0);
        {
            std::lock_guard g(mu_);
            snapshot_done_ = true;
        }
        cv_.notify_all();

        t0 = std::chrono::steady_clock::now();
        try {
            const CheckpointSaved saved =
                checkpoint_write_images(run_dir_, r.step, rank_, ranks_, tensors_, images_, std::move(meta), begun);
            r.dir = saved.dir;
            r.bytes = saved.bytes;
            r.write_s = seconds_since(t0);
            if (keep_ > 0 && rank_ == 0) checkpoint_prune(run_dir_, keep_); // after the new one is complete, not timed
        } catch (const std::exception &e) {
            r.error = e.what();
            r.dir.clear();
            r.write_s = seconds_since(t0);
        }
        {
            std::lock_guard g(mu_);
            reports_.push_back(std::move(r));
            busy_ = false;
        }
        cv_.notify_all();
    }
}

} // namespace zaya
