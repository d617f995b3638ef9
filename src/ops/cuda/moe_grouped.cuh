// Grouped GEMMs over tokens sorted by expert on bf16 tensor cores (moe_grouped_tc.cu), for the routed experts
// (moe_experts.cu). Operands are bf16 in memory, accumulation fp32, outputs fp32; the group boundaries are the
// device-side `offsets` of moe_group_tokens, so nothing waits for the host. Every output element has one writer
// (deterministic). Leading dimensions and the contiguous extents (K, ncols, P, Q) must be multiples of 8 and every
// matrix 16-byte aligned: rows are copied in 16-byte pieces (grouped_tc_fits says whether a shape qualifies).
#pragma once
#include <cstdint>
#include <cuda_runtime.h>

namespace zaya::cuda {

// Which group a block's row tile belongs to, when row tiles of kRows are numbered group after group (ceil(size /
// kRows) each, none for an empty group): sets e and the tile's first row; false past the last group's tiles.
template <int kRows>
__device__ inline bool locate_row_tile(int64_t tile, const int64_t *offsets, int64_t E, int64_t &e, int64_t &row0) {
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

bool grouped_tc_fits(int64_t K, int64_t ncols);

// C[r, 0:ncols] = A[r, 0:K] · B_eᵀ for every row r of every group e < E (rows offsets[e] … offsets[e+1]), A [·, K]
// and C [·, ncols] row-major, B_e = B + e·ncols·K stored [ncols, K] (a Linear weight: h = x·Wᵀ).   N: rows in all.
void grouped_gemm_nt_tc(float *C, const uint16_t *A, const uint16_t *B, const int64_t *offsets, int64_t N, int64_t E,
                        int64_t K, int64_t ncols);
// The same with B_e stored [K, ncols] (C = A·B_e: the input gradient through a Linear weight, dx = dy·W).
void grouped_gemm_nn_tc(float *C, const uint16_t *A, const uint16_t *B, const int64_t *offsets, int64_t N, int64_t E,
                        int64_t K, int64_t ncols);
// dW_e[p, q] += Σ_{rows r of group e} L[r, p]·R[r, q] for e < E, L [·, P] and R [·, Q] row-major, dW [E, P, Q]
// (a Linear's weight gradient dyᵀ·x per expert); the rows summed in order.
void grouped_weight_grad_tc(float *dW, const uint16_t *L, const uint16_t *R, const int64_t *offsets, int64_t E,
                            int64_t P, int64_t Q);

} // namespace zaya::cuda
