// The softmax of a bf16 KV cache's attention on the GPU, in powers of two as the CPU's (ops/cpu/softmax_pow2.h):
// scores t in log2 units, a row's maximum an integer M = ⌊max t⌋ (scores clamped to ±2^21 first), and
// P = 2^(t − M) computed as 2^(t − ⌊t⌋)·2^(⌊t⌋ − M), so that whatever maxima a path subtracts (a decoding row's per
// key split, a prefill pass's running maximum over key tiles) its P are exact powers of two apart and round to bf16
// alike, and rescaling by 2^(M − M′) is exact. Shared by the decode kernels (decode.cu) and the prefill pass on
// tensor cores (attention_tc.cu).
#pragma once
#include <cuda_runtime.h>

namespace zaya::cuda::pow2 {

constexpr float kScoreClamp = 2097152.0f; // the CPU's clamp (±2^21)

__device__ __forceinline__ float clamp_score(float t) { return fminf(fmaxf(t, -kScoreClamp), kScoreClamp); }

// 2^e for an integer e ≤ 0: 0 below −126, and for −∞.
__device__ __forceinline__ float pow2_int(float e) {
    return __uint_as_float(unsigned(int(fmaxf(e, -127.0f)) + 127) << 23);
}

// M from a row's largest score.
__device__ __forceinline__ float max_of_scores(float m) { return floorf(clamp_score(m)); }

// 2^(t − M) for an integer M ≥ ⌊t⌋ (0 for t = −∞ while M is finite).
__device__ __forceinline__ float exp2_below(float t, float M) {
    const float tc = clamp_score(t), fl = floorf(tc);
    return exp2f(tc - fl) * pow2_int(fl - M);
}

} // namespace zaya::cuda::pow2
