// Attention forward: one block per (query tile, head, sequence) runs an online softmax over the key tiles the
// query tile can see, keeping the unnormalised output, row max and row sum in shared memory.
#include "ops/cuda/attention_tiles.cuh"

namespace zaya::cuda {

namespace {

using attn::kThreads;
using attn::kTileK;
using attn::kTileQ;

// Shared memory of the forward kernel, in floats (see the carve-up at the top of the kernel).
size_t forward_shared_floats(int hd) {
    return size_t(kTileQ) * hd * 2 + size_t(kTileK) * (hd + 1) + size_t(kTileK) * hd + kTileQ * kTileK + 3 * kTileQ;
}

// Rows are (position, head) pairs: row (t, h) of x[N, heads, hd] starts at (t·heads + h)·hd.
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                             const int64_t *seq_start, int nq, int nkv, int hd, float scale, int64_t window) {
    extern __shared__ float smem[];
    const int kstride = hd + 1;             // padded key rows: a warp reading 16 keys at one d hits distinct banks
    float *qs = smem;                       // [kTileQ][hd]    query tile
    float *ks = qs + kTileQ * hd;           // [kTileK][hd+1]  key tile
    float *vs = ks + kTileK * kstride;      // [kTileK][hd]    value tile
    float *os = vs + kTileK * hd;           // [kTileQ][hd]    unnormalised output accumulator
    float *ps = os + kTileQ * hd;           // [kTileQ][kTileK] scores, then probabilities
    float *row_max = ps + kTileQ * kTileK;  // [kTileQ]
    float *row_sum = row_max + kTileQ;      // [kTileQ]
    float *row_corr = row_sum + kTileQ;     // [kTileQ] rescale of the accumulator for the new max

    const int tid = int(threadIdx.x), h = int(blockIdx.y), j = h / (nq / nkv);
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    for (int64_t qa = int64_t(blockIdx.x) * kTileQ; qa < T; qa += int64_t(gridDim.x) * kTileQ) {
        const int rows = int(min(int64_t(kTileQ), T - qa)); // queries qa … qa+rows−1 (sequence positions)
        for (int i = tid; i < kTileQ * hd; i += kThreads) {
            const int r = i / hd, d = i % hd;
            qs[i] = r < rows ? q[((t0 + qa + r) * nq + h) * hd + d] : 0.0f;
            os[i] = 0.0f;
        }
        if (tid < kTileQ) row_max[tid] = -INFINITY, row_sum[tid] = 0.0f;
        // Keys any row of the tile may see: [lo, hi) — causal up to the last row, window from the first row.
        const int64_t lo = window > 0 ? max(int64_t(0), qa - window + 1) : 0, hi = qa + rows;
        for (int64_t ka = lo; ka < hi; ka += kTileK) {
            const int cols = int(min(int64_t(kTileK), hi - ka)); // keys ka … ka+cols−1
            __syncthreads(); // the previous key tile is consumed; the query tile and row state are in place
            for (int i = tid; i < kTileK * hd; i += kThreads) {
                const int c = i / hd, d = i % hd;
                const int64_t src = ((t0 + ka + c) * nkv + j) * hd + d;
                ks[c * kstride + d] = c < cols ? k[src] : 0.0f;
                vs[i] = c < cols ? v[src] : 0.0f;
            }
            __syncthreads();
            // Scores of visible (query, key) pairs; −∞ marks the rest.
            for (int i = tid; i < kTileQ * kTileK; i += kThreads) {
                const int r = i / kTileK, c = i % kTileK;
                const bool vis = r < rows && c < cols && attn::visible(qa + r, ka + c, window);
                float dot = 0.0f;
                if (vis)
                    for (int d = 0; d < hd; ++d) dot += qs[r * hd + d] * ks[c * kstride + d];
                ps[i] = vis ? dot * scale : -INFINITY;
            }
            __syncthreads();
            // Online softmax, one thread per row: the new running max, the factor that rescales what was
            // accumulated under the old max, and the tile's probabilities exp(s − max) in place of the scores.
            if (tid < kTileQ) {
                float *pr = ps + tid * kTileK;
                const float old_max = row_max[tid];
                float m = old_max;
                for (int c = 0; c < kTileK; ++c) m = fmaxf(m, pr[c]);
                // m = −∞: this row has seen no visible key yet (a padding row, or window) — nothing to rescale.
                const float corr = m == -INFINITY ? 1.0f : expf(old_max - m);
                float sum = row_sum[tid] * corr;
                for (int c = 0; c < kTileK; ++c) {
                    const float p = pr[c] == -INFINITY ? 0.0f : expf(pr[c] - m);
                    pr[c] = p;
                    sum += p;
                }
                row_max[tid] = m, row_sum[tid] = sum, row_corr[tid] = corr;
            }
            __syncthreads();
            for (int i = tid; i < kTileQ * hd; i += kThreads) {
                const int r = i / hd, d = i % hd;
                float acc = os[i] * row_corr[r];
                for (int c = 0; c < cols; ++c) acc += ps[r * kTileK + c] * vs[c * hd + d];
                os[i] = acc;
            }
        }
        __syncthreads(); // the last accumulation is complete
        // Every real row saw at least its own key, so row_sum > 0.
        for (int i = tid; i < rows * hd; i += kThreads) {
            const int r = i / hd, d = i % hd;
            out[((t0 + qa + r) * nq + h) * hd + d] = os[i] / row_sum[r];
        }
        if (lse && tid < rows) lse[(t0 + qa + tid) * nq + h] = row_max[tid] + logf(row_sum[tid]);
        __syncthreads(); // all reads of the row state are done before the next tile resets it
    }
}

} // namespace

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v,
                       const VarlenBatch &batch, const AttnShape &s) {
    attn::check_shape(s);
    if (batch.N == 0 || batch.B == 0) return;
    const size_t bytes = forward_shared_floats(int(s.hd)) * sizeof(float);
    allow_shared_bytes(attention_forward_kernel, bytes);
    attention_forward_kernel<<<attn::tile_grid(batch, s.nq, kTileQ), kThreads, bytes>>>(
        out, lse, q, k, v, batch.seq_start, int(s.nq), int(s.nkv), int(s.hd), float(s.scale), s.window);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
