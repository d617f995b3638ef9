// SingleProcess's out-of-line members and Communicator's default device collectives, on their own so that binaries
// without MPI or NCCL (the CUDA op tests) can link the single-process communicator alone.
#include "core/error.h"
#include "dist/comm.h"
#include "ops/backend.h"

#include <cstdlib>
#include <vector>

namespace zaya {

void Communicator::start_allreduce_sum_device(float *data, size_t n, Backend &backend) {
    // Growing staged_ moves the earlier entries' vectors, which keeps their heap buffers (and so the host sums
    // already started on them) where they are.
    if (staged_used_ == staged_.size()) staged_.emplace_back();
    Staged &s = staged_[staged_used_++];
    s.device = data;
    s.host.resize(n);
    backend.download(s.host.data(), data, n * sizeof(float));
    start_allreduce_sum(s.host.data(), n);
}

void Communicator::wait_all_device(Backend &backend) {
    wait_all();
    for (size_t i = 0; i < staged_used_; ++i)
        backend.upload(staged_[i].device, staged_[i].host.data(), staged_[i].host.size() * sizeof(float));
    staged_used_ = 0;
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
