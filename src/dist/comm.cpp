#include "dist/comm.h"

#include "core/error.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#ifdef ZAYA_WITH_MPI
#include <mpi.h>
#endif
#ifdef ZAYA_WITH_NCCL
#include "dist/comm_nccl.h"
#endif

namespace zaya {

bool launched_by_mpi() {
    for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
        if (std::getenv(v)) return true;
    return false;
}

#ifdef ZAYA_WITH_MPI
namespace {

void check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail("MPI {} failed: {}", what, std::string(msg, size_t(len)));
}

// Watches the operation in progress (one at a time: collectives are called from one thread) and aborts the job
// when one has not completed within the timeout. MPI_Abort is called from the watchdog's own thread: OpenMPI
// implements it by asking the launcher to kill the job, which needs no progress from the blocked thread.
class Watchdog {
  public:
    explicit Watchdog(int rank) : rank_(rank) {}
    ~Watchdog() { stop(); }
    void start(double seconds) {
        stop();
        if (seconds <= 0) return;
        timeout_ = seconds;
        quit_ = false;
        thread_ = std::thread([this] { run(); });
    }
    void stop() {
        if (!thread_.joinable()) return;
        {
            std::lock_guard lk(mu_);
            quit_ = true;
        }
        cv_.notify_all();
        thread_.join();
    }
    void enter(const char *what, int peer) {
        since_.store(now_ns(), std::memory_order_relaxed);
        peer_.store(peer, std::memory_order_relaxed);
        what_.store(what, std::memory_order_release);
    }
    void leave() { what_.store(nullptr, std::memory_order_release); }

  private:
    static int64_t now_ns() {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(
                   std::chrono::steady_clock::now().time_since_epoch())
            .count();
    }
    void run() {
        std::unique_lock lk(mu_);
        while (!cv_.wait_for(lk, std::chrono::milliseconds(200), [&] { return quit_; })) {
            const char *what = what_.load(std::memory_order_acquire);
            if (!what) continue;
            const double waited = double(now_ns() - since_.load(std::memory_order_relaxed)) * 1e-9;
            if (waited < timeout_) continue;
            const int peer = peer_.load(std::memory_order_relaxed);
            char with[32] = "";
            if (peer >= 0) std::snprintf(with, sizeof with, " (rank %d)", peer);
            std::fprintf(stderr,
                         "zaya: error: rank %d: MPI %s%s has not completed after %.0f s (--comm-timeout): another "
                         "rank died or hangs; aborting the job\n",
                         rank_, what, with, waited);
            std::fflush(stderr);
            MPI_Abort(MPI_COMM_WORLD, 3);
            std::_Exit(3); // not reached
        }
    }

    int rank_;
    double timeout_ = 0;
    std::atomic<const char *> what_{nullptr};
    std::atomic<int64_t> since_{0};
    std::atomic<int> peer_{-1};
    std::mutex mu_;
    std::condition_variable cv_;
    bool quit_ = false;
    std::thread thread_;
};

// Marks one operation for the watchdog for as long as it runs.
class Watched {
  public:
    Watched(Watchdog &w, const char *what, int peer = -1) : w_(w) { w_.enter(what, peer); }
    ~Watched() { w_.leave(); }
    Watched(const Watched &) = delete;
    Watched &operator=(const Watched &) = delete;

  private:
    Watchdog &w_;
};

// Large buffers go in pieces: MPI counts are int.
template <typename T> void allreduce(T *data, size_t n, MPI_Datatype type, MPI_Comm comm) {
    constexpr size_t kPiece = size_t(1) << 28;
    for (size_t at = 0; at < n; at += kPiece) {
        const int count = int(std::min(kPiece, n - at));
        check(MPI_Allreduce(MPI_IN_PLACE, data + at, count, type, MPI_SUM, comm), "allreduce");
    }
}

class Mpi final : public Communicator, public std::enable_shared_from_this<Mpi> {
  public:
    Mpi() {
        int provided = 0;
        check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
        // Errors come back as return codes (then zaya::Error), not as an abort inside MPI.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
        watchdog_ = std::make_shared<Watchdog>(rank_); // it names the rank in the world
    }
    // A group of `parent`'s ranks (split): it keeps the parent, and so MPI, alive; it shares the parent's watchdog
    // (one thread calls both, one operation at a time).
    Mpi(MPI_Comm comm, std::shared_ptr<Mpi> parent)
        : comm_(comm), parent_(std::move(parent)), watchdog_(parent_->watchdog_) {
        MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
        MPI_Comm_rank(comm_, &rank_);
        MPI_Comm_size(comm_, &size_);
    }
    ~Mpi() override {
        if (parent_) {
            MPI_Comm_free(&comm_);
            return;
        }
        watchdog_.reset();
        MPI_Finalize();
    }
    std::shared_ptr<Communicator> split(int color, int key) override {
        MPI_Comm sub;
        {
            Watched w(*watchdog_, "split into groups");
            check(MPI_Comm_split(comm_, color, key, &sub), "comm_split");
        }
        return std::make_shared<Mpi>(sub, std::static_pointer_cast<Mpi>(shared_from_this()));
    }
    void set_watchdog(double seconds) override { watchdog_->start(seconds); }
    [[noreturn]] void abort(int code) override {
        std::fflush(stdout);
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code);
        std::_Exit(code); // not reached
    }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string name() const override { return "mpi"; }
    void allreduce_sum(float *d, size_t n) override {
        Watched w(*watchdog_, "allreduce");
        allreduce(d, n, MPI_FLOAT, comm_);
    }
    void allreduce_sum(double *d, size_t n) override {
        Watched w(*watchdog_, "allreduce");
        allreduce(d, n, MPI_DOUBLE, comm_);
    }
    void allreduce_sum(int64_t *d, size_t n) override {
        Watched w(*watchdog_, "allreduce");
        allreduce(d, n, MPI_INT64_T, comm_);
    }
    void start_reduce_sum(float *base, const std::vector<Part> &parts) override {
        for (const Part &p : parts)
            for (size_t at = 0; at < p.count; at += kPiece) {
                float *d = base + p.offset + at;
                MPI_Request r;
                check(MPI_Ireduce(p.owner == rank_ ? MPI_IN_PLACE : d, d, int(std::min(kPiece, p.count - at)),
                                  MPI_FLOAT, MPI_SUM, p.owner, comm_, &r),
                      "ireduce");
                pending_.push_back(r);
            }
    }
    void progress() override {
        if (pending_.empty()) return;
        int done = 0;
        check(MPI_Testall(int(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE), "testall");
        if (done) pending_.clear();
    }
    void wait_all() override {
        if (pending_.empty()) return;
        Watched w(*watchdog_, "sums of gradient buckets");
        check(MPI_Waitall(int(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE), "waitall");
        pending_.clear();
    }
    void broadcast(float *d, size_t n, int root) override {
        Watched w(*watchdog_, "broadcast");
        for (size_t at = 0; at < n; at += kPiece)
            check(MPI_Bcast(d + at, int(std::min(kPiece, n - at)), MPI_FLOAT, root, comm_), "broadcast");
    }
    void broadcast_blocks(float *base, const std::vector<Block> &blocks, int root) override {
        // One derived datatype over the blocks: byte displacements are 64-bit (MPI_Aint), lengths int, so long
        // blocks are cut.
        std::vector<int> lens;
        std::vector<MPI_Aint> disps;
        for (const Block &b : blocks)
            for (size_t at = 0; at < b.count; at += kPiece) {
                lens.push_back(int(std::min(kPiece, b.count - at)));
                disps.push_back(MPI_Aint((b.offset + at) * sizeof(float)));
            }
        if (lens.empty()) return; // every rank has the same blocks: all skip
        Watched w(*watchdog_, "broadcast of updated parameters");
        MPI_Datatype type;
        check(MPI_Type_create_hindexed(int(lens.size()), lens.data(), disps.data(), MPI_FLOAT, &type),
              "type_create_hindexed");
        check(MPI_Type_commit(&type), "type_commit");
        const int rc = MPI_Bcast(base, 1, type, root, comm_);
        MPI_Type_free(&type);
        check(rc, "broadcast");
    }
    void send(const float *d, size_t n, int dest) override {
        Watched w(*watchdog_, "send", dest);
        for (size_t at = 0; at < n; at += kPiece)
            check(MPI_Send(d + at, int(std::min(kPiece, n - at)), MPI_FLOAT, dest, 0, comm_), "send");
    }
    void recv(float *d, size_t n, int src) override {
        Watched w(*watchdog_, "receive", src);
        for (size_t at = 0; at < n; at += kPiece)
            check(MPI_Recv(d + at, int(std::min(kPiece, n - at)), MPI_FLOAT, src, 0, comm_,
                           MPI_STATUS_IGNORE),
                  "recv");
    }
    void barrier() override {
        Watched w(*watchdog_, "barrier");
        check(MPI_Barrier(comm_), "barrier");
    }

  private:
    static constexpr size_t kPiece = size_t(1) << 28; // MPI counts are int
    MPI_Comm comm_ = MPI_COMM_WORLD;
    std::shared_ptr<Mpi> parent_; // a group's: what it was split from
    int rank_ = 0, size_ = 1;
    std::shared_ptr<Watchdog> watchdog_;
    std::vector<MPI_Request> pending_; // started non-blocking sums
};

} // namespace
#endif

namespace {
std::shared_ptr<Communicator> process_communicator() {
    if (!launched_by_mpi()) return std::make_shared<SingleProcess>();
#ifdef ZAYA_WITH_MPI
    return std::make_shared<Mpi>();
#else
    fail("started by an MPI launcher, but this zaya was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}
} // namespace

std::shared_ptr<Communicator> communicator_from_environment() {
    static std::shared_ptr<Communicator> comm = []() -> std::shared_ptr<Communicator> {
        const char *which = std::getenv("ZAYA_COMM");
        const std::string choice = which ? which : "";
        if (choice.empty() || choice == "auto") return process_communicator();
        if (choice == "nccl") {
#ifdef ZAYA_WITH_NCCL
            return make_nccl_communicator(process_communicator()); // MPI (or nothing) carries NCCL's id
#else
            fail("ZAYA_COMM=nccl, but this zaya was built without the CUDA backend and NCCL");
#endif
        }
        fail("ZAYA_COMM must be 'auto' (MPI when launched by mpirun, else one process) or 'nccl', got '{}'", choice);
    }();
    return comm;
}

} // namespace zaya
