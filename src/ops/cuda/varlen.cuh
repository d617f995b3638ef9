// Row bookkeeping of varlen batches on the device: sequence b owns rows [seq_start[b], seq_start[b+1]).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace zaya::cuda {

// The sequence that owns row n: the last b with seq_start[b] ≤ n (binary search over the B+1 starts; empty
// sequences are skipped).
__device__ inline int64_t sequence_of(const int64_t *seq_start, int64_t B, int64_t n) {
    int64_t lo = 0, hi = B; // invariant: seq_start[lo] ≤ n < seq_start[hi]
    while (hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        if (seq_start[mid] <= n) lo = mid;
        else hi = mid;
    }
    return lo;
}

} // namespace zaya::cuda
