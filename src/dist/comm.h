// The communicator between data-parallel ranks (design: one interface; a single-process implementation, an MPI
// one, and later NCCL). Collectives are blocking, called by every rank in the same order from one thread each.
//
// Which one a process gets: communicator_from_environment() returns the MPI communicator when the process was
// started by an MPI launcher (mpirun / srun set OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK) and zaya was built
// with MPI; otherwise the single-process one.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zaya {

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
    // `data` of rank `root` to every rank.
    virtual void broadcast(float *data, size_t n, int root) = 0;
    virtual void barrier() = 0;
    bool is_root() const { return rank() == 0; }
};

class SingleProcess final : public Communicator {
  public:
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::string name() const override { return "single"; }
    void allreduce_sum(float *, size_t) override {}
    void allreduce_sum(double *, size_t) override {}
    void allreduce_sum(int64_t *, size_t) override {}
    void broadcast(float *, size_t, int) override {}
    void barrier() override {}
};

// Shared by every user in the process; MPI is initialised on first use and finalised at exit.
std::shared_ptr<Communicator> communicator_from_environment();

// True if an MPI launcher started this process (whether or not zaya was built with MPI).
bool launched_by_mpi();

} // namespace zaya
