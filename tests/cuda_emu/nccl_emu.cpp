// NCCL on the CPU (include/nccl.h), for zaya_emu: the NCCL communicator (src/dist/comm_nccl.cu) runs unchanged over
// emulated GPUs, one per process. Collectives between several ranks are MPI's, on a duplicate of MPI_COMM_WORLD
// (mpirun starts the ranks, and MPI bootstraps NCCL's unique id as on a GPU machine); one rank needs no MPI.
//
// What a GPU would reject is rejected here too, with NCCL's error codes: a buffer that is not device memory (inside
// one cudaMalloc'd allocation: a host pointer is the classic mistake of staging code), a peer or root out of range,
// a reduction other than a sum (the only one zaya asks for), a communicator whose ranks got different unique ids
// (on GPUs that hangs). An operation runs as host work queued on its stream (emu::enqueue_host_work): after the
// kernels launched before it, and as late as the program lets it — when the stream is waited for, or for a blocking
// stream when the legacy stream next does something — as a GPU may run it while later kernels go on. So a kernel
// that writes a buffer a started collective still reads, or a read of its result before the wait, changes the
// numbers here, as it could on GPUs. Inside ncclGroupStart/End, operations are collected and queued at the end as
// one piece of work. A piece of work posts its point-to-point operations non-blocking first, so a group that sends
// and receives does not deadlock, then runs its collectives in order. (zaya_emu runs kernels synchronously: they
// are done when work runs.)
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#ifdef ZAYA_WITH_MPI
#include <mpi.h>
#endif

struct ncclComm {
    int rank = 0, nranks = 1;
#ifdef ZAYA_WITH_MPI
    MPI_Comm mpi = MPI_COMM_NULL;
#endif
};

namespace {

enum class Kind { AllReduce, Reduce, Broadcast, Send, Recv };
struct Op {
    Kind kind;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t type;
    int root; // Reduce and Broadcast: the root; Send and Recv: the peer
    ncclComm_t comm;
    cudaStream_t stream;
};

int group_depth = 0;
std::vector<Op> grouped;

bool is_p2p(const Op &op) { return op.kind == Kind::Send || op.kind == Kind::Recv; }

size_t type_bytes(ncclDataType_t t) {
    switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    }
    return 0;
}

bool buffer_ok(const void *p, size_t bytes) { return bytes == 0 || (p && emu::device_range(p, bytes)); }

ncclResult_t validate(const Op &op) {
    if (!op.comm) return ncclInvalidArgument;
    const size_t bytes = op.count * type_bytes(op.type);
    if (type_bytes(op.type) == 0) return ncclInvalidArgument;
    if ((op.kind != Kind::AllReduce) && (op.root < 0 || op.root >= op.comm->nranks)) return ncclInvalidArgument;
    if (is_p2p(op) && op.root == op.comm->rank) return ncclInvalidArgument; // (NCCL allows it; zaya never does)
    if (op.kind != Kind::Recv && !buffer_ok(op.send, bytes)) return ncclInvalidArgument;
    if (op.kind != Kind::Send && !buffer_ok(op.recv, bytes)) return ncclInvalidArgument;
    return ncclSuccess;
}

#ifdef ZAYA_WITH_MPI
MPI_Datatype mpi_type(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: return MPI_INT8_T;
    case ncclUint8: return MPI_UINT8_T;
    case ncclFloat16: return MPI_UINT16_T; // moved, never summed (sums of halves are refused in ncclReduce & co.)
    case ncclInt32: return MPI_INT32_T;
    case ncclUint32: return MPI_UINT32_T;
    case ncclFloat32: return MPI_FLOAT;
    case ncclInt64: return MPI_INT64_T;
    case ncclUint64: return MPI_UINT64_T;
    case ncclFloat64: return MPI_DOUBLE;
    }
    return MPI_DATATYPE_NULL;
}

// MPI counts are ints: larger buffers go in pieces of 2^30 elements.
constexpr size_t kPiece = size_t(1) << 30;

// One collective between several ranks (point-to-point operations are posted, below).
ncclResult_t run_collective(const Op &op) {
    const ncclComm &c = *op.comm;
    const MPI_Datatype t = mpi_type(op.type);
    const size_t bytes = type_bytes(op.type);
    if (op.kind == Kind::Broadcast && c.rank == op.root && op.send != op.recv)
        std::memmove(op.recv, op.send, op.count * bytes);
    for (size_t at = 0; at < op.count; at += kPiece) {
        const int n = int(std::min(kPiece, op.count - at));
        const void *s = static_cast<const char *>(op.send) + at * bytes;
        void *r = static_cast<char *>(op.recv) + at * bytes;
        int rc;
        if (op.kind == Kind::AllReduce) rc = MPI_Allreduce(s == r ? MPI_IN_PLACE : s, r, n, t, MPI_SUM, c.mpi);
        else if (op.kind == Kind::Broadcast) rc = MPI_Bcast(r, n, t, op.root, c.mpi);
        else if (c.rank == op.root) rc = MPI_Reduce(s == r ? MPI_IN_PLACE : s, r, n, t, MPI_SUM, op.root, c.mpi);
        else rc = MPI_Reduce(s, nullptr, n, t, MPI_SUM, op.root, c.mpi);
        if (rc != MPI_SUCCESS) return ncclSystemError;
    }
    return ncclSuccess;
}

// Posts one point-to-point operation without waiting.
ncclResult_t post(const Op &op, std::vector<MPI_Request> &requests) {
    const MPI_Datatype t = mpi_type(op.type);
    const size_t bytes = type_bytes(op.type);
    for (size_t at = 0; at < op.count; at += kPiece) {
        const int n = int(std::min(kPiece, op.count - at));
        MPI_Request q;
        const int rc = op.kind == Kind::Send
                           ? MPI_Isend(static_cast<const char *>(op.send) + at * bytes, n, t, op.root, 0,
                                       op.comm->mpi, &q)
                           : MPI_Irecv(static_cast<char *>(op.recv) + at * bytes, n, t, op.root, 0, op.comm->mpi, &q);
        if (rc != MPI_SUCCESS) return ncclSystemError;
        requests.push_back(q);
    }
    return ncclSuccess;
}
#endif

// A collective of one rank: a copy (or the data left in place). (validate lets no point-to-point operation through
// with one rank: there is no peer.)
void run_alone(const Op &op) {
    if (op.send != op.recv) std::memmove(op.recv, op.send, op.count * type_bytes(op.type));
}

ncclResult_t run_ops(const std::vector<Op> &ops) {
#ifdef ZAYA_WITH_MPI
    std::vector<MPI_Request> requests;
    for (const Op &op : ops)
        if (is_p2p(op))
            if (const ncclResult_t r = post(op, requests); r != ncclSuccess) return r;
    for (const Op &op : ops) {
        if (is_p2p(op)) continue;
        if (op.comm->nranks == 1) run_alone(op);
        else if (const ncclResult_t r = run_collective(op); r != ncclSuccess) return r;
    }
    if (!requests.empty() && MPI_Waitall(int(requests.size()), requests.data(), MPI_STATUSES_IGNORE) != MPI_SUCCESS)
        return ncclSystemError;
#else
    for (const Op &op : ops) run_alone(op); // one rank: collectives only
#endif
    return ncclSuccess;
}

// Queues ops on their stream (the first's: a group's ops share one here). A failure there cannot be returned to
// the call that queued it (a GPU reports it asynchronously too): it ends the process, naming the result.
void schedule(std::vector<Op> ops) {
    const cudaStream_t stream = ops.front().stream;
    emu::enqueue_host_work(stream, [ops = std::move(ops)] {
        if (const ncclResult_t r = run_ops(ops); r != ncclSuccess) {
            std::fprintf(stderr, "nccl_emu: a queued operation failed: %s\n", ncclGetErrorString(r));
            std::abort();
        }
    });
}

ncclResult_t issue(const Op &op) {
    if (const ncclResult_t r = validate(op); r != ncclSuccess) return r;
    if (group_depth > 0) grouped.push_back(op);
    else schedule({op});
    return ncclSuccess;
}

} // namespace

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    }
    return "unknown result code";
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    std::random_device random;
    for (size_t i = 0; i < sizeof(id->internal); i += sizeof(uint32_t)) {
        const uint32_t word = random();
        std::memcpy(id->internal + i, &word, sizeof word);
    }
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, [[maybe_unused]] ncclUniqueId id, int rank) {
    if (!comm) return ncclInvalidArgument;
    *comm = nullptr;
    if (nranks < 1 || rank < 0 || rank >= nranks) return ncclInvalidArgument;
    auto c = std::make_unique<ncclComm>();
    c->rank = rank, c->nranks = nranks;
    if (nranks > 1) {
#ifdef ZAYA_WITH_MPI
        // The stand-in's one layout: the ranks are MPI's ranks of every process mpirun started.
        int initialised = 0, world_rank = -1, world_size = 0;
        MPI_Initialized(&initialised);
        if (!initialised) return ncclInvalidUsage;
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world_size);
        if (world_rank != rank || world_size != nranks) return ncclInvalidUsage;
        if (MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi) != MPI_SUCCESS) return ncclSystemError;
        // Every rank must hold rank 0's id (the bootstrap's job): compared here, and refused by all ranks together.
        ncclUniqueId root = id;
        MPI_Bcast(root.internal, int(sizeof(root.internal)), MPI_BYTE, 0, c->mpi);
        int same = std::memcmp(root.internal, id.internal, sizeof(id.internal)) == 0 ? 1 : 0;
        MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_MIN, c->mpi);
        if (!same) {
            MPI_Comm_free(&c->mpi);
            return ncclInvalidUsage;
        }
#else
        return ncclInvalidUsage; // several ranks need MPI here
#endif
    }
    *comm = c.release();
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclInvalidArgument;
#ifdef ZAYA_WITH_MPI
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (comm->mpi != MPI_COMM_NULL && !finalised) MPI_Comm_free(&comm->mpi);
#endif
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    delete comm; // (its MPI communicator goes with the job, which the caller ends)
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    if (op != ncclSum || datatype == ncclFloat16) return ncclInvalidArgument;
    return issue({Kind::AllReduce, sendbuff, recvbuff, count, datatype, 0, comm, stream});
}

ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
    if (op != ncclSum || datatype == ncclFloat16) return ncclInvalidArgument;
    // Only the root's receive buffer is written (others may pass any), as NCCL documents.
    const bool root_here = comm && comm->rank == root;
    return issue({Kind::Reduce, sendbuff, root_here ? recvbuff : const_cast<void *>(sendbuff), count, datatype, root,
                  comm, stream});
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    // Only the root's send buffer is read.
    const bool root_here = comm && comm->rank == root;
    return issue({Kind::Broadcast, root_here ? sendbuff : recvbuff, recvbuff, count, datatype, root, comm, stream});
}

ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return issue({Kind::Send, sendbuff, nullptr, count, datatype, peer, comm, stream});
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
    return issue({Kind::Recv, nullptr, recvbuff, count, datatype, peer, comm, stream});
}

ncclResult_t ncclGroupStart() {
    ++group_depth;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
    if (group_depth == 0) return ncclInvalidUsage;
    if (--group_depth > 0) return ncclSuccess;
    std::vector<Op> ops;
    ops.swap(grouped);
    if (!ops.empty()) schedule(std::move(ops));
    return ncclSuccess;
}
