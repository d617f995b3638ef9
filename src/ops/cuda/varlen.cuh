// Row bookkeeping of varlen batches on the device: sequence b owns rows [seq_start[b], seq_start[b+1]).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace zaya::cuda {

// The sequence that owns row n: the last b with start(b) ≤ n, start(b) = seq_start[b] + b·extra (binary search over
// the B+1 starts; empty sequences are skipped). extra = 0: the token rows; extra = k1 − 1: the CCA conv's p rows,
// each sequence holding k1 − 1 padding rows more than its tokens.
__device__ inline int64_t sequence_of(const int64_t *seq_start, int64_t B, int64_t n, int64_t extra = 0) {
    int64_t lo = 0, hi = B; // invariant: start(lo) ≤ n < start(hi)
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (seq_start[mid] + mid * extra <= n) lo = mid;
        else hi = mid;
    }
    return lo;
}

} // namespace zaya::cuda
