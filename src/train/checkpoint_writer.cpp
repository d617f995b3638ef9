#include "train/checkpoint_writer.h"

#include "core/error.h"

#include <chrono>
#include <cstring>

namespace zaya {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
} // namespace

CheckpointWriter::CheckpointWriter(Trainer &t, std::string run_dir, int64_t keep)
    : run_dir_(std::move(run_dir)), keep_(keep) {
    size_t total = 0;
    for (const CheckpointTensor &c : checkpoint_tensors(t)) total += c.numel;
    snapshot_ = RealBuffer::zeros(total); // touched now: no page faults during a save
    thread_ = std::thread([this] { run(); });
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
    step_ = t.step_count();
    meta_ = checkpoint_meta(t);
    live_ = checkpoint_tensors(t);
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
    for (;;) {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return have_job_ || stop_; });
        if (!have_job_) return;
        have_job_ = false;
        SaveReport r;
        r.step = step_;
        std::vector<CheckpointTensor> staged = live_;
        nlohmann::json meta = std::move(meta_);
        lk.unlock();

        auto t0 = std::chrono::steady_clock::now();
        size_t at = 0;
        for (CheckpointTensor &c : staged) {
            std::memcpy(snapshot_.data() + at, c.data, c.numel * sizeof(real));
            c.data = snapshot_.data() + at;
            at += c.numel;
            r.bytes += c.numel * sizeof(real);
        }
        r.copy_s = seconds_since(t0);
        {
            std::lock_guard g(mu_);
            snapshot_done_ = true;
        }
        cv_.notify_all();

        t0 = std::chrono::steady_clock::now();
        try {
            r.dir = checkpoint_write(run_dir_, r.step, staged, std::move(meta));
            if (keep_ > 0) checkpoint_prune(run_dir_, keep_);
        } catch (const std::exception &e) {
            r.error = e.what();
            r.dir.clear();
        }
        r.write_s = seconds_since(t0);
        {
            std::lock_guard g(mu_);
            reports_.push_back(std::move(r));
            busy_ = false;
        }
        cv_.notify_all();
    }
}

} // namespace zaya
