// Model FLOP counts (multiply-add = 2 FLOPs), for throughput and MFU reports.
#pragma once
#include "model/config.h"

#include <cstdint>
#include <vector>

namespace zaya {

// Forward FLOPs for sequences of the given lengths, every token routed to one real expert (nominal routing).
// Counts the projections, grouped conv, causal attention (QKᵀ and AV over visible keys), router, experts and LM head.
double forward_flops(const ZayaConfig &c, const std::vector<int64_t> &seq_lens);

} // namespace zaya
