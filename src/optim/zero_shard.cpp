#include "optim/zero_shard.h"

#include "core/error.h"

#include <algorithm>
#include <numeric>

namespace zaya {

ShardPlan ShardPlan::make(const ParamGroups &full, int ranks) {
    if (ranks < 1) fail("shard plan: ranks must be >= 1, got {}", ranks);
    ShardPlan p;
    p.ranks = ranks;
    // Muon: greedy, most expensive first (stable: ties keep layout order), to the least loaded rank (ties to the
    // lower rank) — deterministic, so every rank computes the same owners.
    std::vector<size_t> order(full.muon.size());
    std::iota(order.begin(), order.end(), size_t(0));
    auto cost = [&](size_t k) {
        const MuonMatrix &m = full.muon[k];
        return double(m.rows) * double(m.cols) * double(std::min(m.rows, m.cols));
    };
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost(a) > cost(b); });
    std::vector<double> load(size_t(ranks), 0.0);
    p.muon_owner.assign(full.muon.size(), 0);
    for (size_t k : order) {
        const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
        p.muon_owner[k] = r;
        load[size_t(r)] += cost(k);
    }
    // AdamW: equal contiguous pieces of the concatenated ranges.
    const size_t n = full.adamw_state_size;
    for (int r = 0; r <= ranks; ++r) p.adamw_cuts.push_back(n * size_t(r) / size_t(ranks));
    return p;
}

ParamGroups ShardPlan::local(const ParamGroups &full, int rank) const {
    if (rank < 0 || rank >= ranks) fail("shard plan: rank {} out of range [0, {})", rank, ranks);
    ParamGroups g;
    for (size_t k = 0; k < full.muon.size(); ++k)
        if (muon_owner[k] == rank) {
            MuonMatrix m = full.muon[k];
            m.state_offset = g.muon_state_size;
            g.muon_state_size += m.numel();
            g.muon.push_back(m);
        }
    const size_t lo = adamw_cuts[size_t(rank)], hi = adamw_cuts[size_t(rank) + 1];
    for (const AdamWRange &r : full.adamw) {
        const size_t a = std::max(lo, r.state_offset), b = std::min(hi, r.state_offset + r.numel);
        if (a >= b) continue;
        AdamWRange part = r;
        part.offset = r.offset + (a - r.state_offset);
        part.numel = b - a;
        part.state_offset = g.adamw_state_size;
        g.adamw_state_size += part.numel;
        g.adamw.push_back(part);
    }
    return g;
}

std::vector<Communicator::Block> ShardPlan::param_blocks(const ParamGroups &full, int rank) const {
    const ParamGroups g = local(full, rank);
    std::vector<Communicator::Block> blocks;
    for (const MuonMatrix &m : g.muon) blocks.push_back({m.offset, m.numel()});
    for (const AdamWRange &r : g.adamw) blocks.push_back({r.offset, r.numel});
    std::sort(blocks.begin(), blocks.end(), [](const auto &a, const auto &b) { return a.offset < b.offset; });
    std::vector<Communicator::Block> merged;
    for (const Communicator::Block &b : blocks) {
        if (!merged.empty() && merged.back().offset + merged.back().count == b.offset) merged.back().count += b.count;
        else merged.push_back(b);
    }
    return merged;
}

size_t ShardPlan::state_floats(const ParamGroups &full, int rank) const {
    const ParamGroups g = local(full, rank);
    return g.muon_state_size + 2 * g.adamw_state_size;
}

std::vector<Communicator::Part> ShardPlan::owners(const ParamGroups &full) const {
    std::vector<Communicator::Part> all;
    for (int r = 0; r < ranks; ++r)
        for (const Communicator::Block &b : param_blocks(full, r)) all.push_back({b.offset, b.count, r});
    std::sort(all.begin(), all.end(), [](const auto &a, const auto &b) { return a.offset < b.offset; });
    return all;
}

size_t data_parallel_bytes_per_step(const ParamGroups &full, int ranks) {
    const size_t trainable = full.muon_state_size + full.adamw_state_size; // every trainable element, once
    return 2 * size_t(std::max(ranks - 1, 0)) * trainable * sizeof(real);
}

std::vector<Communicator::Part> parts_within(const std::vector<Communicator::Part> &owners, size_t begin,
                                             size_t end) {
    std::vector<Communicator::Part> parts;
    // The first part ending after `begin`, then every part starting before `end`.
    auto it = std::upper_bound(owners.begin(), owners.end(), begin,
                               [](size_t at, const Communicator::Part &p) { return at < p.offset + p.count; });
    for (; it != owners.end() && it->offset < end; ++it) {
        const size_t a = std::max(begin, it->offset), b = std::min(end, it->offset + it->count);
        if (a < b) parts.push_back({a, b - a, it->owner});
    }
    return parts;
}

} // namespace zaya
