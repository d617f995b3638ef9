// SingleProcess's out-of-line members and Communicator's default device collectives, on their own so that binaries
// without MPI or NCCL (the CUDA op tests) can link the single-process communicator alone.
#include "core/error.h"
#include "dist/comm.h"
#include "ops/backend.h"

#include <algorithm>
#include <cstdlib>
#include <vector>

namespace zaya {

void Communicator::start_reduce_sum_device(float *base, const std::vector<Part> &parts, Backend &backend) {
    if (parts.empty()) return;
    size_t begin = parts.front().offset, end = begin;
    for (const Part &p : parts) begin = std::min(begin, p.offset), end = std::max(end, p.offset + p.count);
    // Growing staged_ moves the earlier entries' vectors, which keeps their heap buffers (and so the host sums
    // already started on them) where they are.
    if (staged_used_ == staged_.size()) staged_.emplace_back();
    Staged &s = staged_[staged_used_++];
    s.device = base + begin;
    s.parts = parts;
    for (Part &p : s.parts) p.offset -= begin;
    s.host.resize(end - begin);
    backend.download(s.host.data(), s.device, s.host.size() * sizeof(float)); // one copy: the gaps are small
    start_reduce_sum(s.host.data(), s.parts);
}

void Communicator::wait_all_device(Backend &backend) {
    wait_all();
    for (size_t i = 0; i < staged_used_; ++i)
        for (const Part &p : staged_[i].parts)
            if (p.owner == rank())
                backend.upload(staged_[i].device + p.offset, staged_[i].host.data() + p.offset, p.count * sizeof(float));
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

std::shared_ptr<Communicator> Communicator::split(int, int) {
    fail("the {} communicator cannot be split into groups (context parallelism needs MPI between CPU processes)",
         name());
}

} // namespace zaya
