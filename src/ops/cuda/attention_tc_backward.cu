// Attention backward on bf16 tensor cores, flash-attention 2 style: attention_backward's split — dq by (query
// tile, head), dk/dv by (key tile, kv head) over the group's query heads, so every gradient element has one writer
// (deterministic, no atomics) — with 64×64 tiles streamed through double-buffered shared memory by cp.async and
// each warp's 16 rows of scores and gradients in registers (mma.sync). P is recomputed from bf16 q, k and the saved
// lse (as attention_forward_bf16 made it); S = Q·Kᵀ, dP = dO·Vᵀ, dQ += dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q run on tensor
// cores with bf16 operands (P and dS rounded for their products) and fp32 accumulation; the softmax backward
// dS = P(dP − D)·scale is fp32 (D = rowsum(dO ⊙ O) from the fp32 out and dout).
#include "ops/cuda/attention_fa.cuh"
#include "ops/cuda/runtime.h"

#include <cmath>

namespace zaya::cuda {

namespace {

using namespace attn_fa;
using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.44269504f;

// The softmax backward on a 16×64 tile held as C fragments, in two halves so that a kernel can finish one product
// with P before it computes dP (fewer live registers). probabilities: s (scores) becomes P = 2^(s·scale_log2 −
// lse2), zero where visible(nt, e) is false; lse2 (= lse·log2 e) of element e's query from row_lse2(nt, e).
// score_gradients: dp becomes dS·scale = P·(dP − D)·scale (zero wherever P is), D from row_d(nt, e).
template <class Visible, class Lse>
__device__ inline void probabilities(float s[8][4], float scale_log2, const Visible &visible, const Lse &row_lse2) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[nt][e] = visible(nt, e) ? exp2f(s[nt][e] * scale_log2 - row_lse2(nt, e)) : 0.0f;
    }
}
template <class D>
__device__ inline void score_gradients(float dp[8][4], const float p[8][4], float scale, const D &row_d) {
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) dp[nt][e] = p[nt][e] * (dp[nt][e] - row_d(nt, e)) * scale;
    }
}

template <int HD> constexpr size_t dq_bytes() { return 128 + 6 * kTileBytes<HD>; }

// dq[(t, h), ·] = Σ_keys dS·K over the visible keys of query tile qa, for head h. Shared: the query and dout tiles,
// then key and value tiles double-buffered.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_dq_fa_kernel(float *dq, const bf16 *dout, const float *lse, const float *rd, const bf16 *q,
                           const bf16 *k, const bf16 *v, const int64_t *seq_start, int nq, int nkv, float scale,
                           int64_t window) {
    extern __shared__ float smem[];
    constexpr int kTile = kTileElems<HD>;
    bf16 *qs = shared_tiles(smem), *dos = qs + kTile, *ks = dos + kTile, *vs = ks + 2 * kTile;

    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
    const int h = int(blockIdx.y), j = h / (nq / nkv);
    const float scale_log2 = scale * kLog2e;
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0, tiles = (T + kRows - 1) / kRows;
    for (int64_t i = blockIdx.x; i < tiles; i += gridDim.x) { // the longest rows first, as in the forward
        const int64_t qa = (tiles - 1 - i) * kRows;
        const int rows = int(min(int64_t(kRows), T - qa));
        const int64_t lo = window > 0 ? max(int64_t(0), qa - window + 1) : 0, hi = qa + rows;
        __syncthreads(); // every warp is done with the previous query tile's shared tiles
        load_rows_async<HD>(qs, q, t0 + qa, rows, nq, h);
        load_rows_async<HD>(dos, dout, t0 + qa, rows, nq, h);
        load_rows_async<HD>(ks, k, t0 + lo, int(min(int64_t(kRows), hi - lo)), nkv, j);
        load_rows_async<HD>(vs, v, t0 + lo, int(min(int64_t(kRows), hi - lo)), nkv, j);
        mma::cp_async_commit();

        const int64_t q_first = qa + warp * kWarpRows, q_last = q_first + kWarpRows - 1;
        float lse2[2], d[2]; // rows g and g + 8 (padding rows: anything finite, never written)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = warp * kWarpRows + g + 8 * r;
            const int64_t at = (t0 + qa + min(row, rows - 1)) * nq + h;
            lse2[r] = lse[at] * kLog2e, d[r] = rd[at];
        }
        float acc[HD / 8][4] = {};
        int buf = 0;
        for (int64_t ka = lo; ka < hi; ka += kRows, buf ^= 1) {
            const int cols = int(min(int64_t(kRows), hi - ka));
            next_key_tiles<HD>(ks, vs, buf, k, v, t0, ka, hi, nkv, j);
            __syncthreads(); // this key tile (and on the first, the query and dout tiles) landed
            const bf16 *kt = ks + buf * kTile, *vt = vs + buf * kTile;
            float s[8][4] = {}, dp[8][4] = {};
            product_with_rows<HD>(s, SharedRows<HD>(qs, warp), kt);   // S = Q·Kᵀ
            product_with_rows<HD>(dp, SharedRows<HD>(dos, warp), vt); // dP = dO·Vᵀ
            // Padding keys are past every real query (causally invisible); a tile wholly inside every row's causal
            // window skips the per-pair test.
            const bool whole = ka + kRows - 1 <= q_first && (window <= 0 || ka > q_last - window);
            probabilities(
                s, scale_log2,
                [&](int nt, int e) {
                    const int64_t tq = q_first + g + (e >= 2 ? 8 : 0), tk = ka + nt * 8 + 2 * t + (e & 1);
                    return whole || (tk - ka < cols && attn::visible(tq, tk, window));
                },
                [&](int, int e) { return lse2[e / 2]; });
            score_gradients(dp, s, scale, [&](int, int e) { return d[e / 2]; });
            uint32_t dsa[4][4];
            scores_as_a(dsa, dp);
            product_with_columns<HD>(acc, dsa, kt); // dQ += dS·K
            __syncthreads(); // every warp has read this buffer before the next iteration's copies refill it
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = warp * kWarpRows + g + 8 * r;
            if (row >= rows) continue;
            float *dst = dq + ((t0 + qa + row) * nq + h) * HD + 2 * t;
#pragma unroll
            for (int nt = 0; nt < HD / 8; ++nt) dst[nt * 8] = acc[nt][2 * r], dst[nt * 8 + 1] = acc[nt][2 * r + 1];
        }
    }
}

template <int HD> constexpr size_t dkdv_bytes() { return 128 + 6 * kTileBytes<HD> + 4 * kRows * sizeof(float); }

// dk, dv of key tile ka for kv head j: Σ over the group's query heads and the query tiles that see the tile, in
// that order. Computed transposed — each warp owns 16 keys: Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, so Pᵀ and dSᵀ are already
// the A operands of dV += Pᵀ·dO and dK += dSᵀ·Q. Shared: the key and value tiles, then query and dout tiles and
// their rows' lse·log2 e and D, double-buffered.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_fa_kernel(float *dk, float *dv, const bf16 *dout, const float *lse, const float *rd, const bf16 *q,
                             const bf16 *k, const bf16 *v, const int64_t *seq_start, int nq, int nkv, float scale,
                             int64_t window) {
    extern __shared__ float smem[];
    constexpr int kTile = kTileElems<HD>;
    bf16 *ks = shared_tiles(smem), *vs = ks + kTile, *qs = vs + kTile, *dos = qs + 2 * kTile;
    float *lse2_s = reinterpret_cast<float *>(dos + 2 * kTile), *d_s = lse2_s + 2 * kRows; // [2][kRows] each

    const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    const int j = int(blockIdx.y), group = nq / nkv;
    const float scale_log2 = scale * kLog2e;
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    // Stages query tile qa of head h into buffer b: q and dout rows by cp.async (the caller commits), lse and D by
    // plain loads (strided by heads; zeros for padding rows), visible to all after the next barrier.
    auto stage_queries = [&](int b, int h, int64_t qa, int rows) {
        load_rows_async<HD>(qs + b * kTile, q, t0 + qa, rows, nq, h);
        load_rows_async<HD>(dos + b * kTile, dout, t0 + qa, rows, nq, h);
        if (tid < kRows) {
            const int64_t at = (t0 + qa + tid) * nq + h;
            lse2_s[b * kRows + tid] = tid < rows ? lse[at] * kLog2e : 0.0f;
            d_s[b * kRows + tid] = tid < rows ? rd[at] : 0.0f;
        }
    };
    for (int64_t ka = int64_t(blockIdx.x) * kRows; ka < T; ka += int64_t(gridDim.x) * kRows) {
        const int cols = int(min(int64_t(kRows), T - ka)); // keys ka … ka+cols−1
        // Queries that see any key of the tile: [ka, last) — causal from the first key, window from the last.
        const int64_t last = window > 0 ? min(T, ka + cols - 1 + window) : T;
        const int64_t q_tiles = (last - ka + kRows - 1) / kRows, steps = q_tiles * group; // (head, query tile) pairs
        const int64_t k_first = ka + warp * kWarpRows, k_last = k_first + kWarpRows - 1; // this warp's keys
        __syncthreads(); // every warp is done with the previous key tile's shared tiles
        load_rows_async<HD>(ks, k, t0 + ka, cols, nkv, j);
        load_rows_async<HD>(vs, v, t0 + ka, cols, nkv, j);
        stage_queries(0, j * group, ka, int(min(int64_t(kRows), last - ka)));
        mma::cp_async_commit();

        float dk_acc[HD / 8][4] = {}, dv_acc[HD / 8][4] = {};
        for (int64_t step = 0; step < steps; ++step) {
            const int b = int(step % 2);
            const int64_t qa = ka + step % q_tiles * kRows;
            const int rows = int(min(int64_t(kRows), last - qa));
            if (step + 1 < steps) {
                const int64_t qn = ka + (step + 1) % q_tiles * kRows;
                stage_queries(b ^ 1, j * group + int((step + 1) / q_tiles), qn, int(min(int64_t(kRows), last - qn)));
                mma::cp_async_commit();
                mma::cp_async_wait<1>();
            } else {
                mma::cp_async_wait<0>();
            }
            __syncthreads(); // this query tile (and on the first step, the key and value tiles) landed
            const bf16 *qt = qs + b * kTile, *dot = dos + b * kTile;
            const float *lse2 = lse2_s + b * kRows, *dd = d_s + b * kRows;
            // Pᵀ and dV first, then dPᵀ, dSᵀ and dK: the two score tiles and the two packed operands are never all live
            // at once (with both accumulators, that passed the 255 registers at hd 128 and spilled).
            float st[8][4] = {};
            product_with_rows<HD>(st, SharedRows<HD>(ks, warp), qt); // Sᵀ = K·Qᵀ
            // Padding queries are masked (their lse and D are zeros); padding keys give rows that are never written.
            const bool whole = rows == kRows && k_last <= qa && (window <= 0 || k_first > qa + kRows - 1 - window);
            probabilities(
                st, scale_log2,
                [&](int nt, int e) {
                    const int c = nt * 8 + 2 * t + (e & 1);
                    const int64_t tk = k_first + g + (e >= 2 ? 8 : 0), tq = qa + c;
                    return whole || (c < rows && attn::visible(tq, tk, window));
                },
                [&](int nt, int e) { return lse2[nt * 8 + 2 * t + (e & 1)]; });
            {
                uint32_t pa[4][4];
                scores_as_a(pa, st);
                product_with_columns<HD>(dv_acc, pa, dot); // dV += Pᵀ·dO
            }
            float dpt[8][4] = {};
            product_with_rows<HD>(dpt, SharedRows<HD>(vs, warp), dot); // dPᵀ = V·dOᵀ
            score_gradients(dpt, st, scale, [&](int nt, int e) { return dd[nt * 8 + 2 * t + (e & 1)]; });
            uint32_t dsa[4][4];
            scores_as_a(dsa, dpt);
            product_with_columns<HD>(dk_acc, dsa, qt); // dK += dSᵀ·Q
            __syncthreads(); // every warp has read this buffer before the next step's copies refill it
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int c = warp * kWarpRows + g + 8 * r;
            if (c >= cols) continue;
            const int64_t at = ((t0 + ka + c) * nkv + j) * HD + 2 * t;
#pragma unroll
            for (int nt = 0; nt < HD / 8; ++nt) {
                dk[at + nt * 8] = dk_acc[nt][2 * r], dk[at + nt * 8 + 1] = dk_acc[nt][2 * r + 1];
                dv[at + nt * 8] = dv_acc[nt][2 * r], dv[at + nt * 8 + 1] = dv_acc[nt][2 * r + 1];
            }
        }
    }
}

} // namespace

void attention_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                             const float *q, const float *k, const float *v, const VarlenBatch &batch,
                             const AttnShape &s) {
    attn::check_shape(s);
    const int nq = int(s.nq), nkv = int(s.nkv);
    with_head_dim(s.hd, [&](auto hd) { // (a head size the kernels lack fails here, even for an empty batch)
        constexpr int HD = decltype(hd)::value;
        if (batch.N == 0 || batch.B == 0) return;
        const float *rd = attn::softmax_row_dots(dout, out, batch.N * nq, HD);
        const Bf16Inputs in = round_inputs(q, k, v, dout, batch.N, s);
        allow_shared_bytes(attention_dq_fa_kernel<HD>, dq_bytes<HD>());
        attention_dq_fa_kernel<HD><<<attn::tile_grid(batch, nq, kRows), kThreads, dq_bytes<HD>()>>>(
            dq, in.dout, lse, rd, in.q, in.k, in.v, batch.seq_start, nq, nkv, float(s.scale), s.window);
        ZAYA_CUDA_LAUNCHED();
        allow_shared_bytes(attention_dkdv_fa_kernel<HD>, dkdv_bytes<HD>());
        attention_dkdv_fa_kernel<HD><<<attn::tile_grid(batch, nkv, kRows), kThreads, dkdv_bytes<HD>()>>>(
            dk, dv, in.dout, lse, rd, in.q, in.k, in.v, batch.seq_start, nq, nkv, float(s.scale), s.window);
        ZAYA_CUDA_LAUNCHED();
    });
}

} // namespace zaya::cuda
