// Attention backward, flash-style: P is recomputed tile by tile from q, k and the saved lse. Two kernels so every
// gradient element has one writer (no atomics, deterministic): dq by (query tile, head), dk/dv by (key tile, kv
// head) summing over the group's query heads — the split of cpu::attention_backward.
#include "ops/cuda/attention_tiles.cuh"
#include "ops/cuda/runtime.h"

namespace zaya::cuda {

namespace {

using attn::kThreads;
using attn::kTileK;
using attn::kTileQ;

// rd[n·nq + h] = dout·out over hd: the softmax-backward correction D of each (position, head) row.
__global__ void row_dots_kernel(float *rd, const float *dout, const float *out, int64_t rows, int hd) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float acc = 0.0f;
    for (int d = 0; d < hd; ++d) acc += dout[r * hd + d] * out[r * hd + d];
    rd[r] = acc;
}

size_t dq_shared_floats(int hd) {
    return size_t(kTileQ) * hd * 3 + size_t(kTileK) * (hd + 1) * 2 + kTileQ * kTileK + 2 * kTileQ;
}

// dq = scale·Σ_k P(dP − D)·k over the visible keys, one block per (query tile, head, sequence).
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(float *dq, const float *dout, const float *lse, const float *rd, const float *q,
                        const float *k, const float *v, const int64_t *seq_start, int nq, int nkv, int hd,
                        float scale, int64_t window) {
    extern __shared__ float smem[];
    const int kstride = hd + 1;             // padded key rows (distinct banks across keys)
    float *qs = smem;                       // [kTileQ][hd]     queries
    float *dos = qs + kTileQ * hd;          // [kTileQ][hd]     dout rows
    float *dqs = dos + kTileQ * hd;         // [kTileQ][hd]     dq accumulator
    float *ks = dqs + kTileQ * hd;          // [kTileK][hd+1]   keys
    float *vs = ks + kTileK * kstride;      // [kTileK][hd+1]   values
    float *dss = vs + kTileK * kstride;     // [kTileQ][kTileK] dS = P(dP − D)·scale
    float *lse_s = dss + kTileQ * kTileK;   // [kTileQ]
    float *rd_s = lse_s + kTileQ;           // [kTileQ]

    const int tid = int(threadIdx.x), h = int(blockIdx.y), j = h / (nq / nkv);
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    for (int64_t qa = int64_t(blockIdx.x) * kTileQ; qa < T; qa += int64_t(gridDim.x) * kTileQ) {
        const int rows = int(min(int64_t(kTileQ), T - qa));
        for (int i = tid; i < kTileQ * hd; i += kThreads) {
            const int r = i / hd, d = i % hd;
            const int64_t src = ((t0 + qa + r) * nq + h) * hd + d;
            qs[i] = r < rows ? q[src] : 0.0f;
            dos[i] = r < rows ? dout[src] : 0.0f;
            dqs[i] = 0.0f;
        }
        if (tid < kTileQ) {
            const int64_t row = (t0 + qa + tid) * nq + h;
            lse_s[tid] = tid < rows ? lse[row] : 0.0f;
            rd_s[tid] = tid < rows ? rd[row] : 0.0f;
        }
        const int64_t lo = window > 0 ? max(int64_t(0), qa - window + 1) : 0, hi = qa + rows;
        for (int64_t ka = lo; ka < hi; ka += kTileK) {
            const int cols = int(min(int64_t(kTileK), hi - ka));
            __syncthreads(); // the previous key tile and dS are consumed; the query tile is in place
            for (int i = tid; i < kTileK * hd; i += kThreads) {
                const int c = i / hd, d = i % hd;
                const int64_t src = ((t0 + ka + c) * nkv + j) * hd + d;
                ks[c * kstride + d] = c < cols ? k[src] : 0.0f;
                vs[c * kstride + d] = c < cols ? v[src] : 0.0f;
            }
            __syncthreads();
            for (int i = tid; i < kTileQ * kTileK; i += kThreads) {
                const int r = i / kTileK, c = i % kTileK;
                float ds = 0.0f;
                if (r < rows && c < cols && attn::visible(qa + r, ka + c, window)) {
                    float s = 0.0f, dp = 0.0f;
                    for (int d = 0; d < hd; ++d) {
                        s += qs[r * hd + d] * ks[c * kstride + d];
                        dp += dos[r * hd + d] * vs[c * kstride + d];
                    }
                    const float p = expf(s * scale - lse_s[r]);
                    ds = p * (dp - rd_s[r]) * scale;
                }
                dss[i] = ds;
            }
            __syncthreads();
            for (int i = tid; i < kTileQ * hd; i += kThreads) {
                const int r = i / hd, d = i % hd;
                float acc = dqs[i];
                for (int c = 0; c < cols; ++c) acc += dss[r * kTileK + c] * ks[c * kstride + d];
                dqs[i] = acc;
            }
        }
        __syncthreads();
        for (int i = tid; i < rows * hd; i += kThreads) {
            const int r = i / hd, d = i % hd;
            dq[((t0 + qa + r) * nq + h) * hd + d] = dqs[i];
        }
        __syncthreads(); // the next tile overwrites the shared arrays
    }
}

size_t dkdv_shared_floats(int hd) {
    return size_t(kTileK) * (hd + 1) * 2 + size_t(kTileK) * hd * 2 + size_t(kTileQ) * hd * 2 + 2 * kTileQ * kTileK +
           2 * kTileQ;
}

// dv = Σ_q P·dO and dk = scale·Σ_q P(dP − D)·q over every query head of the group and every query that sees the
// key, one block per (key tile, kv head, sequence).
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(float *dk, float *dv, const float *dout, const float *lse, const float *rd,
                          const float *q, const float *k, const float *v, const int64_t *seq_start, int nq, int nkv,
                          int hd, float scale, int64_t window) {
    extern __shared__ float smem[];
    const int kstride = hd + 1;
    float *ks = smem;                       // [kTileK][hd+1]   keys
    float *vs = ks + kTileK * kstride;      // [kTileK][hd+1]   values
    float *dks = vs + kTileK * kstride;     // [kTileK][hd]     dk accumulator
    float *dvs = dks + kTileK * hd;         // [kTileK][hd]     dv accumulator
    float *qs = dvs + kTileK * hd;          // [kTileQ][hd]     queries
    float *dos = qs + kTileQ * hd;          // [kTileQ][hd]     dout rows
    float *ps = dos + kTileQ * hd;          // [kTileQ][kTileK] P
    float *dss = ps + kTileQ * kTileK;      // [kTileQ][kTileK] dS = P(dP − D)·scale
    float *lse_s = dss + kTileQ * kTileK;   // [kTileQ]
    float *rd_s = lse_s + kTileQ;           // [kTileQ]

    const int tid = int(threadIdx.x), j = int(blockIdx.y), group = nq / nkv;
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    for (int64_t ka = int64_t(blockIdx.x) * kTileK; ka < T; ka += int64_t(gridDim.x) * kTileK) {
        const int cols = int(min(int64_t(kTileK), T - ka)); // keys ka … ka+cols−1
        for (int i = tid; i < kTileK * hd; i += kThreads) {
            const int c = i / hd, d = i % hd;
            const int64_t src = ((t0 + ka + c) * nkv + j) * hd + d;
            ks[c * kstride + d] = c < cols ? k[src] : 0.0f;
            vs[c * kstride + d] = c < cols ? v[src] : 0.0f;
            dks[i] = 0.0f;
            dvs[i] = 0.0f;
        }
        // Queries that see any key of the tile: [ka, last) — causal from the first key, window from the last.
        const int64_t last = window > 0 ? min(T, ka + cols - 1 + window) : T;
        for (int h = j * group; h < (j + 1) * group; ++h) {
            for (int64_t qa = ka; qa < last; qa += kTileQ) {
                const int rows = int(min(int64_t(kTileQ), last - qa)); // queries qa … qa+rows−1
                __syncthreads(); // the previous query tile, P and dS are consumed; the key tile is in place
                for (int i = tid; i < kTileQ * hd; i += kThreads) {
                    const int r = i / hd, d = i % hd;
                    const int64_t src = ((t0 + qa + r) * nq + h) * hd + d;
                    qs[i] = r < rows ? q[src] : 0.0f;
                    dos[i] = r < rows ? dout[src] : 0.0f;
                }
                if (tid < kTileQ) {
                    const int64_t row = (t0 + qa + tid) * nq + h;
                    lse_s[tid] = tid < rows ? lse[row] : 0.0f;
                    rd_s[tid] = tid < rows ? rd[row] : 0.0f;
                }
                __syncthreads();
                for (int i = tid; i < kTileQ * kTileK; i += kThreads) {
                    const int r = i / kTileK, c = i % kTileK;
                    float p = 0.0f, ds = 0.0f;
                    if (r < rows && c < cols && attn::visible(qa + r, ka + c, window)) {
                        float s = 0.0f, dp = 0.0f;
                        for (int d = 0; d < hd; ++d) {
                            s += qs[r * hd + d] * ks[c * kstride + d];
                            dp += dos[r * hd + d] * vs[c * kstride + d];
                        }
                        p = expf(s * scale - lse_s[r]);
                        ds = p * (dp - rd_s[r]) * scale;
                    }
                    ps[i] = p;
                    dss[i] = ds;
                }
                __syncthreads();
                for (int i = tid; i < kTileK * hd; i += kThreads) {
                    const int c = i / hd, d = i % hd;
                    float acc_v = dvs[i], acc_k = dks[i];
                    for (int r = 0; r < rows; ++r) {
                        acc_v += ps[r * kTileK + c] * dos[r * hd + d];
                        acc_k += dss[r * kTileK + c] * qs[r * hd + d];
                    }
                    dvs[i] = acc_v;
                    dks[i] = acc_k;
                }
            }
        }
        __syncthreads();
        for (int i = tid; i < cols * hd; i += kThreads) {
            const int c = i / hd, d = i % hd;
            const int64_t dst = ((t0 + ka + c) * nkv + j) * hd + d;
            dk[dst] = dks[i];
            dv[dst] = dvs[i];
        }
        __syncthreads(); // the next key tile overwrites the shared arrays
    }
}

} // namespace

float *attn::softmax_row_dots(const float *dout, const float *out, int64_t rows, int hd) {
    auto *rd = static_cast<float *>(device_scratch(Scratch::AttentionRowDots, size_t(rows) * sizeof(float)));
    row_dots_kernel<<<blocks_for(rows, 256), 256>>>(rd, dout, out, rows, hd);
    ZAYA_CUDA_LAUNCHED();
    return rd;
}

void attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                        const float *q, const float *k, const float *v, const VarlenBatch &batch,
                        const AttnShape &s) {
    attn::check_shape(s);
    if (batch.N == 0 || batch.B == 0) return;
    const int nq = int(s.nq), nkv = int(s.nkv), hd = int(s.hd);
    const float *rd = attn::softmax_row_dots(dout, out, batch.N * nq, hd);

    const size_t dq_bytes = dq_shared_floats(hd) * sizeof(float);
    allow_shared_bytes(attention_dq_kernel, dq_bytes);
    attention_dq_kernel<<<attn::tile_grid(batch, nq, kTileQ), kThreads, dq_bytes>>>(
        dq, dout, lse, rd, q, k, v, batch.seq_start, nq, nkv, hd, float(s.scale), s.window);
    ZAYA_CUDA_LAUNCHED();

    const size_t dkdv_bytes = dkdv_shared_floats(hd) * sizeof(float);
    allow_shared_bytes(attention_dkdv_kernel, dkdv_bytes);
    attention_dkdv_kernel<<<attn::tile_grid(batch, nkv, kTileK), kThreads, dkdv_bytes>>>(
        dk, dv, dout, lse, rd, q, k, v, batch.seq_start, nq, nkv, hd, float(s.scale), s.window);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
