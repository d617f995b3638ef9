// The experts' grouped GEMMs on bf16 tensor cores (moe_grouped.h), built from ops/cuda/mma.cuh's raw instructions
// as the flash attention kernels are: a block of 8 warps computes a 128×128 tile of the output, each warp a 64×32
// part held in registers as 4×4 mma.sync m16n8k16 accumulators; k advances in steps of 32 through a 4-stage ring of
// shared-memory tiles filled by cp.async (three steps in flight while the tensor cores work on the fourth), and
// operands reach registers by ldmatrix (.trans where a tile is stored k-major). Staged rows are padded by 16 bytes,
// so the 8 rows of every ldmatrix fall in distinct bank groups. The accumulators go straight from registers to
// global memory (fp32, two columns per store).
//
// One kernel covers the three products, by where each operand's k runs:
//   C = A·Bᵀ  (forward, h = x·Wᵀ):          A [m][k], B [n][k]   rows grouped (m: the group's rows)
//   C = A·B   (input gradient, dx = dy·W):  A [m][k], B [k][n]   rows grouped
//   dW += Lᵀ·R (weight gradient):           A [k][m], B [k][n]   k grouped (k: the group's rows, in order)
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/moe_grouped.cuh"

#include <cstdint>
#include <cuda_bf16.h>

namespace zaya::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kWarps = 8, kThreads = 32 * kWarps;
constexpr int kWarpM = 64, kWarpN = 32; // warps as 2 (m) × 4 (n)
constexpr int kPad = 8;                 // bf16 elements of padding per staged row (16 bytes)
// One staged operand tile, either layout: [128][32 + 8] (k contiguous) or [32][128 + 8] (m or n contiguous).
constexpr int kTileElems = kBM * (kBK + kPad) > kBK * (kBM + kPad) ? kBM * (kBK + kPad) : kBK * (kBM + kPad);
constexpr size_t kSharedBytes = size_t(2 * kStages * kTileElems) * sizeof(bf16) + 128; // + alignment slack
static_assert(kBM == kBN, "one tile size serves both operands");

// Starts copying the ROWS × COLS tile at (r0, c0) of a row-major bf16 matrix (leading dimension ld) into dst
// (row stride COLS + kPad), zeros outside rows < r_end and columns < c_end; c_end and c0 are multiples of 8, so a
// 16-byte piece is all inside or all outside. The caller commits.
template <int ROWS, int COLS>
__device__ __forceinline__ void load_tile(bf16 *dst, const bf16 *src, int64_t ld, int64_t r0, int64_t r_end,
                                          int64_t c0, int64_t c_end) {
    constexpr int pieces = COLS / 8;
    static_assert(ROWS * pieces % kThreads == 0, "the tile splits evenly over the block");
#pragma unroll
    for (int p = 0; p < ROWS * pieces / kThreads; ++p) {
        const int i = int(threadIdx.x) + p * kThreads, r = i / pieces, c = (i % pieces) * 8;
        const bool in = r0 + r < r_end && c0 + c < c_end;
        mma::cp_async_16(dst + r * (COLS + kPad) + c, in ? src + (r0 + r) * ld + c0 + c : src, in);
    }
}

// Where the block's operands are: A is [m][k] (kAkm false) or [k][m]; B is [n][k] (kBkn false) or [k][n]; both
// row-major with leading dimensions lda, ldb. Valid m < m_end, n < n_end, k in [k_begin, k_end).
struct Operands {
    const bf16 *A, *B;
    int64_t lda, ldb, m0, m_end, n0, n_end, k_begin, k_end;
};

template <bool kAkm, bool kBkn>
__device__ __forceinline__ void load_stage(bf16 *As, bf16 *Bs, const Operands &o, int64_t k0) {
    if constexpr (kAkm) load_tile<kBK, kBM>(As, o.A, o.lda, k0, o.k_end, o.m0, o.m_end);
    else load_tile<kBM, kBK>(As, o.A, o.lda, o.m0, o.m_end, k0, o.k_end);
    if constexpr (kBkn) load_tile<kBK, kBN>(Bs, o.B, o.ldb, k0, o.k_end, o.n0, o.n_end);
    else load_tile<kBN, kBK>(Bs, o.B, o.ldb, o.n0, o.n_end, k0, o.k_end);
}

// acc[i][j] (m fragment i of 16 rows, n fragment j of 8 columns) += the warp's part of one staged k-step.
template <bool kAkm, bool kBkn>
__device__ __forceinline__ void mma_stage(float (&acc)[4][4][4], const bf16 *As, const bf16 *Bs, int wm, int wn) {
    const int lane = int(threadIdx.x) % 32;
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
        uint32_t a[4][4], b[4][2];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int m = wm * kWarpM + i * 16;
            // ldmatrix.x4 matrices → a[0..3]: (m 0…7, k 0…7), (m 8…15, k 0…7), (m 0…7, k 8…15), (m 8…15, k 8…15).
            if constexpr (kAkm)
                mma::ldmatrix_x4<true>(a[i], As + (kk + lane % 8 + (lane / 16) * 8) * (kBM + kPad) + m +
                                                 ((lane / 8) % 2) * 8);
            else
                mma::ldmatrix_x4<false>(a[i], As + (m + lane % 16) * (kBK + kPad) + kk + (lane / 16) * 8);
        }
#pragma unroll
        for (int np = 0; np < 2; ++np) {
            const int n = wn * kWarpN + np * 16;
            // matrices → b of fragments 2np and 2np+1: (n 0…7, k 0…7), (n 0…7, k 8…15), (n 8…15, k 0…7),
            // (n 8…15, k 8…15).
            uint32_t r[4];
            if constexpr (kBkn)
                mma::ldmatrix_x4<true>(r, Bs + (kk + lane % 8 + ((lane / 8) % 2) * 8) * (kBN + kPad) + n +
                                              (lane / 16) * 8);
            else
                mma::ldmatrix_x4<false>(r, Bs + (n + (lane / 16) * 8 + lane % 8) * (kBK + kPad) + kk +
                                               ((lane / 8) % 2) * 8);
            b[2 * np][0] = r[0], b[2 * np][1] = r[1], b[2 * np + 1][0] = r[2], b[2 * np + 1][1] = r[3];
        }
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) mma::mma_bf16(acc[i][j], a[i], b[j]);
    }
}

// The block's 128×128 product over k in [k_begin, k_end), into the warps' accumulators.
template <bool kAkm, bool kBkn>
__device__ __forceinline__ void block_product(float (&acc)[4][4][4], const Operands &o, bf16 *smem, int wm, int wn) {
    bf16 *As = smem, *Bs = smem + kStages * kTileElems;
    const int64_t steps = (o.k_end - o.k_begin + kBK - 1) / kBK;
    // The ring: stage s holds k-step s mod kStages. Every iteration commits one group (empty past the last step), so
    // "all but the newest kStages − 2 groups landed" always means "this step's tile landed".
#pragma unroll
    for (int s = 0; s < kStages - 1; ++s) {
        if (s < steps) load_stage<kAkm, kBkn>(As + s * kTileElems, Bs + s * kTileElems, o, o.k_begin + s * kBK);
        mma::cp_async_commit();
    }
    for (int64_t step = 0; step < steps; ++step) {
        mma::cp_async_wait<kStages - 2>();
        __syncthreads(); // this step's tile is visible to all, and every warp is done with the stage refilled next
        const int64_t ahead = step + kStages - 1;
        if (ahead < steps) {
            const int s = int(ahead % kStages);
            load_stage<kAkm, kBkn>(As + s * kTileElems, Bs + s * kTileElems, o, o.k_begin + ahead * kBK);
        }
        mma::cp_async_commit();
        const int s = int(step % kStages);
        mma_stage<kAkm, kBkn>(acc, As + s * kTileElems, Bs + s * kTileElems, wm, wn);
    }
    mma::cp_async_wait<0>(); // nothing of this thread's left in flight when the block ends
}

// The accumulators of warp (wm, wn) to out[(m0 + m)·ldo + n0 + n] for m < m_end − m0, n < n_end − n0: written, or
// added (kAdd). n_end and ldo are even (multiples of 8), so a fragment's column pair is in or out together.
template <bool kAdd>
__device__ __forceinline__ void store_acc(float *out, int64_t ldo, const float (&acc)[4][4][4], const Operands &o,
                                          int wm, int wn) {
    const int lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int64_t m = o.m0 + wm * kWarpM + i * 16 + g + 8 * half;
            if (m >= o.m_end) continue;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int64_t n = o.n0 + wn * kWarpN + j * 8 + 2 * t;
                if (n >= o.n_end) continue;
                float2 *dst = reinterpret_cast<float2 *>(out + m * ldo + n);
                float2 v{acc[i][j][2 * half], acc[i][j][2 * half + 1]};
                if constexpr (kAdd) {
                    const float2 old = *dst;
                    v.x += old.x, v.y += old.y;
                }
                *dst = v;
            }
        }
}

__device__ __forceinline__ bf16 *aligned_shared(float *smem) {
    return reinterpret_cast<bf16 *>((reinterpret_cast<uintptr_t>(smem) + 127) & ~uintptr_t(127));
}

// Row-grouped: C = A·B_eᵀ (kBkn false) or A·B_e. Block (x: 128-column tile, y: 128-row tile over all groups), so
// the blocks resident at once share row tiles of A (read from memory about once) and one expert's B.
template <bool kBkn>
__global__ void __launch_bounds__(kThreads, 2)
    grouped_gemm_tc_kernel(float *C, const bf16 *A, const bf16 *B, const int64_t *offsets, int64_t E, int64_t K,
                           int64_t ncols) {
    extern __shared__ float grouped_smem[];
    int64_t e = 0, row0 = 0;
    if (!locate_row_tile<kBM>(blockIdx.y, offsets, E, e, row0)) return; // the same answer for the whole block
    const Operands o{A, B + e * ncols * K, K, kBkn ? ncols : K, row0, offsets[e + 1], int64_t(blockIdx.x) * kBN,
                     ncols, 0, K};
    const int warp = int(threadIdx.x) / 32, wm = warp / 4, wn = warp % 4;
    float acc[4][4][4] = {};
    block_product<false, kBkn>(acc, o, aligned_shared(grouped_smem), wm, wn);
    store_acc<false>(C, ncols, acc, o, wm, wn);
}

// k-grouped: dW_e += L_eᵀ·R_e. Block (x: 128-wide q tile, y: 128-wide p tile, z: expert).
__global__ void __launch_bounds__(kThreads, 2)
    grouped_weight_grad_tc_kernel(float *dW, const bf16 *L, const bf16 *R, const int64_t *offsets, int64_t P,
                                  int64_t Q) {
    extern __shared__ float grouped_smem[];
    const int64_t e = blockIdx.z;
    const Operands o{L, R, P, Q, int64_t(blockIdx.y) * kBM, P, int64_t(blockIdx.x) * kBN, Q, offsets[e],
                     offsets[e + 1]};
    if (o.k_begin >= o.k_end) return; // no rows: nothing to add (the whole block)
    const int warp = int(threadIdx.x) / 32, wm = warp / 4, wn = warp % 4;
    float acc[4][4][4] = {};
    block_product<true, true>(acc, o, aligned_shared(grouped_smem), wm, wn);
    store_acc<true>(dW + e * P * Q, Q, acc, o, wm, wn);
}

const bf16 *as_bf16(const uint16_t *p) { return reinterpret_cast<const bf16 *>(p); }

void check_fits(const char *op, int64_t K, int64_t ncols) {
    if (!grouped_tc_fits(K, ncols))
        fail("{}: sizes {} and {} must be positive multiples of 8 for the tensor-core grouped GEMM", op, K, ncols);
}

template <bool kBkn>
void grouped_gemm_tc(const char *op, float *C, const uint16_t *A, const uint16_t *B, const int64_t *offsets,
                     int64_t N, int64_t E, int64_t K, int64_t ncols) {
    check_fits(op, K, ncols);
    // The most row tiles any grouping of N rows into E groups can have: ceil(N/kBM) + E; blocks past the last return.
    const int64_t row_tiles = (N + kBM - 1) / kBM + E, col_tiles = (ncols + kBN - 1) / kBN;
    if (row_tiles > 65535) fail("{}: {} rows over {} experts exceed the CUDA grid", op, N, E);
    if (N == 0 || E == 0) return;
    allow_shared_bytes(grouped_gemm_tc_kernel<kBkn>, kSharedBytes);
    grouped_gemm_tc_kernel<kBkn><<<dim3(unsigned(col_tiles), unsigned(row_tiles)), kThreads, kSharedBytes>>>(
        C, as_bf16(A), as_bf16(B), offsets, E, K, ncols);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace

bool grouped_tc_fits(int64_t K, int64_t ncols) { return K > 0 && ncols > 0 && K % 8 == 0 && ncols % 8 == 0; }

void grouped_gemm_nt_tc(float *C, const uint16_t *A, const uint16_t *B, const int64_t *offsets, int64_t N, int64_t E,
                        int64_t K, int64_t ncols) {
    grouped_gemm_tc<false>("grouped_gemm_nt_tc", C, A, B, offsets, N, E, K, ncols);
}

void grouped_gemm_nn_tc(float *C, const uint16_t *A, const uint16_t *B, const int64_t *offsets, int64_t N, int64_t E,
                        int64_t K, int64_t ncols) {
    grouped_gemm_tc<true>("grouped_gemm_nn_tc", C, A, B, offsets, N, E, K, ncols);
}

void grouped_weight_grad_tc(float *dW, const uint16_t *L, const uint16_t *R, const int64_t *offsets, int64_t E,
                            int64_t P, int64_t Q) {
    check_fits("grouped_weight_grad_tc", P, Q);
    const int64_t p_tiles = (P + kBM - 1) / kBM, q_tiles = (Q + kBN - 1) / kBN;
    if (p_tiles > 65535 || E > 65535)
        fail("grouped_weight_grad_tc: weight gradient {}x{} x {} experts exceeds the CUDA grid", P, Q, E);
    if (E == 0) return;
    allow_shared_bytes(grouped_weight_grad_tc_kernel, kSharedBytes);
    grouped_weight_grad_tc_kernel<<<dim3(unsigned(q_tiles), unsigned(p_tiles), unsigned(E)), kThreads,
                                    kSharedBytes>>>(dW, as_bf16(L), as_bf16(R), offsets, P, Q);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
