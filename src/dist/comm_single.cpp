// SingleProcess's out-of-line members and Communicator's default device collectives, on their own so that binaries
// without MPI or NCCL (the CUDA op tests) can link the single-process communicator alone.
#include "core/error.h"
#include "dist/comm.h"
#include "ops/backend.h"

#include <cstdlib>
#include <vector>

namespace zaya {

void Communicator::allreduce_sum_device(float *data, size_t n, Backend &backend) {
    std::vector<float> host(n);
    backend.download(host.data(), data, n * sizeof(float));
    allreduce_sum(host.data(), n);
    backend.upload(data, host.data(), n * sizeof(float));
}

void Communicator::broadcast_blocks_device(float *base, const std::vector<Block> &blocks, int root, Backend &backend) {
    for (const Block &b : blocks) {
        std::vector<float> host(b.count);
        if (rank() == root) backend.download(host.data(), base + b.offset, b.count * sizeof(float));
        broadcast(host.data(), b.count, root);
        if (rank() != root) backend.upload(base + b.offset, host.data(), b.count * sizeof(float));
    }
}

void SingleProcess::no_peer(int rank) {
    fail("communicator: rank {} does not exist in a single-process run", rank);
}

void SingleProcess::abort(int code) { std::exit(code); }

} // namespace zaya
