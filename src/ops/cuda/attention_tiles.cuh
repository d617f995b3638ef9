// What the attention forward and backward kernels share: tile sizes, the visibility rule, the launch grid.
#pragma once
#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/check.cuh"

#include <algorithm>

namespace zaya::cuda::attn {

// 16 queries × 16 keys per tile and 128 threads: every loop below walks a tile with a block-strided index, so
// these are free to change (kThreads must stay ≥ kTileQ and ≥ kTileK: one thread per row in the softmax step).
constexpr int kTileQ = 16, kTileK = 16, kThreads = 128;
static_assert(kThreads >= kTileQ && kThreads >= kTileK);

// Whether key position tk is visible to query position tq of the same sequence: causal, and inside the sliding
// window (HF convention: the window counts the query itself; ≤ 0 means none).
__device__ inline bool visible(int64_t tq, int64_t tk, int64_t window) {
    return tk <= tq && (window <= 0 || tk > tq - window);
}

// One block per (tile, head, sequence): x = tiles of the longest sequence (blocks stride over the tiles of a
// longer one, so max_len only sizes the grid), y = heads, z = sequences.
inline dim3 tile_grid(const VarlenBatch &batch, int64_t heads, int tile) {
    if (heads > 65535 || batch.B > 65535)
        fail("attention: {} heads × {} sequences exceed the CUDA grid (65535 each)", heads, batch.B);
    const int64_t tiles = std::max<int64_t>(1, (batch.max_len + tile - 1) / tile);
    return dim3(unsigned(std::min<int64_t>(tiles, int64_t(1) << 30)), unsigned(heads), unsigned(batch.B));
}

inline void check_shape(const AttnShape &s) {
    if (s.nq <= 0 || s.nkv <= 0 || s.nq % s.nkv != 0 || s.hd <= 0)
        fail("attention: bad shape nq={} nkv={} hd={}", s.nq, s.nkv, s.hd);
}

// The softmax backward's D[r] = Σ_d dO[r,d]·O[r,d] for every (token, query head) row, in the attention scratch
// (Scratch::AttentionRowDots): what the fp32 and the tensor-core backward both read. (attention_backward.cu)
float *softmax_row_dots(const float *dout, const float *out, int64_t rows, int hd);

} // namespace zaya::cuda::attn
