// The routed SwiGLU experts over tokens grouped by expert (moe_group_tokens), with no per-expert loop on the host:
// grouped GEMM kernels find each group's rows in the device-side `offsets`. Two sets: true fp32 (plain 16×16
// shared-memory tiles, here) and bf16 tensor cores (moe_grouped_tc.cu), whose operands are bf16 copies — the
// weights' given by the caller, the activations' written by the kernels that produce them (the gather, SwiGLU and
// output-gradient kernels write bf16 beside fp32) into one grow-once scratch — with fp32 accumulation, autocast's
// treatment, as the bf16 matmuls of the rest of the model. Every output element has one writer (deterministic).
#include "core/error.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/moe.h"
#include "ops/cuda/moe_grouped.cuh"
#include "ops/cuda/ops.h"
#include "ops/cuda/swiglu.cuh"

#include <cstdint>
#include <cuda_bf16.h>

namespace zaya::cuda {

namespace {

constexpr int kTile = 16; // 16×16 threads per block, one output element each

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
    if (!locate_row_tile<kTile>(blockIdx.x, offsets, E, e, row0)) return; // the same answer for the whole block
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

using bf16 = __nv_bfloat16;

// dst[r, :] = src[order[r], :] (gather, scatter = false; also into dst16 as bf16 when given) or dst[order[r], :] =
// src[r, :] (scatter), r < N.
__global__ void permute_rows_kernel(float *dst, bf16 *dst16, const float *src, const int32_t *order, int64_t N,
                                    int64_t D, bool scatter) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * D) return;
    const int64_t r = i / D, c = i % D, n = order[r];
    if (scatter) {
        dst[n * D + c] = src[i];
        return;
    }
    const float v = src[n * D + c];
    dst[i] = v;
    if (dst16) dst16[i] = __float2bfloat16_rn(v);
}

// a[r] = swiglu(h[r]) (and a16[r] = bf16(a[r]) when given) for the expert rows r < offsets[E] (skip-slot rows have
// no h).
__global__ void swiglu_expert_rows_kernel(float *a, bf16 *a16, const float *h, const int64_t *offsets, int64_t E,
                                          int64_t I) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t r = i / I, c = i % I;
    if (r >= offsets[E]) return;
    const float v = swiglu_value(h[r * 2 * I + c], h[r * 2 * I + I + c]);
    a[i] = v;
    if (a16) a16[i] = __float2bfloat16_rn(v);
}

// dh[r] from da[r] through swiglu at h[r], for the expert rows. The fp32 path writes dh (fp32); the tensor-core path
// writes dh16 (bf16, the next products' operand) and a16 = bf16(swiglu(h)) — the forward's a16, recomputed here
// (the same function of h), for the down weight's gradient.
template <bool kBf16>
__global__ void swiglu_backward_expert_rows_kernel(float *dh, bf16 *dh16, bf16 *a16, const float *da, const float *h,
                                                   const int64_t *offsets, int64_t E, int64_t I) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t r = i / I, c = i % I;
    if (r >= offsets[E]) return;
    const float g = h[r * 2 * I + c], u = h[r * 2 * I + I + c];
    float dg, du;
    swiglu_grads(g, u, da[i], dg, du);
    if constexpr (kBf16) {
        dh16[r * 2 * I + c] = __float2bfloat16_rn(dg), dh16[r * 2 * I + I + c] = __float2bfloat16_rn(du);
        a16[i] = __float2bfloat16_rn(swiglu_value(g, u));
    } else {
        dh[r * 2 * I + c] = dg, dh[r * 2 * I + I + c] = du;
    }
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

// Row r of the grouped order (token n = order[r]): dy[r] = p_sel[n]·dout[n] (and dy16[r] = bf16(dy[r]) when given),
// dp_sel[n] = dout[n]·y[r].
constexpr int kRowThreads = 256;
__global__ void __launch_bounds__(kRowThreads)
    output_grads_kernel(float *dy, bf16 *dy16, float *dp_sel, const float *dout, const float *y, const int32_t *order,
                        const float *p_sel, int64_t D) {
    const int64_t r = blockIdx.x, n = order[r];
    float dot = 0.0f;
    for (int64_t c = threadIdx.x; c < D; c += kRowThreads) {
        const float v = p_sel[n] * dout[n * D + c];
        dy[r * D + c] = v;
        if (dy16) dy16[r * D + c] = __float2bfloat16_rn(v);
        dot += dout[n * D + c] * y[r * D + c];
    }
    dot = block_sum<kRowThreads>(dot);
    if (threadIdx.x == 0) dp_sel[n] = dot;
}

constexpr int kThreads = 256;

// C = A·B_e over the expert groups in fp32 (see grouped_gemm_kernel); the grid covers the most row tiles any
// grouping of N rows into E groups can have, ceil(N/kTile) + E, and blocks past the last tile return.
template <bool kTransB>
void grouped_gemm(float *C, const float *A, const float *B, const int64_t *offsets, int64_t N, int64_t E, int64_t K,
                  int64_t ncols) {
    const int64_t row_tiles = (N + kTile - 1) / kTile + E, col_tiles = (ncols + kTile - 1) / kTile;
    if (col_tiles > 65535) fail("moe experts: {} output columns exceed the CUDA grid", ncols);
    grouped_gemm_kernel<kTransB><<<dim3(unsigned(row_tiles), unsigned(col_tiles)), dim3(kTile, kTile)>>>(
        C, A, B, offsets, E, K, ncols);
    ZAYA_CUDA_LAUNCHED();
}

void grouped_weight_grad(float *dW, const float *L, const float *R, const int64_t *offsets, int64_t E, int64_t P,
                         int64_t Q) {
    const int64_t p_tiles = (P + kTile - 1) / kTile, q_tiles = (Q + kTile - 1) / kTile;
    if (p_tiles > 65535 || E > 65535)
        fail("moe experts: weight gradient {}x{} x {} experts exceeds the CUDA grid", P, Q, E);
    grouped_weight_grad_kernel<<<dim3(unsigned(q_tiles), unsigned(p_tiles), unsigned(E)), dim3(kTile, kTile)>>>(
        dW, L, R, offsets, P, Q);
    ZAYA_CUDA_LAUNCHED();
}

// The bf16 rows of the tensor-core path, carved from one grow-once scratch (256-byte aligned pieces): xg16 [N,D],
// a16 [N,I], dy16 [N,D], dh16 [N,2I]. The forward uses xg16 and a16, the backward all four (its xg16 converted
// again from the saved xg: the scratch is shared by every layer).
struct Bf16Rows {
    bf16 *xg = nullptr, *a = nullptr, *dy = nullptr, *dh = nullptr; // null on the fp32 path
    static Bf16Rows carve(int64_t N, const MoeShape &s) {
        const auto p = scratch_pieces(Scratch::MoeBf16, moe_bf16_pieces(N, s));
        return {reinterpret_cast<bf16 *>(p[0]), reinterpret_cast<bf16 *>(p[1]), reinterpret_cast<bf16 *>(p[2]),
                reinterpret_cast<bf16 *>(p[3])};
    }
};

const uint16_t *bits(const bf16 *p) { return reinterpret_cast<const uint16_t *>(p); }

// The tensor-core path, when the caller gave bf16 weights and there are experts (it fails for shapes it cannot run).
bool use_tensor_cores(const ExpertWeightsBf16 *w16, const MoeShape &s) {
    if (!w16 || s.E == 0) return false;
    if (!experts_on_tensor_cores(s))
        fail("moe experts: hidden size {} and expert width {} must be multiples of 8 for bf16 tensor cores", s.D,
             s.I);
    return true;
}

} // namespace

void moe_experts_forward(float *out, float *xg, float *h, float *a, float *y, const float *x, const int32_t *order,
                         const int64_t *offsets, const float *p_sel, const float *gate_up, const float *down,
                         int64_t N, const MoeShape &s, const ExpertWeightsBf16 *w16) {
    const int64_t D = s.D, I = s.I, E = s.E;
    if (N == 0) return;
    const bool tc = use_tensor_cores(w16, s);
    const Bf16Rows b = tc ? Bf16Rows::carve(N, s) : Bf16Rows{};
    permute_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(xg, b.xg, x, order, N, D, false);
    ZAYA_CUDA_LAUNCHED();
    if (E > 0) {
        // h = xg·Gate_Upᵀ  [rows, 2I]
        if (tc) grouped_gemm_nt_tc(h, bits(b.xg), w16->gate_up, offsets, N, E, D, 2 * I);
        else grouped_gemm<true>(h, xg, gate_up, offsets, N, E, D, 2 * I);
        swiglu_expert_rows_kernel<<<blocks_for(N * I, kThreads), kThreads>>>(a, b.a, h, offsets, E, I);
        ZAYA_CUDA_LAUNCHED();
        // y = a·Downᵀ  [rows, D]
        if (tc) grouped_gemm_nt_tc(y, bits(b.a), w16->down, offsets, N, E, I, D);
        else grouped_gemm<true>(y, a, down, offsets, N, E, I, D);
    }
    skip_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(y, xg, offsets, E, N, D, s.skip_passthrough);
    ZAYA_CUDA_LAUNCHED();
    scale_scatter_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(out, y, order, p_sel, N, D);
    ZAYA_CUDA_LAUNCHED();
}

void moe_experts_backward(float *dx, float *dp_sel, float *dgate_up, float *ddown, float *dy, float *da, float *dh,
                          float *dxg, const float *dout, const int32_t *order, const int64_t *offsets,
                          const float *p_sel, const float *xg, const float *h, const float *a, const float *y,
                          const float *gate_up, const float *down, int64_t N, const MoeShape &s,
                          const ExpertWeightsBf16 *w16) {
    const int64_t D = s.D, I = s.I, E = s.E;
    if (N == 0) return;
    const bool tc = use_tensor_cores(w16, s);
    const Bf16Rows b = tc ? Bf16Rows::carve(N, s) : Bf16Rows{};
    output_grads_kernel<<<unsigned(N), kRowThreads>>>(dy, b.dy, dp_sel, dout, y, order, p_sel, D);
    ZAYA_CUDA_LAUNCHED();
    if (E > 0 && tc) {
        grouped_gemm_nn_tc(da, bits(b.dy), w16->down, offsets, N, E, D, I); // da = dy·Down  [rows, I]
        swiglu_backward_expert_rows_kernel<true>
            <<<blocks_for(N * I, kThreads), kThreads>>>(nullptr, b.dh, b.a, da, h, offsets, E, I);
        ZAYA_CUDA_LAUNCHED();
        grouped_weight_grad_tc(ddown, bits(b.dy), bits(b.a), offsets, E, D, I);          // dDown += dyᵀ·a
        grouped_gemm_nn_tc(dxg, bits(b.dh), w16->gate_up, offsets, N, E, 2 * I, D);       // dxg = dh·Gate_Up
        to_bf16(reinterpret_cast<uint16_t *>(b.xg), xg, N * D);
        grouped_weight_grad_tc(dgate_up, bits(b.dh), bits(b.xg), offsets, E, 2 * I, D); // dGate_Up += dhᵀ·xg
    } else if (E > 0) {
        grouped_gemm<false>(da, dy, down, offsets, N, E, D, I); // da = dy·Down  [rows, I]
        grouped_weight_grad(ddown, dy, a, offsets, E, D, I);     // dDown += dyᵀ·a  [D, I]
        swiglu_backward_expert_rows_kernel<false>
            <<<blocks_for(N * I, kThreads), kThreads>>>(dh, nullptr, nullptr, da, h, offsets, E, I);
        ZAYA_CUDA_LAUNCHED();
        grouped_gemm<false>(dxg, dh, gate_up, offsets, N, E, 2 * I, D); // dxg = dh·Gate_Up  [rows, D]
        grouped_weight_grad(dgate_up, dh, xg, offsets, E, 2 * I, D);   // dGate_Up += dhᵀ·xg  [2I, D]
    }
    skip_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(dxg, dy, offsets, E, N, D, s.skip_passthrough);
    ZAYA_CUDA_LAUNCHED();
    permute_rows_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(dx, nullptr, dxg, order, N, D, true);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
