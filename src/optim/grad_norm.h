// Σ g² over the trainable views: the square of the global gradient norm that clipping and the step guard use,
// computed in one fixed order whoever holds the gradients.
//
// Each trainable view is cut into sum_squares's chunks (optim/sum_squares.h) and each chunk into pieces, one per
// owner (ZeRO-1, optim/zero_shard.h: after the gradient sums a rank holds the summed gradient of its own ranges
// only). Every rank computes its pieces' partials into their slots of one list of all the pieces, one all-reduce
// of that list (each slot written by one rank and zero on the others, so exact in any order) gives every rank all of
// them, and each adds them up the same way: a chunk's pieces in order, a view's chunks in order, the views in layout
// order. A chunk that one rank owns whole is one piece, the very partial a single process computes, so the sum
// equals the single process's to the bit where no chunk straddles two owners (AdamW cuts and expert matrices not
// on chunk boundaries straddle, a few chunks: there it differs in the last bits). Same ranks, same bits.
#pragma once
#include "core/real.h"
#include "dist/comm.h"
#include "model/params.h"
#include "ops/backend.h"

#include <cstddef>
#include <utility>
#include <vector>

namespace zaya {

class GradSumSquares {
  public:
    // `owners`: who owns each trainable element (ShardPlan::owners, in offset order); empty: this process owns
    // every one (no data parallel). Every trainable element must have an owner.
    GradSumSquares(const ParamLayout &layout, const std::vector<Communicator::Part> &owners = {}, int rank = 0);

    // Σ g² over the trainable views of `grads` (in the backend's memory, this rank's owned ranges summed over the
    // ranks); `comm` may be null when one process owns everything.
    double operator()(const real *grads, Backend &backend, Communicator *comm = nullptr);

    size_t pieces() const { return slots_.size(); } // over all ranks
    size_t own_pieces() const { return mine_.size(); }

  private:
    std::vector<size_t> chunk_end_; // per chunk (layout order): one past its last piece
    std::vector<size_t> view_end_;  // per trainable view: one past its last chunk
    std::vector<std::pair<size_t, size_t>> mine_; // this rank's pieces: (offset, n) in the gradient buffer
    std::vector<size_t> mine_slot_;               // and their slots
    std::vector<double> mine_partials_, slots_;   // kept: no allocation per step
};

} // namespace zaya
