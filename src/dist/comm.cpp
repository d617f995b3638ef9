#include "dist/comm.h"

#include "core/error.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#ifdef ZAYA_WITH_MPI
#include <mpi.h>
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

// Large buffers go in pieces: MPI counts are int.
template <typename T> void allreduce(T *data, size_t n, MPI_Datatype type) {
    constexpr size_t kPiece = size_t(1) << 28;
    for (size_t at = 0; at < n; at += kPiece) {
        const int count = int(std::min(kPiece, n - at));
        check(MPI_Allreduce(MPI_IN_PLACE, data + at, count, type, MPI_SUM, MPI_COMM_WORLD), "allreduce");
    }
}

class Mpi final : public Communicator {
  public:
    Mpi() {
        int provided = 0;
        check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "init");
        // Errors come back as return codes (then zaya::Error), not as an abort inside MPI.
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &size_);
    }
    ~Mpi() override { MPI_Finalize(); }
    int rank() const override { return rank_; }
    int size() const override { return size_; }
    std::string name() const override { return "mpi"; }
    void allreduce_sum(float *d, size_t n) override { allreduce(d, n, MPI_FLOAT); }
    void allreduce_sum(double *d, size_t n) override { allreduce(d, n, MPI_DOUBLE); }
    void allreduce_sum(int64_t *d, size_t n) override { allreduce(d, n, MPI_INT64_T); }
    void broadcast(float *d, size_t n, int root) override {
        constexpr size_t kPiece = size_t(1) << 28;
        for (size_t at = 0; at < n; at += kPiece)
            check(MPI_Bcast(d + at, int(std::min(kPiece, n - at)), MPI_FLOAT, root, MPI_COMM_WORLD), "broadcast");
    }
    void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }

  private:
    int rank_ = 0, size_ = 1;
};

} // namespace
#endif

std::shared_ptr<Communicator> communicator_from_environment() {
    static std::shared_ptr<Communicator> comm = []() -> std::shared_ptr<Communicator> {
        if (!launched_by_mpi()) return std::make_shared<SingleProcess>();
#ifdef ZAYA_WITH_MPI
        return std::make_shared<Mpi>();
#else
        fail("started by an MPI launcher, but this zaya was built without MPI (install libopenmpi-dev and rebuild)");
#endif
    }();
    return comm;
}

} // namespace zaya
