#include "optim/grad_norm.h"

#include "core/error.h"
#include "optim/sum_squares.h"

#include <algorithm>

namespace zaya {

GradSumSquares::GradSumSquares(const ParamLayout &layout, const std::vector<Communicator::Part> &owners, int rank) {
    size_t slot = 0;
    auto owner = owners.begin(); // owners are in offset order, and so are the chunks: one walk
    for (const ParamView &v : layout.views) {
        if (!v.trainable) continue;
        const size_t chunk = sum_squares_chunk(v.numel);
        for (size_t a = 0; a < v.numel; a += chunk) {
            const size_t begin = v.offset + a, end = v.offset + std::min(v.numel, a + chunk);
            if (owners.empty()) { // one process: the chunk is its one piece
                mine_.emplace_back(begin, end - begin);
                mine_slot_.push_back(slot++);
            } else {
                while (owner != owners.end() && owner->offset + owner->count <= begin) ++owner;
                for (size_t at = begin; at < end;) {
                    if (owner == owners.end() || owner->offset > at)
                        fail("gradient norm: element {} of '{}' has no owner among the ranks", at - v.offset, v.name);
                    const size_t stop = std::min(end, owner->offset + owner->count);
                    if (owner->owner == rank) {
                        mine_.emplace_back(at, stop - at);
                        mine_slot_.push_back(slot);
                    }
                    ++slot;
                    at = stop;
                    if (stop == owner->offset + owner->count) ++owner;
                }
            }
            chunk_end_.push_back(slot);
        }
        view_end_.push_back(chunk_end_.size());
    }
    slots_.assign(slot, 0.0);
    mine_partials_.assign(mine_.size(), 0.0);
}

double GradSumSquares::operator()(const real *grads, Backend &backend, Communicator *comm) {
    backend.sum_squares_partials(grads, mine_, mine_partials_.data());
    const bool shared = comm && comm->size() > 1;
    if (shared) std::fill(slots_.begin(), slots_.end(), 0.0);
    for (size_t i = 0; i < mine_.size(); ++i) slots_[mine_slot_[i]] = mine_partials_[i];
    if (shared) comm->allreduce_sum(slots_.data(), slots_.size());
    else if (mine_.size() != slots_.size()) fail("gradient norm: this process owns part of the gradients, but no communicator was given");
    // The order sum_squares adds in: a chunk's pieces, a view's chunks, then the views.
    double total = 0.0;
    size_t piece = 0, chunk = 0;
    for (const size_t view_end : view_end_) {
        double view = 0.0;
        for (; chunk < view_end; ++chunk) {
            double partial = 0.0;
            for (; piece < chunk_end_[chunk]; ++piece) partial += slots_[piece];
            view += partial;
        }
        total += view;
    }
    return total;
}

} // namespace zaya
