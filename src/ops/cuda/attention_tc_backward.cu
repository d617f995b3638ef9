// Attention backward on bf16 tensor cores (WMMA): attention_backward's split — dq by (query tile, head), dk/dv by
// (key tile, kv head) over the group's query heads, so every gradient element has one writer (deterministic) — with
// 64×64 tiles. P is recomputed from bf16 q, k and the saved lse (as attention_forward_bf16 made it); the products
// S = Q·Kᵀ, dP = dO·Vᵀ, dQ += dS·K, dV += Pᵀ·dO, dK += dSᵀ·Q run on tensor cores with bf16 operands and fp32
// accumulation; the softmax backward dS = P(dP − D)·scale is fp32 (D = rowsum(dO ⊙ O) from the fp32 out).
#include "ops/cuda/attention_tc.cuh"
#include "ops/cuda/runtime.h"

namespace zaya::cuda {

namespace {

using namespace attn_tc;

// From the scores S = Q·Kᵀ and dP = dO·Vᵀ of a (query tile, key tile) pair: P (if wanted) and dS·scale as bf16,
// zero where a pair is invisible or padding. Rows are queries qa + r (r < rows), columns keys ka + c (c < cols).
__device__ void softmax_backward_tile(__nv_bfloat16 *ps, __nv_bfloat16 *dss, const float *ss, const float *dps,
                                      const float *lse_s, const float *rd_s, int64_t qa, int rows, int64_t ka,
                                      int cols, float scale, int64_t window) {
    for (int i = int(threadIdx.x); i < kTq * kTk; i += kTcThreads) {
        const int r = i / kTk, c = i % kTk;
        float p = 0.0f, ds = 0.0f;
        if (r < rows && c < cols && attn::visible(qa + r, ka + c, window)) {
            p = expf(ss[r * kLdS + c] * scale - lse_s[r]);
            ds = p * (dps[r * kLdS + c] - rd_s[r]) * scale;
        }
        if (ps) ps[r * kLdP + c] = __float2bfloat16_rn(p);
        dss[r * kLdP + c] = __float2bfloat16_rn(ds);
    }
}

// lse and D of the query rows qa … qa+rows−1 of head h into shared memory (zeros for padding rows).
__device__ void stage_row_state(float *lse_s, float *rd_s, const float *lse, const float *rd, int64_t pos0, int rows,
                                int nq, int h) {
    const int t = int(threadIdx.x);
    if (t < kTq) {
        const int64_t row = (pos0 + t) * nq + h;
        lse_s[t] = t < rows ? lse[row] : 0.0f;
        rd_s[t] = t < rows ? rd[row] : 0.0f;
    }
}

size_t dq_bytes(int hd) {
    return 128 + 4 * rows_bf16_bytes(hd) + 2 * kScoreBytes + kProbBytes + acc_bytes(hd) + kRowStateBytes;
}

__global__ void __launch_bounds__(kTcThreads)
    attention_dq_tc_kernel(float *dq, const float *dout, const float *lse, const float *rd, const float *q,
                           const float *k, const float *v, const int64_t *seq_start, int nq, int nkv, int hd,
                           float scale, int64_t window) {
    extern __shared__ float smem[];
    unsigned char *at = aligned_shared(smem);
    const int ldr = ld_rows(hd), lda = ld_acc(hd);
    auto *qs = reinterpret_cast<__nv_bfloat16 *>(at);                        // [kTq][ldr] queries
    auto *dos = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd)); // [kTq][ldr] dout rows
    auto *ks = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd));  // [kTk][ldr] keys
    auto *vs = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd));  // [kTk][ldr] values
    auto *ss = reinterpret_cast<float *>(at += rows_bf16_bytes(hd));          // [kTq][kLdS] S
    auto *dps = reinterpret_cast<float *>(at += kScoreBytes);                 // [kTq][kLdS] dP
    auto *dss = reinterpret_cast<__nv_bfloat16 *>(at += kScoreBytes);         // [kTq][kLdP] dS·scale
    auto *dqs = reinterpret_cast<float *>(at += kProbBytes);                  // [kTq][lda] dq accumulator
    auto *lse_s = reinterpret_cast<float *>(at += acc_bytes(hd)), *rd_s = lse_s + kTq;

    const int tid = int(threadIdx.x), h = int(blockIdx.y), j = h / (nq / nkv);
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    for (int64_t qa = int64_t(blockIdx.x) * kTq; qa < T; qa += int64_t(gridDim.x) * kTq) {
        const int rows = int(min(int64_t(kTq), T - qa));
        stage_rows(qs, q, t0 + qa, rows, nq, h, hd);
        stage_rows(dos, dout, t0 + qa, rows, nq, h, hd);
        for (int i = tid; i < kTq * hd; i += kTcThreads) dqs[i / hd * lda + i % hd] = 0.0f;
        stage_row_state(lse_s, rd_s, lse, rd, t0 + qa, rows, nq, h);
        const int64_t lo = window > 0 ? max(int64_t(0), qa - window + 1) : 0, hi = qa + rows;
        for (int64_t ka = lo; ka < hi; ka += kTk) {
            const int cols = int(min(int64_t(kTk), hi - ka));
            __syncthreads(); // the previous key tile and dS are consumed; the query tile is in place
            stage_rows(ks, k, t0 + ka, cols, nkv, j, hd);
            stage_rows(vs, v, t0 + ka, cols, nkv, j, hd);
            __syncthreads();
            block_mma<false, true>(ss, kLdS, qs, ldr, ks, ldr, kTq, kTk, hd, false);   // S = Q·Kᵀ
            block_mma<false, true>(dps, kLdS, dos, ldr, vs, ldr, kTq, kTk, hd, false); // dP = dO·Vᵀ
            __syncthreads();
            softmax_backward_tile(nullptr, dss, ss, dps, lse_s, rd_s, qa, rows, ka, cols, scale, window);
            __syncthreads();
            block_mma<false, false>(dqs, lda, dss, kLdP, ks, ldr, kTq, hd, kTk, true); // dQ += dS·K
        }
        __syncthreads();
        for (int i = tid; i < rows * hd; i += kTcThreads) {
            const int r = i / hd, d = i % hd;
            dq[((t0 + qa + r) * nq + h) * hd + d] = dqs[r * lda + d];
        }
        __syncthreads(); // the next tile overwrites the shared arrays
    }
}

size_t dkdv_bytes(int hd) {
    return 128 + 4 * rows_bf16_bytes(hd) + 2 * kScoreBytes + 2 * kProbBytes + 2 * acc_bytes(hd) + kRowStateBytes;
}

__global__ void __launch_bounds__(kTcThreads)
    attention_dkdv_tc_kernel(float *dk, float *dv, const float *dout, const float *lse, const float *rd,
                             const float *q, const float *k, const float *v, const int64_t *seq_start, int nq,
                             int nkv, int hd, float scale, int64_t window) {
    extern __shared__ float smem[];
    unsigned char *at = aligned_shared(smem);
    const int ldr = ld_rows(hd), lda = ld_acc(hd);
    auto *ks = reinterpret_cast<__nv_bfloat16 *>(at);                        // [kTk][ldr] keys
    auto *vs = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd)); // [kTk][ldr] values
    auto *qs = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd)); // [kTq][ldr] queries
    auto *dos = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd)); // [kTq][ldr] dout rows
    auto *ss = reinterpret_cast<float *>(at += rows_bf16_bytes(hd));         // [kTq][kLdS] S
    auto *dps = reinterpret_cast<float *>(at += kScoreBytes);                // [kTq][kLdS] dP
    auto *ps = reinterpret_cast<__nv_bfloat16 *>(at += kScoreBytes);         // [kTq][kLdP] P
    auto *dss = reinterpret_cast<__nv_bfloat16 *>(at += kProbBytes);         // [kTq][kLdP] dS·scale
    auto *dks = reinterpret_cast<float *>(at += kProbBytes);                 // [kTk][lda] dk accumulator
    auto *dvs = reinterpret_cast<float *>(at += acc_bytes(hd));              // [kTk][lda] dv accumulator
    auto *lse_s = reinterpret_cast<float *>(at += acc_bytes(hd)), *rd_s = lse_s + kTq;

    const int tid = int(threadIdx.x), j = int(blockIdx.y), group = nq / nkv;
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    for (int64_t ka = int64_t(blockIdx.x) * kTk; ka < T; ka += int64_t(gridDim.x) * kTk) {
        const int cols = int(min(int64_t(kTk), T - ka)); // keys ka … ka+cols−1
        stage_rows(ks, k, t0 + ka, cols, nkv, j, hd);
        stage_rows(vs, v, t0 + ka, cols, nkv, j, hd);
        for (int i = tid; i < kTk * hd; i += kTcThreads) dks[i / hd * lda + i % hd] = dvs[i / hd * lda + i % hd] = 0.0f;
        // Queries that see any key of the tile: [ka, last) — causal from the first key, window from the last.
        const int64_t last = window > 0 ? min(T, ka + cols - 1 + window) : T;
        for (int h = j * group; h < (j + 1) * group; ++h) {
            for (int64_t qa = ka; qa < last; qa += kTq) {
                const int rows = int(min(int64_t(kTq), last - qa));
                __syncthreads(); // the previous query tile, P and dS are consumed; the key tile is in place
                stage_rows(qs, q, t0 + qa, rows, nq, h, hd);
                stage_rows(dos, dout, t0 + qa, rows, nq, h, hd);
                stage_row_state(lse_s, rd_s, lse, rd, t0 + qa, rows, nq, h);
                __syncthreads();
                block_mma<false, true>(ss, kLdS, qs, ldr, ks, ldr, kTq, kTk, hd, false);   // S = Q·Kᵀ
                block_mma<false, true>(dps, kLdS, dos, ldr, vs, ldr, kTq, kTk, hd, false); // dP = dO·Vᵀ
                __syncthreads();
                softmax_backward_tile(ps, dss, ss, dps, lse_s, rd_s, qa, rows, ka, cols, scale, window);
                __syncthreads();
                block_mma<true, false>(dvs, lda, ps, kLdP, dos, ldr, kTk, hd, kTq, true); // dV += Pᵀ·dO
                block_mma<true, false>(dks, lda, dss, kLdP, qs, ldr, kTk, hd, kTq, true); // dK += dSᵀ·Q
            }
        }
        __syncthreads();
        for (int i = tid; i < cols * hd; i += kTcThreads) {
            const int c = i / hd, d = i % hd;
            const int64_t dst = ((t0 + ka + c) * nkv + j) * hd + d;
            dk[dst] = dks[c * lda + d];
            dv[dst] = dvs[c * lda + d];
        }
        __syncthreads(); // the next key tile overwrites the shared arrays
    }
}

} // namespace

void attention_backward_bf16(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
                             const float *q, const float *k, const float *v, const VarlenBatch &batch,
                             const AttnShape &s) {
    attn::check_shape(s);
    if (s.hd % 16 != 0) fail("attention on tensor cores: head size {} is not a multiple of 16", s.hd);
    if (batch.N == 0 || batch.B == 0) return;
    const int nq = int(s.nq), nkv = int(s.nkv), hd = int(s.hd);
    const float *rd = attn::softmax_row_dots(dout, out, batch.N * nq, hd);

    attn::allow_shared_bytes(attention_dq_tc_kernel, dq_bytes(hd));
    attention_dq_tc_kernel<<<attn::tile_grid(batch, nq, kTq), kTcThreads, dq_bytes(hd)>>>(
        dq, dout, lse, rd, q, k, v, batch.seq_start, nq, nkv, hd, float(s.scale), s.window);
    ZAYA_CUDA_LAUNCHED();

    attn::allow_shared_bytes(attention_dkdv_tc_kernel, dkdv_bytes(hd));
    attention_dkdv_tc_kernel<<<attn::tile_grid(batch, nkv, kTk), kTcThreads, dkdv_bytes(hd)>>>(
        dk, dv, dout, lse, rd, q, k, v, batch.seq_start, nq, nkv, hd, float(s.scale), s.window);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
