// What the flash attention kernels share (attention_tc.cu): tiles of 64 rows kept in shared memory as bf16 with
// padded rows, loaded by cp.async; 4 warps, each owning 16 rows of the 64, with its scores, probabilities and
// output in registers (ops/cuda/mma.cuh's fragment layouts); the dispatch of a run-time head size to the kernels'
// compile-time one (the register arrays are sized by it).
#pragma once
#include "core/error.h"
#include "ops/cuda/attention_tiles.cuh"
#include "ops/cuda/mma.cuh"

#include <cstdint>
#include <cuda_bf16.h>
#include <type_traits>

namespace zaya::cuda::attn_fa {

constexpr int kRows = 64, kWarps = 4, kThreads = 32 * kWarps, kWarpRows = kRows / kWarps;
static_assert(kWarpRows == 16, "one m16 fragment of rows per warp");
constexpr int kMaxHeadDim = int(kTensorCoreMaxHeadDim); // the output fragments are hd/2 registers per thread

// Row stride of a bf16 [kRows][hd] tile: 16 bytes of padding, so ldmatrix's eight 16-byte rows of one 8×8 matrix
// fall in the eight distinct 16-byte bank groups of 128 bytes (a stride of 2·hd + 16 bytes = 16 × an odd number for
// hd a multiple of 16): no bank conflicts.
template <int HD> constexpr int kLd = HD + 8;
template <int HD> constexpr int kTileElems = kRows * kLd<HD>; // bf16 elements of one tile
template <int HD> constexpr size_t kTileBytes = size_t(kTileElems<HD>) * 2;

// Dynamic shared memory is only promised 16-byte alignment; kernels carve from the next 128 (launches add 128).
__device__ inline __nv_bfloat16 *shared_tiles(float *smem) {
    return reinterpret_cast<__nv_bfloat16 *>((reinterpret_cast<uintptr_t>(smem) + 127) & ~uintptr_t(127));
}

// Starts copying rows (pos0 + r, head) of x[·, heads, HD] for r < n into dst[r][·], zeros for n ≤ r < kRows; the
// block's threads take the 16-byte pieces in turn. The caller commits and waits (mma::cp_async_*).
template <int HD>
__device__ inline void load_rows_async(__nv_bfloat16 *dst, const __nv_bfloat16 *x, int64_t pos0, int n, int heads,
                                       int head) {
    constexpr int pieces = HD / 8;
    for (int i = int(threadIdx.x); i < kRows * pieces; i += kThreads) {
        const int r = i / pieces, c = (i - r * pieces) * 8;
        const bool in = r < n;
        const __nv_bfloat16 *src = in ? x + ((pos0 + r) * heads + head) * HD + c : x;
        mma::cp_async_16(dst + r * kLd<HD> + c, src, in);
    }
}

// The key-tile pipeline of the forward and dq kernels, before their work on key tile ka (keys < hi) in buffer buf
// of ks and vs: the next key and value tiles start loading into the other buffer, and this thread's copies of the
// current one are waited for (the caller's barrier then makes every thread's visible).
template <int HD>
__device__ inline void next_key_tiles(__nv_bfloat16 *ks, __nv_bfloat16 *vs, int buf, const __nv_bfloat16 *k,
                                      const __nv_bfloat16 *v, int64_t t0, int64_t ka, int64_t hi, int nkv, int j) {
    constexpr int kTile = kTileElems<HD>;
    if (ka + kRows < hi) {
        const int next = int(min(int64_t(kRows), hi - ka - kRows));
        load_rows_async<HD>(ks + (buf ^ 1) * kTile, k, t0 + ka + kRows, next, nkv, j);
        load_rows_async<HD>(vs + (buf ^ 1) * kTile, v, t0 + ka + kRows, next, nkv, j);
        mma::cp_async_commit();
        mma::cp_async_wait<1>();
    } else {
        mma::cp_async_wait<0>();
    }
}

// The four-lane reductions of a row held by lanes 4g … 4g+3 (a C fragment's row).
__device__ inline float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ inline float quad_sum(float v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// A 16×64 score tile (8 C fragments of 16×8) as the A operand of the next product over its 64 columns: 4 k-steps
// of 16, each from two neighbouring C fragments — the C and A layouts line up, so this is only packing to bf16.
__device__ inline void scores_as_a(uint32_t a[4][4], const float s[8][4]) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        a[kk][0] = mma::pack_bf16x2(s[2 * kk][0], s[2 * kk][1]);
        a[kk][1] = mma::pack_bf16x2(s[2 * kk][2], s[2 * kk][3]);
        a[kk][2] = mma::pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[kk][3] = mma::pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
    }
}

// One A fragment (16×16 bf16) in registers.
struct AFrag {
    uint32_t r[4];
};

// A sources for product_with_rows: the warp's 16 rows held in registers as HD/16 fragments (RegisterRows), or
// read from a shared [kRows][HD] tile as each k-step needs them (SharedRows: fewer registers, more shared reads).
struct RegisterRows {
    const uint32_t (*a)[4];
    __device__ AFrag operator()(int kk) const { return {{a[kk][0], a[kk][1], a[kk][2], a[kk][3]}}; }
};
template <int HD> struct SharedRows {
    const __nv_bfloat16 *row; // this lane's ldmatrix row in the warp's 16 rows
    __device__ SharedRows(const __nv_bfloat16 *tile, int warp) {
        const int lane = int(threadIdx.x) % 32;
        // matrices: (rows 0…7, k0…), (rows 8…15, k0…), (rows 0…7, k0+8…), (rows 8…15, k0+8…) → r[0], r[1], r[2], r[3].
        row = tile + (warp * kWarpRows + lane % 16) * kLd<HD> + (lane / 16) * 8;
    }
    __device__ AFrag operator()(int kk) const {
        AFrag f;
        mma::ldmatrix_x4<false>(f.r, row + kk * 16);
        return f;
    }
};

// The warp's 16 rows of a [kRows][HD] shared tile as HD/16 A fragments in registers.
template <int HD> __device__ inline void load_a_rows(uint32_t (*a)[4], const __nv_bfloat16 *tile, int warp) {
    const SharedRows<HD> rows(tile, warp);
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const AFrag f = rows(kk);
#pragma unroll
        for (int i = 0; i < 4; ++i) a[kk][i] = f.r[i];
    }
}

// acc[16×64] += A[16×HD]·Bᵀ where B is a [64][HD] tile in shared memory (rows = the 64 output columns): S = Q·Kᵀ,
// dP = dO·Vᵀ, and transposed Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ. a_of(kk) gives the warp's A fragment of columns 16kk….
template <int HD, class ASource>
__device__ inline void product_with_rows(float acc[8][4], const ASource &a_of, const __nv_bfloat16 *b_tile) {
    const int lane = int(threadIdx.x) % 32;
    // ldmatrix.x4 matrices: (rows n0…n0+7, k0…k0+7), (n0…, k0+8…), (n0+8…, k0…), (n0+8…, k0+8…) → b of fragments
    // n0 and n0 + 8.
    const __nv_bfloat16 *row = b_tile + ((lane / 16) * 8 + lane % 8) * kLd<HD> + ((lane / 8) % 2) * 8;
#pragma unroll
    for (int kk = 0; kk < HD / 16; ++kk) {
        const AFrag a = a_of(kk);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            uint32_t b[4];
            mma::ldmatrix_x4<false>(b, row + np * 16 * kLd<HD> + kk * 16);
            mma::mma_bf16(acc[2 * np], a.r, b);
            mma::mma_bf16(acc[2 * np + 1], a.r, b + 2);
        }
    }
}

// acc[16×HD] += A[16×64]·B where B is a [64][HD] tile in shared memory (rows = the 64 summed positions): O += P·V,
// dQ += dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q. a holds the 64 columns as 4 A fragments (scores_as_a).
template <int HD>
__device__ inline void product_with_columns(float (*acc)[4], const uint32_t a[4][4], const __nv_bfloat16 *b_tile) {
    const int lane = int(threadIdx.x) % 32;
    // ldmatrix.x4.trans matrices: (rows k0…k0+7, columns n0…n0+7), (k0+8…, n0…), (k0…, n0+8…), (k0+8…, n0+8…).
    const __nv_bfloat16 *row = b_tile + (lane % 8 + ((lane / 8) % 2) * 8) * kLd<HD> + (lane / 16) * 8;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int np = 0; np < HD / 16; ++np) {
            uint32_t b[4];
            mma::ldmatrix_x4<true>(b, row + kk * 16 * kLd<HD> + np * 16);
            mma::mma_bf16(acc[2 * np], a[kk], b);
            mma::mma_bf16(acc[2 * np + 1], a[kk], b + 2);
        }
    }
}

// q, k, v (and for the backward dout) rounded to bf16 into the attention scratch (attention_tc.cu): N rows of q
// (and dout), cached + N rows of k and v (cached > 0: keys before the queries, attention_prefill_bf16's).
struct Bf16Inputs {
    const __nv_bfloat16 *q, *k, *v, *dout;
};
Bf16Inputs round_inputs(const float *q, const float *k, const float *v, const float *dout, int64_t N,
                        const AttnShape &s, int64_t cached = 0);

// f(std::integral_constant<int, HD>{}) for hd = HD, a multiple of 16 up to kMaxHeadDim (the head sizes
// attention_on_tensor_cores accepts); fails naming any other.
template <class F> void with_head_dim(int64_t hd, F &&f) {
    switch (hd) {
    case 16: return f(std::integral_constant<int, 16>{});
    case 32: return f(std::integral_constant<int, 32>{});
    case 48: return f(std::integral_constant<int, 48>{});
    case 64: return f(std::integral_constant<int, 64>{});
    case 80: return f(std::integral_constant<int, 80>{});
    case 96: return f(std::integral_constant<int, 96>{});
    case 112: return f(std::integral_constant<int, 112>{});
    case 128: return f(std::integral_constant<int, 128>{});
    default: fail("attention on tensor cores: head size {} is not a multiple of 16 up to {}", hd, kMaxHeadDim);
    }
}

} // namespace zaya::cuda::attn_fa
