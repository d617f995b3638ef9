// The communicator between data-parallel ranks (design: one interface; a single-process implementation, an MPI
// one, and later NCCL). Collectives are blocking, called by every rank in the same order from one thread each.
//
// Which one a process gets: communicator_from_environment() returns the MPI communicator when the process was
// started by an MPI launcher (mpirun / srun set OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK) and zaya was built
// with MPI; otherwise the single-process one. ZAYA_COMM=nccl picks NCCL between GPUs instead (dist/comm_nccl.h;
// built with the CUDA backend), bootstrapped by that one.
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zaya {

class Backend;

class Communicator {
  public:
    virtual ~Communicator() = default;
    virtual int rank() const = 0;
    virtual int size() const = 0;
    virtual std::string name() const = 0; // "single", "mpi"
    // In-place element-wise sums over all ranks.
    virtual void allreduce_sum(float *data, size_t n) = 0;
    virtual void allreduce_sum(double *data, size_t n) = 0;
    virtual void allreduce_sum(int64_t *data, size_t n) = 0;
    // A range of a buffer summed onto one rank: ZeRO-1's gradients, each summed onto the rank that owns it (its
    // optimizer state), which alone needs the sum.
    struct Part {
        size_t offset = 0, count = 0; // in floats from the buffer's base
        int owner = 0;
    };
    // Non-blocking sums onto owners (gradient buckets summed while the backward pass goes on): starts summing each
    // part of `base` over all ranks into its owner's copy and returns; progress() lets started sums advance (MPI
    // moves data only inside MPI calls), wait_all() completes all of them, after which each owner's parts hold the
    // sums (the other ranks' hold what they held). The parts must not be touched in between. Started in the same
    // order, with the same parts, on every rank. Each rank sends each part once (about the gradient's size over
    // all parts), where an all-reduce sends twice.
    virtual void start_reduce_sum(float *base, const std::vector<Part> &parts) = 0;
    virtual void progress() = 0;
    virtual void wait_all() = 0;
    // `data` of rank `root` to every rank.
    virtual void broadcast(float *data, size_t n, int root) = 0;
    // Several disjoint ranges of one buffer from rank `root` to every rank in one collective, without packing
    // them into a staging buffer (ZeRO-1: each owner's updated parameters, scattered over the flat buffer).
    // Every rank passes the same blocks.
    struct Block {
        size_t offset = 0, count = 0; // in floats from `base`
    };
    virtual void broadcast_blocks(float *base, const std::vector<Block> &blocks, int root) = 0;
    // The same on buffers in a device backend's memory (a GPU trainer's gradients and parameters). NCCL works on
    // them directly; the default stages them through host memory with the backend's copies (correct with any
    // communicator, and what the emulated GPU's tests use).
    // start_reduce_sum_device starts the sums once the work queued so far on the backend's stream (the backward
    // kernels that write them) is done, and returns without waiting for either; wait_all_device() completes every
    // sum started, after which the backend's later work sees them. NCCL runs them on a stream of their own while
    // the backward pass goes on; the default downloads the parts at once (waiting for the device), starts a host
    // sum, and uploads the parts this rank owns in wait_all_device.
    virtual void start_reduce_sum_device(float *base, const std::vector<Part> &parts, Backend &backend);
    virtual void wait_all_device(Backend &backend);
    virtual void broadcast_blocks_device(float *base, const std::vector<Block> &blocks, int root, Backend &backend);
    // Point to point (checkpoint gathering): `n` floats to / from one other rank, matched in call order.
    virtual void send(const float *data, size_t n, int dest) = 0;
    virtual void recv(float *data, size_t n, int src) = 0;
    virtual void barrier() = 0;
    // A rank that died or hangs leaves the others blocked in a collective forever. With a watchdog, a collective
    // or transfer that has not completed after `seconds` aborts the whole job (MPI_Abort, after a message naming
    // this rank and the operation); 0 turns it off.
    virtual void set_watchdog(double seconds) = 0;
    // Ends every process of the job with `code` (a rank that fails alone must not leave the others waiting).
    [[noreturn]] virtual void abort(int code) = 0;
    bool is_root() const { return rank() == 0; }
    // A communicator over the ranks that pass the same `color`, ranked by `key` (MPI_Comm_split): context
    // parallelism's groups. Called by every rank at once. Its transfers and pending sums are its own, apart from
    // this one's (a group's wait_all does not wait for the gradient buckets started here). The default fails: only
    // the host communicators (one process, MPI) can be split so far.
    virtual std::shared_ptr<Communicator> split(int color, int key);

  private:
    struct Staged { // the host copy of the device span the parts lie in, summed between start_ and wait_all_device
        float *device = nullptr; // the span's first element
        std::vector<Part> parts; // offsets into the span
        std::vector<float> host; // kept (and reused) across steps: no allocation per step once grown
    };
    std::vector<Staged> staged_;
    size_t staged_used_ = 0;
};

class SingleProcess : public Communicator { // not final: tests derive fake ranks from it
  public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::string name() const override { return "single"; }
    void allreduce_sum(float *, size_t) override {}
    void allreduce_sum(double *, size_t) override {}
    void allreduce_sum(int64_t *, size_t) override {}
    void start_reduce_sum(float *, const std::vector<Part> &) override {}
    void progress() override {}
    void wait_all() override {}
    void broadcast(float *, size_t, int) override {}
    void broadcast_blocks(float *, const std::vector<Block> &, int) override {}
    void send(const float *, size_t, int dest) override { no_peer(dest); }
    void recv(float *, size_t, int src) override { no_peer(src); }
    void barrier() override {}
    void set_watchdog(double) override {}
    [[noreturn]] void abort(int code) override;
    std::shared_ptr<Communicator> split(int, int) override { return std::make_shared<SingleProcess>(); }

  private:
    [[noreturn]] static void no_peer(int rank);
};

// Shared by every user in the process; MPI is initialised on first use and finalised at exit.
std::shared_ptr<Communicator> communicator_from_environment();

// Runs a job's `body` on this rank and returns its result. With several ranks an error ends the whole job: this
// rank prints "zaya: error: rank R: ..." and aborts, since its exit alone would leave the others blocked in their
// next collective (and itself in MPI_Finalize). With one process the error propagates as usual.
inline int run_or_abort_job(Communicator &comm, const std::function<int()> &body) {
    if (comm.size() == 1) return body();
    try {
        return body();
    } catch (const std::exception &e) {
        std::fprintf(stderr, "zaya: error: rank %d: %s\n", comm.rank(), e.what());
        comm.abort(1);
    }
    return 1; // not reached: abort ends the process
}

// True if an MPI launcher started this process (whether or not zaya was built with MPI).
bool launched_by_mpi();

} // namespace zaya
