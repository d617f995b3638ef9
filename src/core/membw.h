// The DRAM read bandwidth this process gets right now: the denominator of memory-bound ceilings (decode tokens/s).
#pragma once
#include <cstddef>

namespace zaya {

// Best of `reps` timed parallel reads (all OpenMP threads) of a `bytes` buffer, in bytes/s. Use a buffer far larger
// than the last-level cache (the default 1 GiB is 32× this machine's L3).
double measure_read_bandwidth(size_t bytes = size_t(1) << 30, int reps = 5);

} // namespace zaya
