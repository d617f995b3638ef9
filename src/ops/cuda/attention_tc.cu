// Attention forward on bf16 tensor cores (WMMA): attention_forward's semantics and grid, with 64-query × 64-key
// tiles. Q, K, V are rounded to bf16 as they are staged, S = Q·Kᵀ and O += P·V run on tensor cores with fp32
// accumulation, the online softmax stays fp32 (P is rounded to bf16 for the product, the row sums use fp32 P) — what
// flash attention does under autocast.
#include "ops/cuda/attention_tc.cuh"

namespace zaya::cuda {

namespace {

using namespace attn_tc;

__device__ inline float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ inline float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Rows are (position, head) pairs as in attention_forward_kernel; hd a multiple of 16.
__global__ void __launch_bounds__(kTcThreads)
    attention_forward_tc_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int64_t *seq_start, int nq, int nkv, int hd, float scale, int64_t window) {
    extern __shared__ float smem[];
    unsigned char *at = aligned_shared(smem);
    const int ldq = ld_rows(hd), ldo = ld_acc(hd);
    auto *qs = reinterpret_cast<__nv_bfloat16 *>(at);                          // [kTq][ldq]
    auto *ks = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd));   // [kTk][ldq]
    auto *vs = reinterpret_cast<__nv_bfloat16 *>(at += rows_bf16_bytes(hd));   // [kTk][ldq]
    auto *ss = reinterpret_cast<float *>(at += rows_bf16_bytes(hd));           // [kTq][kLdS] scores
    auto *ps = reinterpret_cast<__nv_bfloat16 *>(at += kScoreBytes);           // [kTq][kLdP] probabilities
    auto *os = reinterpret_cast<float *>(at += kProbBytes);                    // [kTq][ldo] unnormalised output
    auto *row_max = reinterpret_cast<float *>(at += acc_bytes(hd)), *row_sum = row_max + kTq;
    float *row_corr = row_sum + kTq;

    const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32, h = int(blockIdx.y), j = h / (nq / nkv);
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    for (int64_t qa = int64_t(blockIdx.x) * kTq; qa < T; qa += int64_t(gridDim.x) * kTq) {
        const int rows = int(min(int64_t(kTq), T - qa)); // queries qa … qa+rows−1
        stage_rows(qs, q, t0 + qa, rows, nq, h, hd);
        for (int i = tid; i < kTq * hd; i += kTcThreads) os[i / hd * ldo + i % hd] = 0.0f;
        if (tid < kTq) row_max[tid] = -INFINITY, row_sum[tid] = 0.0f;
        const int64_t lo = window > 0 ? max(int64_t(0), qa - window + 1) : 0, hi = qa + rows;
        for (int64_t ka = lo; ka < hi; ka += kTk) {
            const int cols = int(min(int64_t(kTk), hi - ka));
            __syncthreads(); // the previous tiles are consumed
            stage_rows(ks, k, t0 + ka, cols, nkv, j, hd);
            stage_rows(vs, v, t0 + ka, cols, nkv, j, hd);
            __syncthreads();
            block_mma<false, true>(ss, kLdS, qs, ldq, ks, ldq, kTq, kTk, hd, false); // S = Q·Kᵀ
            __syncthreads();
            // Online softmax, invisible pairs masked here: warp w takes rows w, w + 4, …, its lanes columns lane and
            // lane + 32 (reads of consecutive words: no bank conflicts); the row's max and sum are shuffle trees.
            static_assert(kTk == 64 && kTq % kWarps == 0, "two columns per lane");
            for (int r = warp; r < kTq; r += kWarps) {
                const float *sr = ss + r * kLdS;
                const int c0 = lane, c1 = lane + 32;
                const bool v0 = r < rows && c0 < cols && attn::visible(qa + r, ka + c0, window);
                const bool v1 = r < rows && c1 < cols && attn::visible(qa + r, ka + c1, window);
                const float s0 = v0 ? sr[c0] * scale : -INFINITY, s1 = v1 ? sr[c1] * scale : -INFINITY;
                const float old_max = row_max[r], m = fmaxf(old_max, warp_max(fmaxf(s0, s1)));
                const float corr = m == -INFINITY ? 1.0f : expf(old_max - m);
                const float p0 = v0 ? expf(s0 - m) : 0.0f, p1 = v1 ? expf(s1 - m) : 0.0f;
                ps[r * kLdP + c0] = __float2bfloat16_rn(p0);
                ps[r * kLdP + c1] = __float2bfloat16_rn(p1);
                const float sum = warp_sum(p0 + p1);
                __syncwarp();
                if (lane == 0) row_max[r] = m, row_sum[r] = row_sum[r] * corr + sum, row_corr[r] = corr;
            }
            __syncthreads();
            for (int i = tid; i < kTq * hd; i += kTcThreads) os[i / hd * ldo + i % hd] *= row_corr[i / hd];
            __syncthreads();
            block_mma<false, false>(os, ldo, ps, kLdP, vs, ldq, kTq, hd, kTk, true); // O += P·V
        }
        __syncthreads();
        for (int i = tid; i < rows * hd; i += kTcThreads) {
            const int r = i / hd, d = i % hd;
            out[((t0 + qa + r) * nq + h) * hd + d] = os[r * ldo + d] / row_sum[r];
        }
        if (lse && tid < rows) lse[(t0 + qa + tid) * nq + h] = row_max[tid] + logf(row_sum[tid]);
        __syncthreads(); // the row state is read before the next query tile resets it
    }
}

} // namespace

void attention_forward_bf16(float *out, float *lse, const float *q, const float *k, const float *v,
                            const VarlenBatch &batch, const AttnShape &s) {
    attn::check_shape(s);
    if (s.hd % 16 != 0) fail("attention on tensor cores: head size {} is not a multiple of 16", s.hd);
    if (batch.N == 0 || batch.B == 0) return;
    const int hd = int(s.hd);
    const size_t bytes = 128 + 3 * rows_bf16_bytes(hd) + kScoreBytes + kProbBytes + acc_bytes(hd) + kRowStateBytes;
    attn::allow_shared_bytes(attention_forward_tc_kernel, bytes);
    attention_forward_tc_kernel<<<attn::tile_grid(batch, s.nq, kTq), kTcThreads, bytes>>>(
        out, lse, q, k, v, batch.seq_start, int(s.nq), int(s.nkv), hd, float(s.scale), s.window);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
