// ZeRO-1 sharding of the optimizer state over data-parallel ranks (spec §D.2: data parallelism with a distributed
// optimizer; Muon needs whole matrices).
//
//   Muon   — each whole matrix (each expert's matrices separately) has one owner rank, assigned greedily by
//            Newton–Schulz cost (most expensive first, to the least loaded rank): the owner alone keeps its
//            momentum, orthogonalises it and updates the matrix. Balancing compute also balances memory when the
//            matrices' smaller sides are alike (they are in every preset).
//   AdamW  — the AdamW ranges, concatenated in layout order, are cut into N contiguous pieces of (nearly) equal
//            length; rank r keeps exp_avg / exp_avg_sq of piece r and updates those parameters.
//
// Every rank computes the same plan from the same groups, so it knows where every other rank's updated
// parameters lie (param_blocks, for the broadcasts after the update) and which rank holds which part of every
// logical state tensor (for gathering checkpoints). One rank: rank 0 owns everything and local(0) equals the
// full groups, state offsets included.
#pragma once
#include "dist/comm.h"
#include "optim/param_groups.h"

#include <cstddef>
#include <vector>

namespace zaya {

struct ShardPlan {
    int ranks = 1;
    std::vector<int> muon_owner;     // per entry of the full groups' `muon`
    std::vector<size_t> adamw_cuts;  // ranks + 1 cut points in the full AdamW state numbering

    static ShardPlan make(const ParamGroups &full, int ranks);

    // Rank r's share of `full`: its Muon matrices and its AdamW pieces in layout order, state offsets renumbered
    // compactly (into that rank's own, smaller state buffers).
    ParamGroups local(const ParamGroups &full, int rank) const;
    // Where rank r's updated parameters lie in the flat parameter buffer (adjacent ranges merged).
    std::vector<Communicator::Block> param_blocks(const ParamGroups &full, int rank) const;
    // Floats of optimizer state rank r holds: its Muon momentum plus two AdamW moments.
    size_t state_floats(const ParamGroups &full, int rank) const;
    // Every rank's param_blocks tagged with the rank, in offset order: who owns each trainable element (and so
    // receives its summed gradient).
    std::vector<Communicator::Part> owners(const ParamGroups &full) const;
};

// The bytes one training step's collectives move over all the ranks together: every trainable gradient summed onto
// its owner (each other rank sends it once) and every updated parameter broadcast from it (each other rank receives
// it once), 2·(ranks − 1) × the trainable parameters' bytes; the loss, routing counts and gradient-norm pieces are
// small next to them. 0 for one rank.
size_t data_parallel_bytes_per_step(const ParamGroups &full, int ranks);

// The parts of `owners` (in offset order) within [begin, end), cut at its ends: a gradient bucket's sums, each onto
// its owner. Elements that nobody owns (alignment gaps, the non-trainable balancing biases) are left out.
std::vector<Communicator::Part> parts_within(const std::vector<Communicator::Part> &owners, size_t begin, size_t end);

} // namespace zaya
