// Attention forward on bf16 tensor cores, flash-attention 2 style: attention_forward's semantics and grid, with
// 64-query × 64-key tiles. q, k, v are rounded to bf16 once (into the attention scratch); each block streams its key
// and value tiles through double-buffered shared memory by cp.async while its 4 warps compute; each warp keeps its
// 16 query rows' scores, probabilities and output in registers (mma.sync, ops/cuda/mma.cuh). S = Q·Kᵀ and
// O += P·V accumulate in fp32; the online softmax stays fp32 (P is rounded to bf16 for the product, the row sums
// use fp32 P) — what flash attention does under autocast. A prefill pass over a KV cache (the GPU decoder's) takes
// the running maxima as integers, the softmax of a bf16 cache (softmax_pow2.cuh): its P, rounded, are then the
// decode kernels' and the CPU's whatever maxima each subtracts.
#include "ops/cuda/attention_fa.cuh"
#include "ops/cuda/ops.h"
#include "ops/cuda/runtime.h"
#include "ops/cuda/softmax_pow2.cuh"

#include <cmath>

namespace zaya::cuda {

namespace {

using namespace attn_fa;
using bf16 = __nv_bfloat16;

// Rows are (position, head) pairs as in attention_forward_kernel. scale_log2 = scale·log2(e): the softmax runs in
// base 2 (exp2 is one instruction), lse is converted back. cached > 0 (one sequence, seq_start {0, T}): the T
// queries are the last of cached + T positions, k and v hold the keys of all of them (a prefill pass over a cache);
// query i is at position cached + i, key row r at position r. kPow2: integer running maxima (a prefill pass).
template <int HD, bool kPow2>
__global__ void __launch_bounds__(kThreads)
    attention_forward_fa_kernel(float *out, uint32_t *out16, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                const int64_t *seq_start, int nq, int nkv, float scale_log2, int64_t window,
                                int64_t cached) {
    extern __shared__ float smem[];
    bf16 *qs = shared_tiles(smem);         // [kRows][kLd] queries
    bf16 *ks = qs + kRows * kLd<HD>;       // [2][kRows][kLd] keys, double-buffered
    bf16 *vs = ks + 2 * kRows * kLd<HD>;   // [2][kRows][kLd] values
    constexpr int kTile = kTileElems<HD>;

    const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
    const int h = int(blockIdx.y), j = h / (nq / nkv);
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0, tiles = (T + kRows - 1) / kRows;
    // The last query tiles see the most keys: blocks take them first, so the long ones start early.
    for (int64_t i = blockIdx.x; i < tiles; i += gridDim.x) {
        const int64_t qa = (tiles - 1 - i) * kRows, qp = cached + qa; // the tile's first query row, its position
        const int rows = int(min(int64_t(kRows), T - qa)); // queries qa … qa+rows−1
        const int64_t lo = window > 0 ? max(int64_t(0), qp - window + 1) : 0, hi = qp + rows; // their keys' positions
        __syncthreads(); // every warp is done with the previous query tile's shared tiles
        load_rows_async<HD>(qs, q, t0 + qa, rows, nq, h);
        mma::cp_async_commit();
        load_rows_async<HD>(ks, k, t0 + lo, int(min(int64_t(kRows), hi - lo)), nkv, j);
        load_rows_async<HD>(vs, v, t0 + lo, int(min(int64_t(kRows), hi - lo)), nkv, j);
        mma::cp_async_commit();
        mma::cp_async_wait<1>(); // the queries (the first key tile may still be in flight)
        __syncthreads();
        uint32_t qf[HD / 16][4];
        load_a_rows<HD>(qf, qs, warp);

        float o[HD / 8][4] = {};
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}; // rows g and g + 8: running max, lane's sum
        const int64_t q_first = qp + warp * kWarpRows, q_last = q_first + kWarpRows - 1; // this warp's queries
        int buf = 0;
        for (int64_t ka = lo; ka < hi; ka += kRows, buf ^= 1) {
            const int cols = int(min(int64_t(kRows), hi - ka));
            next_key_tiles<HD>(ks, vs, buf, k, v, t0, ka, hi, nkv, j);
            __syncthreads(); // this tile landed, from every thread's copies

            float s[8][4] = {};
            product_with_rows<HD>(s, RegisterRows{qf}, ks + buf * kTile); // S = Q·Kᵀ
            // Masked where a pair is invisible (padding columns are keys past every real query: causally invisible); a tile
            // wholly inside every row's causal window skips the test.
            const bool whole = ka + kRows - 1 <= q_first && (window <= 0 || ka > q_last - window);
            float mx[2] = {m[0], m[1]};
#pragma unroll
            for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float x = s[nt][e] * scale_log2;
                    if (!whole) {
                        const int64_t tq = q_first + g + (e >= 2 ? 8 : 0), tk = ka + nt * 8 + 2 * t + (e & 1);
                        if (tk - ka >= cols || !attn::visible(tq, tk, window)) x = -INFINITY;
                    }
                    s[nt][e] = x;
                    mx[e / 2] = fmaxf(mx[e / 2], x);
                }
            }
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                mx[r] = quad_max(mx[r]);
                if constexpr (kPow2)
                    if (mx[r] != -INFINITY) mx[r] = pow2::max_of_scores(mx[r]);
                // A row that has seen no visible key yet keeps max −∞: subtract 0 instead (its p are all 0).
                const float base = mx[r] == -INFINITY ? 0.0f : mx[r];
                const float corr = kPow2 ? pow2::pow2_int(m[r] - base) : exp2f(m[r] - base);
                m[r] = mx[r], l[r] *= corr;
#pragma unroll
                for (int nt = 0; nt < HD / 8; ++nt) o[nt][2 * r] *= corr, o[nt][2 * r + 1] *= corr;
#pragma unroll
                for (int nt = 0; nt < 8; ++nt) {
                    const float x0 = s[nt][2 * r], x1 = s[nt][2 * r + 1];
                    const float p0 = kPow2 ? pow2::exp2_below(x0, base) : exp2f(x0 - base),
                                p1 = kPow2 ? pow2::exp2_below(x1, base) : exp2f(x1 - base);
                    s[nt][2 * r] = p0, s[nt][2 * r + 1] = p1;
                    l[r] += p0 + p1;
                }
            }
            uint32_t pa[4][4];
            scores_as_a(pa, s);
            product_with_columns<HD>(o, pa, vs + buf * kTile); // O += P·V
            __syncthreads(); // every warp has read this buffer before the next iteration's copies refill it
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int row = warp * kWarpRows + g + 8 * r;
            const float sum = quad_sum(l[r]);
            if (row >= rows) continue;
            const int64_t at = ((t0 + qa + row) * nq + h) * HD + 2 * t; // this lane's column pairs: at + 8·nt
#pragma unroll
            for (int nt = 0; nt < HD / 8; ++nt) {
                const float o0 = o[nt][2 * r] / sum, o1 = o[nt][2 * r + 1] / sum;
                out[at + nt * 8] = o0, out[at + nt * 8 + 1] = o1;
                if (out16) out16[(at + nt * 8) / 2] = mma::pack_bf16x2(o0, o1);
            }
            if (lse && t == 0) lse[(t0 + qa + row) * nq + h] = (m[r] + log2f(sum)) * 0.69314718f;
        }
    }
}

} // namespace

namespace attn_fa {
// [N·nq·hd] q, [(cached + N)·nkv·hd] k and v, then [N·nq·hd] dout if given.
Bf16Inputs round_inputs(const float *q, const float *k, const float *v, const float *dout, int64_t N,
                        const AttnShape &s, int64_t cached) {
    const int64_t nqe = N * s.nq * s.hd, nke = (cached + N) * s.nkv * s.hd;
    const size_t bytes = attention_bf16_bytes(N, s, dout) + size_t(2 * cached * s.nkv * s.hd) * 2;
    auto *p = static_cast<uint16_t *>(device_scratch(Scratch::AttentionBf16, bytes));
    to_bf16(p, q, nqe);
    to_bf16(p + nqe, k, nke);
    to_bf16(p + nqe + nke, v, nke);
    if (dout) to_bf16(p + nqe + 2 * nke, dout, nqe);
    const auto *b = reinterpret_cast<const bf16 *>(p);
    return {b, b + nqe, b + nqe + nke, dout ? b + nqe + 2 * nke : nullptr};
}
} // namespace attn_fa

namespace {

// Every forward: the kernel launched on bf16 inputs (cached: see attention_forward_fa_kernel); prefill: a pass over
// a KV cache, with integer maxima.
void forward_fa(float *out, uint16_t *out16, float *lse, const Bf16Inputs &in, const VarlenBatch &batch,
                const AttnShape &s, int64_t cached, bool prefill) {
    with_head_dim(s.hd, [&](auto hd) {
        constexpr int HD = decltype(hd)::value;
        const float scale_log2 = float(s.scale) * 1.44269504f;
        const size_t bytes = 128 + 5 * kTileBytes<HD>;
        auto *kernel = prefill ? attention_forward_fa_kernel<HD, true> : attention_forward_fa_kernel<HD, false>;
        allow_shared_bytes(kernel, bytes);
        kernel<<<attn::tile_grid(batch, s.nq, kRows), kThreads, bytes>>>(
            out, reinterpret_cast<uint32_t *>(out16), lse, in.q, in.k, in.v, batch.seq_start, int(s.nq), int(s.nkv),
            scale_log2, s.window, cached);
        ZAYA_CUDA_LAUNCHED();
    });
}

// The shape checked first (a head size the kernels lack fails even for an empty batch); whether there is work.
bool fa_work(const AttnShape &s, const VarlenBatch &batch) {
    attn::check_shape(s);
    with_head_dim(s.hd, [](auto) {});
    return batch.N > 0 && batch.B > 0;
}

// Both fp32-input forwards: the inputs rounded, then the kernel.
void forward_fa(float *out, uint16_t *out16, float *lse, const float *q, const float *k, const float *v,
                const VarlenBatch &batch, const AttnShape &s, int64_t cached, bool prefill) {
    if (!fa_work(s, batch)) return;
    forward_fa(out, out16, lse, round_inputs(q, k, v, nullptr, batch.N, s, cached), batch, s, cached, prefill);
}

// A prefill's one-sequence batch: n new rows after `cached` keys.
VarlenBatch prefill_batch(const int64_t *seq_start, int64_t n, int64_t cached) {
    if (cached < 0) fail("attention_prefill_bf16: {} cached keys", cached);
    return VarlenBatch{seq_start, 1, n, n};
}

} // namespace

void attention_forward_bf16(float *out, float *lse, const float *q, const float *k, const float *v,
                            const VarlenBatch &batch, const AttnShape &s, uint16_t *out16) {
    forward_fa(out, out16, lse, q, k, v, batch, s, 0, false);
}

void attention_prefill_bf16(float *out, const float *q, const float *k, const float *v, const int64_t *seq_start,
                            int64_t n, int64_t cached, const AttnShape &s, uint16_t *out16) {
    forward_fa(out, out16, nullptr, q, k, v, prefill_batch(seq_start, n, cached), s, cached, true);
}

void attention_prefill_bf16(float *out, const float *q, const uint16_t *k, const uint16_t *v,
                            const int64_t *seq_start, int64_t n, int64_t cached, const AttnShape &s,
                            uint16_t *out16) {
    const VarlenBatch batch = prefill_batch(seq_start, n, cached);
    if (!fa_work(s, batch)) return;
    auto *q16 = static_cast<uint16_t *>(device_scratch(Scratch::AttentionBf16, size_t(n * s.nq * s.hd) * 2));
    to_bf16(q16, q, n * s.nq * s.hd); // only the queries: the cache's keys and values are bf16 already
    auto b = [](const uint16_t *p) { return reinterpret_cast<const bf16 *>(p); };
    forward_fa(out, out16, nullptr, Bf16Inputs{b(q16), b(k), b(v), nullptr}, batch, s, cached, true);
}

} // namespace zaya::cuda
