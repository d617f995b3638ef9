// The DRAM read bandwidth this process gets right now: the denominator of memory-bound ceilings (decode tokens/s).
#pragma once
#include <cstddef>
#include <vector>

namespace zaya {

// Best of `reps` timed parallel reads (all OpenMP threads) of a `bytes` buffer, in bytes/s. Use a buffer far larger
// than the last-level cache (the default 1 GiB is 32× this machine's L3).
double measure_read_bandwidth(size_t bytes = size_t(1) << 30, int reps = 5);

// Every one of `reps` readings (bytes/s), in the order taken.
std::vector<double> read_bandwidth_samples(size_t bytes = size_t(1) << 30, int reps = 5);

// The same for given memory regions (e.g. a model's weights): each reading streams all of them once, every thread
// a contiguous share of each region. Regions much larger than the caches measure DRAM for exactly those pages.
struct MemRegion {
    const void *data;
    size_t bytes;
};
std::vector<double> read_bandwidth_samples(const std::vector<MemRegion> &regions, int reps = 5);

} // namespace zaya
