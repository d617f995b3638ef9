// The routed SwiGLU experts over tokens grouped by expert (moe_group_tokens), with no per-expert loop on the host:
// grouped GEMM kernels find each group's rows in the device-side `offsets`. Two sets: true fp32 (plain 16×16
// shared-memory tiles) and bf16 tensor cores (WMMA, 64×64 tiles; both operands rounded to bf16 as they are staged,
// fp32 accumulation — autocast's treatment, as the bf16 matmuls of the rest of the model). Every output element has
// one writer (deterministic).
#include "core/error.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/moe.h"
#include "ops/cuda/swiglu.cuh"

#include <algorithm>
#include <cuda_bf16.h>
#include <mma.h>

namespace zaya::cuda {

namespace {

constexpr int kTile = 16; // 16×16 threads per block, one output element each

// Which group a block's row tile belongs to: row tiles are numbered group after group (ceil(size/kRows) each,
// none for an empty group). Sets e and the tile's first row; false past the last group's tiles.
template <int kRows = kTile>
__device__ bool locate_row_tile(int64_t tile, const int64_t *offsets, int64_t E, int64_t &e, int64_t &row0) {
    for (e = 0; e < E; ++e) {
        const int64_t tiles = (offsets[e + 1] - offsets[e] + kRows - 1) / kRows;
        if (tile < tiles) {
            row0 = offsets[e] + tile * kRows;
            return true;
        }
        tile -= tiles;
    }
    return false;
}

// For every row r of every expert group e < E: C[r, j] = Σ_k A[r, k] · B_e(k, j), with A [N, K] and C [N, ncols]
// row-major and B_e = B + e·ncols·K, read as B_e[j·K + k] when kTransB (stored [ncols, K], a Linear weight) or
// B_e[k·ncols + j] otherwise (stored [K, ncols]). Block (x: row tile over all groups, y: column tile).
template <bool kTransB>
__global__ void __launch_bounds__(kTile * kTile)
    grouped_gemm_kernel(float *C, const float *A, const float *B, const int64_t *offsets, int64_t E, int64_t K,
                        int64_t ncols) {
    __shared__ float As[kTile][kTile];     // As[r][k]: rows of A
    __shared__ float Bs[kTile][kTile + 1]; // Bs[k][j]: columns of B_e (padded row: no bank conflicts on reads)
    int64_t e = 0, row0 = 0;
    if (!locate_row_tile(blockIdx.x, offsets, E, e, row0)) return; // the same answer for the whole block
    const int64_t row_end = offsets[e + 1];
    const int tx = int(threadIdx.x), ty = int(threadIdx.y);
    const int64_t r = row0 + ty, j = int64_t(blockIdx.y) * kTile + tx;
    const float *Be = B + e * ncols * K;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += kTile) {
        As[ty][tx] = r < row_end && k0 + tx < K ? A[r * K + k0 + tx] : 0.0f;
        const int64_t kb = k0 + ty; // the k this thread loads for column j
        const bool in_b = kb < K && j < ncols;
        Bs[ty][tx] = in_b ? (kTransB ? Be[j * K + kb] : Be[kb * ncols + j]) : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < kTile; ++kk) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    if (r < row_end && j < ncols) C[r * ncols + j] = acc;
}

// Weight gradients: dW_e[p, q] += Σ_{rows r of group e} L[r, p] · R[r, q] for every e < E, with L [N, P],
// R [N, Q] row-major and dW [E, P, Q]. Block (x: q tile, y: p tile, z: expert); rows in order: deterministic.
__global__ void __launch_bounds__(kTile * kTile)
    grouped_weight_grad_kernel(float *dW, const float *L, const float *R, const int64_t *offsets, int64_t P,
                               int64_t Q) {
    __shared__ float Ls[kTile][kTile + 1]; // Ls[r][p]
    __shared__ float Rs[kTile][kTile + 1]; // Rs[r][q]
    const int64_t e = blockIdx.z, r_begin = offsets[e], r_end = offsets[e + 1];
    const int tx = int(threadIdx.x), ty = int(threadIdx.y);
    const int64_t p0 = int64_t(blockIdx.y) * kTile, q0 = int64_t(blockIdx.x) * kTile;
    float acc = 0.0f; // for (p0 + ty, q0 + tx)
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kTile) {
        const int64_t r = r0 + ty; // the row this thread loads
        Ls[ty][tx] = r < r_end && p0 + tx < P ? L[r * P + p0 + tx] : 0.0f;
        Rs[ty][tx] = r < r_end && q0 + tx < Q ? R[r * Q + q0 + tx] : 0.0f;
        __syncthreads();
        for (int rr = 0; rr < kTile; ++rr) acc += Ls[rr][ty] * Rs[rr][tx];
        __syncthreads();
    }
    if (p0 + ty < P && q0 + tx < Q) dW[(e * P + p0 + ty) * Q + q0 + tx] += acc;
}

// ---- bf16 tensor cores ----
// A block of 4 warps computes a 64×64 tile of C, each warp a 32×32 quarter (2×2 WMMA fragments of 16×16), over k in
// steps of 32. Tiles are staged in shared memory as bf16 (rows padded by 8 elements: 16-byte multiples for WMMA,
// fewer bank conflicts), the accumulators go through shared memory for the masked store of the edge tiles.
namespace wmma = nvcuda::wmma;
constexpr int kTcM = 64, kTcN = 64, kTcK = 32, kTcThreads = 128, kPad = 8;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

__device__ __forceinline__ __nv_bfloat16 bf16_at(const float *p, bool in) {
    return __float2bfloat16_rn(in ? *p : 0.0f);
}

// acc[2][2] of this warp += As (its 32 rows, all kTcK columns) · B (kTcK rows, its 32 columns); B row-major
// ([k][n], ldb) or column-major ([n][k], ldb) as LayoutB says.
template <class LayoutB>
__device__ void warp_mma(FragAcc (&acc)[2][2], const __nv_bfloat16 *As, int lda, const __nv_bfloat16 *Bs, int ldb,
                         int wm, int wn) {
    using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>;
    constexpr bool kRowB = std::is_same_v<LayoutB, wmma::row_major>;
    for (int kk = 0; kk < kTcK; kk += 16) {
        FragA a[2];
        FragB b[2];
        for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], As + (wm * 32 + i * 16) * lda + kk, unsigned(lda));
        for (int j = 0; j < 2; ++j) {
            const int n = wn * 32 + j * 16;
            wmma::load_matrix_sync(b[j], kRowB ? Bs + kk * ldb + n : Bs + n * ldb + kk, unsigned(ldb));
        }
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
}

// The warp's accumulators into Cs [kTcM][kTcN + 4] (row-major).
__device__ void store_acc(float *Cs, FragAcc (&acc)[2][2], int wm, int wn) {
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(Cs + (wm * 32 + i * 16) * (kTcN + 4) + wn * 32 + j * 16, acc[i][j],
                                    unsigned(kTcN + 4), wmma::mem_row_major);
}

// grouped_gemm_kernel's product on tensor cores. Block (x: 64-row tile over all groups, y: 64-column tile).
template <bool kTransB>
__global__ void __launch_bounds__(kTcThreads)
    grouped_gemm_tc_kernel(float *C, const float *A, const float *B, const int64_t *offsets, int64_t E, int64_t K,
                           int64_t ncols) {
    __shared__ __align__(32) __nv_bfloat16 As[kTcM * (kTcK + kPad)]; // [r][k]
    // B tile: [n][k] (a Linear weight's rows: read as column-major B) when kTransB, else [k][n].
    __shared__ __align__(32) __nv_bfloat16 Bs[kTransB ? kTcN * (kTcK + kPad) : kTcK * (kTcN + kPad)];
    __shared__ __align__(32) float Cs[kTcM * (kTcN + 4)];
    int64_t e = 0, row0 = 0;
    if (!locate_row_tile<kTcM>(blockIdx.x, offsets, E, e, row0)) return; // the same answer for the whole block
    const int64_t row_end = offsets[e + 1], col0 = int64_t(blockIdx.y) * kTcN;
    const int tid = int(threadIdx.x), warp = tid / 32, wm = warp / 2, wn = warp % 2;
    const float *Be = B + e * ncols * K;
    FragAcc acc[2][2];
    for (auto &row : acc)
        for (auto &f : row) wmma::fill_fragment(f, 0.0f);
    for (int64_t k0 = 0; k0 < K; k0 += kTcK) {
        for (int i = tid; i < kTcM * kTcK; i += kTcThreads) { // consecutive threads: consecutive k of one row
            const int r = i / kTcK, k = i % kTcK;
            As[r * (kTcK + kPad) + k] = bf16_at(A + (row0 + r) * K + k0 + k, row0 + r < row_end && k0 + k < K);
        }
        if constexpr (kTransB) {
            for (int i = tid; i < kTcN * kTcK; i += kTcThreads) {
                const int n = i / kTcK, k = i % kTcK;
                Bs[n * (kTcK + kPad) + k] = bf16_at(Be + (col0 + n) * K + k0 + k, col0 + n < ncols && k0 + k < K);
            }
        } else {
            for (int i = tid; i < kTcK * kTcN; i += kTcThreads) {
                const int k = i / kTcN, n = i % kTcN;
                Bs[k * (kTcN + kPad) + n] = bf16_at(Be + (k0 + k) * ncols + col0 + n, k0 + k < K && col0 + n < ncols);
            }
        }
        __syncthreads();
        if constexpr (kTransB) warp_mma<wmma::col_major>(acc, As, kTcK + kPad, Bs, kTcK + kPad, wm, wn);
        else warp_mma<wmma::row_major>(acc, As, kTcK + kPad, Bs, kTcN + kPad, wm, wn);
        __syncthreads();
    }
    store_acc(Cs, acc, wm, wn);
    __syncthreads();
    for (int i = tid; i < kTcM * kTcN; i += kTcThreads) {
        const int r = i / kTcN, n = i % kTcN;
        if (row0 + r < row_end && col0 + n < ncols) C[(row0 + r) * ncols + col0 + n] = Cs[r * (kTcN + 4) + n];
    }
}

// grouped_weight_grad_kernel on tensor cores: dW_e[p, q] += Σ_r L[r, p]·R[r, q], the rows of group e in order in
// steps of 32. Block (x: 64-wide q tile, y: 64-wide p tile, z: expert).
__global__ void __launch_bounds__(kTcThreads)
    grouped_weight_grad_tc_kernel(float *dW, const float *L, const float *R, const int64_t *offsets, int64_t P,
                                  int64_t Q) {
    __shared__ __align__(32) __nv_bfloat16 Ls[kTcK * (kTcM + kPad)]; // [r][p]: Lᵀ read as column-major A
    __shared__ __align__(32) __nv_bfloat16 Rs[kTcK * (kTcN + kPad)]; // [r][q]: row-major B
    __shared__ __align__(32) float Cs[kTcM * (kTcN + 4)];
    const int64_t e = blockIdx.z, r_begin = offsets[e], r_end = offsets[e + 1];
    const int64_t p0 = int64_t(blockIdx.y) * kTcM, q0 = int64_t(blockIdx.x) * kTcN;
    const int tid = int(threadIdx.x), warp = tid / 32, wm = warp / 2, wn = warp % 2;
    using FragAt = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major>;
    using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>;
    FragAcc acc[2][2];
    for (auto &row : acc)
        for (auto &f : row) wmma::fill_fragment(f, 0.0f);
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kTcK) {
        for (int i = tid; i < kTcK * kTcM; i += kTcThreads) {
            const int r = i / kTcM, c = i % kTcM;
            Ls[r * (kTcM + kPad) + c] = bf16_at(L + (r0 + r) * P + p0 + c, r0 + r < r_end && p0 + c < P);
            Rs[r * (kTcN + kPad) + c] = bf16_at(R + (r0 + r) * Q + q0 + c, r0 + r < r_end && q0 + c < Q);
        }
        __syncthreads();
        for (int kk = 0; kk < kTcK; kk += 16) {
            FragAt a[2];
            FragB b[2];
            // A(p, r) = L[r][p]: column-major with leading dimension the staged row's width.
            for (int i = 0; i < 2; ++i)
                wmma::load_matrix_sync(a[i], Ls + kk * (kTcM + kPad) + wm * 32 + i * 16, unsigned(kTcM + kPad));
            for (int j = 0; j < 2; ++j)
                wmma::load_matrix_sync(b[j], Rs + kk * (kTcN + kPad) + wn * 32 + j * 16, unsigned(kTcN + kPad));
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    store_acc(Cs, acc, wm, wn);
    __syncthreads();
    for (int i = tid; i < kTcM * kTcN; i += kTcThreads) {
        const int p = i / kTcN, q = i % kTcN;
        if (p0 + p < P && q0 + q < Q) dW[(e * P + p0 + p) * Q + q0 + q] += Cs[p * (kTcN + 4) + q];
    }
}

// dst[r, :] = src[order[r], :] (gather, scatter = false) or dst[order[r], :] = src[r, :] (scatter), r < N.
__global__ void permute_rows_kernel(float *dst, const float *src, const int32_t *order, int64_t N, int64_t D,
                                    bool scatter) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * D) return;
    const int64_t r = i / D, c = i % D, n = order[r];
    if (scatter) dst[n * D + c] = src[i];
    else dst[i] = src[n * D + c];
}

// a[r] = swiglu(h[r]) for the expert rows r < offsets[E] (skip-slot rows have no h).
__global__ void swiglu_expert_rows_kernel(float *a, const float *h, const int64_t *offsets, int64_t E, int64_t I) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t r = i / I, c = i % I;
    if (r >= offsets[E]) return;
    a[i] = swiglu_value(h[r * 2 * I + c], h[r * 2 * I + I + c]);
}

__global__ void swiglu_backward_expert_rows_kernel(float *dh, const float *da, const float *h, const int64_t *offsets,
                                                   int64_t E, int64_t I) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t r = i / I, c = i % I;
    if (r >= offsets[E]) return;
    swiglu_grads(h[r * 2 * I + c], h[r * 2 * I + I + c], da[i], dh[r * 2 * I + c], dh[r * 2 * I + I + c]);
}

// The skip slot's rows r ∈ [offsets[E], N): dst[r] = passthrough ? src[r] : 0 (the identity "expert", or none).
__global__ void skip_rows_kernel(float *dst, const float *src, const int64_t *offsets, int64_t E, int64_t N, int64_t D,
                                 bool passthrough) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * D || i / D < offsets[E]) return;
    dst[i] = passthrough ? src[i] : 0.0f;
}

// out[order[r]] = p_sel[order[r]] · y[r].
__global__ void scale_scatter_kernel(float *out, const float *y, const int32_t *order, const float *p_sel, int64_t N,
                                     int64_t D) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * D) return;
    const int64_t r = i / D, c = i % D, n = order[r];
    out[n * D + c] = p_sel[n] * y[i];
}

// Row r of the grouped order (token n = order[r]): dy[r] = p_sel[n]·dout[n], dp_sel[n] = dout[n]·y[r].
constexpr int kRowThreads = 256;
__global__ void __launch_bounds__(kRowThreads)
    output_grads_kernel(float *dy, float *dp_sel, const float *dout, const float *y, const int32_t *order,
                        const float *p_sel, int64_t D) {
    const int64_t r = blockIdx.x, n = order[r];
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < D; c += kRowThreads) {
        dy[r * D + c] = p_sel[n] * dout[n * D + c];
        dot += dout[n * D + c] * y[r * D + c];
    }
    dot = block_sum<kRowThreads>(dot);
    if (threadIdx.x == 0) dp_sel[n] = dot;
}

constexpr int kThreads = 256;

// C = A·B_e over the expert groups (see grouped_gemm_kernel); the grid covers the most row tiles any grouping of
// N rows into E groups can have, ceil(N/kTile) + E, and blocks past the last tile return.
template <bool kTransB>
void grouped_gemm(float *C, const float *A, const float *B, const int64_t *offsets, int64_t N, int64_t E, int64_t K,
                  int64_t ncols, bool bf16) {
    const int64_t tile_m = bf16 ? kTcM : kTile, tile_n = bf16 ? kTcN : kTile;
    const int64_t row_tiles = (N + tile_m - 1) / tile_m + E, col_tiles = (ncols + tile_n - 1) / tile_n;
    if (col_tiles > 65535) fail("moe experts: {} output columns exceed the CUDA grid", ncols);
    const dim3 grid{unsigned(row_tiles), unsigned(col_tiles)};
    if (bf16) grouped_gemm_tc_kernel<kTransB><<<grid, kTcThreads>>>(C, A, B, offsets, E, K, ncols);
    else grouped_gemm_kernel<kTransB><<<grid, dim3(kTile, kTile)>>>(C, A, B, offsets, E, K, ncols);
    ZAYA_CUDA_LAUNCHED();
}

void grouped_weight_grad(float *dW, const float *L, const float *R, const int64_t *offsets, int64_t E, int64_t P,
                         int64_t Q, bool bf16) {
    const int64_t tile_p = bf16 ? kTcM : kTile, tile_q = bf16 ? kTcN : kTile;
    const int64_t p_tiles = (P + tile_p - 1) / tile_p, q_tiles = (Q + tile_q - 1) / tile_q;
    if (p_tiles > 65535 || E > 65535)
        fail("moe experts: weight gradient {}x{} x {} experts exceeds the CUDA grid", P, Q, E);
    const dim3 grid{unsigned(q_tiles), unsigned(p_tiles), unsigned(E)};
    if (bf16) grouped_weight_grad_tc_kernel<<<grid, kTcThreads>>>(dW, L, R, offsets, P, Q);
    else grouped_weight_grad_kernel<<<grid, dim3(kTile, kTile)>>>(dW, L, R, offsets, P, Q);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace

void moe_experts_forward(float *out, float *xg, float *h, float *a, float *y, const float *x, const int32_t *order,
                         const int64_t *offsets, const float *p_sel, const float *gate_up, const float *down,
                         int64_t N, const MoeShape &s, bool bf16) {
    const int64_t D = s.D, I = s.I, E = s.E;
    if (N == 0) return;
    permute_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(xg, x, order, N, D, false);
    ZAYA_CUDA_LAUNCHED();
    if (E > 0) {
        grouped_gemm<true>(h, xg, gate_up, offsets, N, E, D, 2 * I, bf16); // h = xg·Gate_Upᵀ  [rows, 2I]
        swiglu_expert_rows_kernel<<<blocks_for(N * I, kThreads), kThreads>>>(a, h, offsets, E, I);
        ZAYA_CUDA_LAUNCHED();
        grouped_gemm<true>(y, a, down, offsets, N, E, I, D, bf16); // y = a·Downᵀ  [rows, D]
    }
    skip_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(y, xg, offsets, E, N, D, s.skip_passthrough);
    ZAYA_CUDA_LAUNCHED();
    scale_scatter_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(out, y, order, p_sel, N, D);
    ZAYA_CUDA_LAUNCHED();
}

void moe_experts_backward(float *dx, float *dp_sel, float *dgate_up, float *ddown, float *dy, float *da, float *dh,
                          float *dxg, const float *dout, const int32_t *order, const int64_t *offsets,
                          const float *p_sel, const float *xg, const float *h, const float *a, const float *y,
                          const float *gate_up, const float *down, int64_t N, const MoeShape &s, bool bf16) {
    const int64_t D = s.D, I = s.I, E = s.E;
    if (N == 0) return;
    output_grads_kernel<<<unsigned(N), kRowThreads>>>(dy, dp_sel, dout, y, order, p_sel, D);
    ZAYA_CUDA_LAUNCHED();
    if (E > 0) {
        grouped_gemm<false>(da, dy, down, offsets, N, E, D, I, bf16); // da = dy·Down  [rows, I]
        grouped_weight_grad(ddown, dy, a, offsets, E, D, I, bf16);     // dDown += dyᵀ·a  [D, I]
        swiglu_backward_expert_rows_kernel<<<blocks_for(N * I, kThreads), kThreads>>>(dh, da, h, offsets, E, I);
        ZAYA_CUDA_LAUNCHED();
        grouped_gemm<false>(dxg, dh, gate_up, offsets, N, E, 2 * I, D, bf16); // dxg = dh·Gate_Up  [rows, D]
        grouped_weight_grad(dgate_up, dh, xg, offsets, E, 2 * I, D, bf16);   // dGate_Up += dhᵀ·xg  [2I, D]
    }
    skip_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(dxg, dy, offsets, E, N, D, s.skip_passthrough);
    ZAYA_CUDA_LAUNCHED();
    permute_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(dx, dxg, order, N, D, true);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
