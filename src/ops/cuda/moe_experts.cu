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
#include <cstdint>
#include <cuda_bf16.h>
#include <mma.h>
#include <type_traits>

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
// A block of 8 warps computes a 128×128 tile of C, each warp a 64×32 part (4×2 WMMA fragments of 16×16), over k in
// steps of 32. The operands are fp32 in memory: each thread loads its share of the next k-step's tiles (16-byte
// loads where the rows allow) into registers while the warps multiply the current one, then rounds them to bf16
// into the other of two shared-memory buffers — one barrier per step, global latency hidden behind the MMAs.
// Staged rows are padded by 8 elements (16-byte multiples for WMMA, fewer bank conflicts). The accumulators reach
// global memory through a per-warp 16×16 scratch, so edge tiles are masked.
namespace wmma = nvcuda::wmma;
constexpr int kTcM = 128, kTcN = 128, kTcK = 32, kTcThreads = 256, kPad = 8;
constexpr int kStage = kTcM * (kTcK + kPad); // bf16 elements of one staged operand tile (the larger layout)
static_assert(kTcK * (kTcN + kPad) <= kStage, "a [k][n] tile fits the stage too");
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// A ROWS×COLS tile of a row-major fp32 matrix (leading dimension ld), rows [r0, r0 + ROWS) and columns
// [c0, c0 + COLS), zero outside rows < r_end and columns < c_end: each thread's share, in 4-element pieces along
// the row, held in registers between the load and the store to shared memory.
template <int ROWS, int COLS> struct TileLoad {
    static constexpr int kPieces = ROWS * COLS / 4 / kTcThreads;
    static_assert(kPieces * 4 * kTcThreads == ROWS * COLS, "the tile splits evenly over the block");
    float v[kPieces][4];

    // vec: 16-byte loads are allowed (ld a multiple of 4 and the matrix 16-byte aligned).
    __device__ void load(const float *m, int64_t ld, int64_t r0, int64_t r_end, int64_t c0, int64_t c_end, bool vec) {
        for (int p = 0; p < kPieces; ++p) {
            const int flat = int(threadIdx.x) + p * kTcThreads, r = flat / (COLS / 4), c = flat % (COLS / 4) * 4;
            const int64_t row = r0 + r, col = c0 + c;
            const float *src = m + row * ld + col;
            if (vec && row < r_end && col + 3 < c_end) {
                const float4 f = *reinterpret_cast<const float4 *>(src);
                v[p][0] = f.x, v[p][1] = f.y, v[p][2] = f.z, v[p][3] = f.w;
            } else {
                for (int i = 0; i < 4; ++i) v[p][i] = row < r_end && col + i < c_end ? src[i] : 0.0f;
            }
        }
    }
    // Into dst[r][c] (row stride COLS + kPad), rounded to bf16.
    __device__ void store(__nv_bfloat16 *dst) const {
        for (int p = 0; p < kPieces; ++p) {
            const int flat = int(threadIdx.x) + p * kTcThreads, r = flat / (COLS / 4), c = flat % (COLS / 4) * 4;
            for (int i = 0; i < 4; ++i) dst[r * (COLS + kPad) + c + i] = __float2bfloat16_rn(v[p][i]);
        }
    }
};

// acc[4][2] of warp (wm, wn) += A (its 64 rows, kTcK deep) · B (kTcK deep, its 32 columns), the operands in shared
// memory with the layouts LayoutA / LayoutB (row_major A: [m][k]; col_major A: [k][m]; row_major B: [k][n];
// col_major B: [n][k]), leading dimensions lda, ldb.
template <class LayoutA, class LayoutB>
__device__ void warp_mma(FragAcc (&acc)[4][2], const __nv_bfloat16 *As, int lda, const __nv_bfloat16 *Bs, int ldb,
                         int wm, int wn) {
    using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>;
    using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>;
    constexpr bool kRowA = std::is_same_v<LayoutA, wmma::row_major>, kRowB = std::is_same_v<LayoutB, wmma::row_major>;
    for (int kk = 0; kk < kTcK; kk += 16) {
        FragA a[4];
        FragB b[2];
        for (int i = 0; i < 4; ++i) {
            const int m = wm * 64 + i * 16;
            wmma::load_matrix_sync(a[i], kRowA ? As + m * lda + kk : As + kk * lda + m, unsigned(lda));
        }
        for (int j = 0; j < 2; ++j) {
            const int n = wn * 32 + j * 16;
            wmma::load_matrix_sync(b[j], kRowB ? Bs + kk * ldb + n : Bs + n * ldb + kk, unsigned(ldb));
        }
        for (int i = 0; i < 4; ++i)
            for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
    }
}

// The warp's accumulators to C[(r0 + m)·ldc + c0 + n] for the rows < r_end and columns < c_end, written (=) or added
// (+=), through the warp's 16×16 scratch (shared memory no other warp uses).
__device__ void store_warp_tile(float *C, int64_t ldc, int64_t r0, int64_t r_end, int64_t c0, int64_t c_end,
                                FragAcc (&acc)[4][2], float *scratch, int wm, int wn, bool add) {
    const int lane = int(threadIdx.x) % 32, r = lane / 2, c = lane % 2 * 8;
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(scratch, acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int64_t row = r0 + wm * 64 + i * 16 + r, col = c0 + wn * 32 + j * 16 + c;
            if (row < r_end)
                for (int q = 0; q < 8; ++q)
                    if (col + q < c_end) {
                        float &dst = C[row * ldc + col + q];
                        dst = add ? dst + scratch[r * 16 + c + q] : scratch[r * 16 + c + q];
                    }
            __syncwarp(); // every lane has read before the next fragment overwrites the scratch
        }
}

// Two stages of operand tiles (A then B, each kStage bf16 elements), later the warps' output scratch.
struct TcShared {
    __device__ __nv_bfloat16 *A(int s) { return buf + (2 * s) * kStage; }
    __device__ __nv_bfloat16 *B(int s) { return buf + (2 * s + 1) * kStage; }
    __device__ float *scratch(int warp) { return reinterpret_cast<float *>(buf) + warp * 256; }
    __nv_bfloat16 *buf;
};
static_assert(4 * kStage * 2 >= 8 * 256 * 4, "the output scratch fits the stages");

// grouped_gemm_kernel's product on tensor cores. Block (x: 128-row tile over all groups, y: 128-column tile).
// kTransB: B_e stored [ncols, K] (staged [n][k], read as col_major B); else [K, ncols] (staged [k][n]).
template <bool kTransB>
__global__ void __launch_bounds__(kTcThreads)
    grouped_gemm_tc_kernel(float *C, const float *A, const float *B, const int64_t *offsets, int64_t E, int64_t K,
                           int64_t ncols, bool vec_a, bool vec_b) {
    __shared__ __align__(32) __nv_bfloat16 smem[4 * kStage];
    TcShared sh{smem};
    int64_t e = 0, row0 = 0;
    if (!locate_row_tile<kTcM>(blockIdx.x, offsets, E, e, row0)) return; // the same answer for the whole block
    const int64_t row_end = offsets[e + 1], col0 = int64_t(blockIdx.y) * kTcN;
    const int warp = int(threadIdx.x) / 32, wm = warp / 4, wn = warp % 4;
    const float *Be = B + e * ncols * K;
    FragAcc acc[4][2];
    for (auto &row : acc)
        for (auto &f : row) wmma::fill_fragment(f, 0.0f);
    TileLoad<kTcM, kTcK> la;
    using LoadB = std::conditional_t<kTransB, TileLoad<kTcN, kTcK>, TileLoad<kTcK, kTcN>>;
    LoadB lb;
    auto load = [&](int64_t k0) {
        la.load(A, K, row0, row_end, k0, K, vec_a);
        if constexpr (kTransB) lb.load(Be, K, col0, ncols, k0, K, vec_b);
        else lb.load(Be, ncols, k0, K, col0, ncols, vec_b);
    };
    load(0);
    la.store(sh.A(0)), lb.store(sh.B(0));
    __syncthreads();
    int cur = 0;
    for (int64_t k0 = 0; k0 < K; k0 += kTcK) {
        const bool more = k0 + kTcK < K;
        if (more) load(k0 + kTcK); // in flight while the tensor cores work on the current stage
        if constexpr (kTransB)
            warp_mma<wmma::row_major, wmma::col_major>(acc, sh.A(cur), kTcK + kPad, sh.B(cur), kTcK + kPad, wm, wn);
        else warp_mma<wmma::row_major, wmma::row_major>(acc, sh.A(cur), kTcK + kPad, sh.B(cur), kTcN + kPad, wm, wn);
        if (more) la.store(sh.A(cur ^ 1)), lb.store(sh.B(cur ^ 1)); // the other stage: last read a step ago
        __syncthreads();
        cur ^= 1;
    }
    store_warp_tile(C, ncols, row0, row_end, col0, ncols, acc, sh.scratch(warp), wm, wn, false);
}

// grouped_weight_grad_kernel on tensor cores: dW_e[p, q] += Σ_r L[r, p]·R[r, q], the rows of group e in order in
// steps of 32. Block (x: 128-wide q tile, y: 128-wide p tile, z: expert). L staged [r][p] (read as col_major A),
// R staged [r][q] (row_major B).
__global__ void __launch_bounds__(kTcThreads)
    grouped_weight_grad_tc_kernel(float *dW, const float *L, const float *R, const int64_t *offsets, int64_t P,
                                  int64_t Q, bool vec_l, bool vec_r) {
    __shared__ __align__(32) __nv_bfloat16 smem[4 * kStage];
    TcShared sh{smem};
    const int64_t e = blockIdx.z, r_begin = offsets[e], r_end = offsets[e + 1];
    const int64_t p0 = int64_t(blockIdx.y) * kTcM, q0 = int64_t(blockIdx.x) * kTcN;
    const int warp = int(threadIdx.x) / 32, wm = warp / 4, wn = warp % 4;
    if (r_begin >= r_end) return; // no rows: nothing to add (the whole block)
    FragAcc acc[4][2];
    for (auto &row : acc)
        for (auto &f : row) wmma::fill_fragment(f, 0.0f);
    TileLoad<kTcK, kTcM> ll;
    TileLoad<kTcK, kTcN> lr;
    auto load = [&](int64_t r0) {
        ll.load(L, P, r0, r_end, p0, P, vec_l);
        lr.load(R, Q, r0, r_end, q0, Q, vec_r);
    };
    load(r_begin);
    ll.store(sh.A(0)), lr.store(sh.B(0));
    __syncthreads();
    int cur = 0;
    for (int64_t r0 = r_begin; r0 < r_end; r0 += kTcK) {
        const bool more = r0 + kTcK < r_end;
        if (more) load(r0 + kTcK);
        warp_mma<wmma::col_major, wmma::row_major>(acc, sh.A(cur), kTcM + kPad, sh.B(cur), kTcN + kPad, wm, wn);
        if (more) ll.store(sh.A(cur ^ 1)), lr.store(sh.B(cur ^ 1));
        __syncthreads();
        cur ^= 1;
    }
    store_warp_tile(dW + e * P * Q, Q, p0, P, q0, Q, acc, sh.scratch(warp), wm, wn, true);
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

bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// C = A·B_e over the expert groups (see grouped_gemm_kernel); the grid covers the most row tiles any grouping of
// N rows into E groups can have, ceil(N/kTile) + E, and blocks past the last tile return.
template <bool kTransB>
void grouped_gemm(float *C, const float *A, const float *B, const int64_t *offsets, int64_t N, int64_t E, int64_t K,
                  int64_t ncols, bool bf16) {
    const int64_t tile_m = bf16 ? kTcM : kTile, tile_n = bf16 ? kTcN : kTile;
    const int64_t row_tiles = (N + tile_m - 1) / tile_m + E, col_tiles = (ncols + tile_n - 1) / tile_n;
    if (col_tiles > 65535) fail("moe experts: {} output columns exceed the CUDA grid", ncols);
    const dim3 grid{unsigned(row_tiles), unsigned(col_tiles)};
    // 16-byte loads: rows of A are K floats apart; B's rows K (transposed) or ncols.
    const bool vec_a = aligned16(A) && K % 4 == 0, vec_b = aligned16(B) && (kTransB ? K : ncols) % 4 == 0;
    if (bf16) grouped_gemm_tc_kernel<kTransB><<<grid, kTcThreads>>>(C, A, B, offsets, E, K, ncols, vec_a, vec_b);
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
    const bool vec_l = aligned16(L) && P % 4 == 0, vec_r = aligned16(R) && Q % 4 == 0;
    if (bf16) grouped_weight_grad_tc_kernel<<<grid, kTcThreads>>>(dW, L, R, offsets, P, Q, vec_l, vec_r);
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
