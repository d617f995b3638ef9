// What the tensor-core attention kernels share (attention_tc.cu, attention_tc_backward.cu): tile sizes, 128-byte
// aligned carving of dynamic shared memory, block-wide bf16 WMMA products into fp32 shared tiles, the bf16 staging
// of a [64, hd] tile of rows, and the softmax-backward row dots.
#pragma once
#include "ops/cuda/attention_tiles.cuh"

#include <cstdint>
#include <cuda_bf16.h>
#include <mma.h>
#include <type_traits>

namespace zaya::cuda::attn_tc {

namespace wmma = nvcuda::wmma;
constexpr int kTq = 64, kTk = 64, kWarps = 4, kTcThreads = 32 * kWarps, kPad = 8;
// Row strides (elements): bf16 [·][hd] tiles, fp32 [64][64] tiles, bf16 [64][64] tiles, fp32 [·][hd] accumulators.
__host__ __device__ inline int ld_rows(int hd) { return hd + kPad; }
constexpr int kLdS = kTk + 4, kLdP = kTk + kPad;
__host__ __device__ inline int ld_acc(int hd) { return hd + 4; }

// Bytes of one region, rounded up to 128 so that every region starts 128-byte aligned (WMMA needs 32).
__host__ __device__ inline size_t region(size_t bytes) { return (bytes + 127) / 128 * 128; }
__host__ __device__ inline size_t rows_bf16_bytes(int hd) { return region(size_t(64) * ld_rows(hd) * 2); }
__host__ __device__ inline size_t acc_bytes(int hd) { return region(size_t(64) * ld_acc(hd) * 4); }
constexpr size_t kScoreBytes = (size_t(64) * kLdS * 4 + 127) / 128 * 128, kProbBytes = (size_t(64) * kLdP * 2 + 127) / 128 * 128;
constexpr size_t kRowStateBytes = 4 * 64 * 4;

// Dynamic shared memory is only promised 16-byte alignment: kernels start their carving at the next 128 (launches
// add 128 bytes for this).
__device__ inline unsigned char *aligned_shared(float *smem) {
    return reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem) + 127) & ~uintptr_t(127));
}

// C[M,N] (fp32, ldc) = op(A)·op(B) + (accumulate ? C : 0), M, N, K multiples of 16: the block's warps take the 16×16
// output fragments in turn. A bf16 [M][K] row-major (lda), or when kAT given as Aᵀ [K][M]; B bf16 [K][N] row-major,
// or when kBT given as Bᵀ [N][K].
template <bool kAT, bool kBT>
__device__ void block_mma(float *C, int ldc, const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B, int ldb, int M,
                          int N, int K, bool accumulate) {
    using LayoutA = std::conditional_t<kAT, wmma::col_major, wmma::row_major>;
    using LayoutB = std::conditional_t<kBT, wmma::col_major, wmma::row_major>;
    const int warp = int(threadIdx.x) / 32, tiles_n = N / 16;
    for (int f = warp; f < (M / 16) * tiles_n; f += kWarps) {
        const int m0 = f / tiles_n * 16, n0 = f % tiles_n * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        if (accumulate) wmma::load_matrix_sync(acc, C + m0 * ldc + n0, unsigned(ldc), wmma::mem_row_major);
        else wmma::fill_fragment(acc, 0.0f);
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> b;
            wmma::load_matrix_sync(a, kAT ? A + k0 * lda + m0 : A + m0 * lda + k0, unsigned(lda));
            wmma::load_matrix_sync(b, kBT ? B + n0 * ldb + k0 : B + k0 * ldb + n0, unsigned(ldb));
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(C + m0 * ldc + n0, acc, unsigned(ldc), wmma::mem_row_major);
    }
}

// dst[r][d] (stride ld_rows(hd)) = bf16 of row (pos0 + r, head) of x[·, heads, hd] for r < n, zeros for n ≤ r < 64.
// Four elements per thread and step, by one 16-byte load where x is 16-byte aligned (hd is a multiple of 16, so
// then every row is): a quarter of the load instructions and index divisions of one element at a time.
__device__ inline void stage_rows(__nv_bfloat16 *dst, const float *x, int64_t pos0, int n, int heads, int head, int hd) {
    const int quads = hd / 4;
    const bool vec = (reinterpret_cast<uintptr_t>(x) & 15) == 0; // the same for the whole block
    for (int i = int(threadIdx.x); i < 64 * quads; i += kTcThreads) {
        const int r = i / quads, d = (i - r * quads) * 4;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (r < n) {
            const float *src = x + ((pos0 + r) * heads + head) * hd + d;
            if (vec) {
                const float4 f = *reinterpret_cast<const float4 *>(src);
                v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
            } else {
                for (int e = 0; e < 4; ++e) v[e] = src[e];
            }
        }
        __nv_bfloat16 *o = dst + r * ld_rows(hd) + d;
        for (int e = 0; e < 4; ++e) o[e] = __float2bfloat16_rn(v[e]);
    }
}

} // namespace zaya::cuda::attn_tc
