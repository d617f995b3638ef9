// Attention forward on bf16 tensor cores (WMMA): attention_forward's semantics and grid, with 64-query × 64-key
// tiles. Q, K, V are rounded to bf16 as they are staged, S = Q·Kᵀ and O += P·V run on tensor cores with fp32
// accumulation, the online softmax stays fp32 (P is rounded to bf16 for the product, the row sums use fp32 P) — what
// flash attention does under autocast.
#include "ops/cuda/attention_tiles.cuh"

#include <cstdint>
#include <cuda_bf16.h>
#include <mma.h>

namespace zaya::cuda {

namespace {

namespace wmma = nvcuda::wmma;
constexpr int kTq = 64, kTk = 64, kWarps = 4, kTcThreads = 32 * kWarps, kPad = 8;

// The shared-memory carve-up (byte offsets, each region 128-byte aligned) for head size hd.
struct Layout {
    int ldq, lds, ldp, ldo; // row strides: bf16 q/k/v tiles, fp32 scores, bf16 probabilities, fp32 output
    size_t q, k, v, s, p, o, rows, bytes;
    __host__ __device__ static size_t up(size_t b) { return (b + 127) / 128 * 128; }
    __host__ __device__ explicit Layout(int hd) : ldq(hd + kPad), lds(kTk + 4), ldp(kTk + kPad), ldo(hd + 4) {
        q = 0;
        k = q + up(size_t(kTq) * ldq * 2);
        v = k + up(size_t(kTk) * ldq * 2);
        s = v + up(size_t(kTk) * ldq * 2);
        p = s + up(size_t(kTq) * lds * 4);
        o = p + up(size_t(kTq) * ldp * 2);
        rows = o + up(size_t(kTq) * ldo * 4);
        bytes = rows + up(3 * kTq * 4);
    }
};

// C[M,N] (fp32, ldc) = A[M,K]·B[K,N] + (accumulate ? C : 0): the block's warps take the 16×16 output fragments in
// turn. A row-major bf16 (lda); B bf16, row-major [K][N] or, when kBT, given as rows of Bᵀ ([N][K], ldb).
template <bool kBT>
__device__ void block_mma(float *C, int ldc, const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B, int ldb, int M,
                          int N, int K, bool accumulate) {
    using LayoutB = std::conditional_t<kBT, wmma::col_major, wmma::row_major>;
    const int warp = int(threadIdx.x) / 32, tiles_n = N / 16;
    for (int f = warp; f < (M / 16) * tiles_n; f += kWarps) {
        const int m0 = f / tiles_n * 16, n0 = f % tiles_n * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        if (accumulate) wmma::load_matrix_sync(acc, C + m0 * ldc + n0, unsigned(ldc), wmma::mem_row_major);
        else wmma::fill_fragment(acc, 0.0f);
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> b;
            wmma::load_matrix_sync(a, A + m0 * lda + k0, unsigned(lda));
            wmma::load_matrix_sync(b, kBT ? B + n0 * ldb + k0 : B + k0 * ldb + n0, unsigned(ldb));
            wmma::mma_sync(acc, a, b, acc);
        }
        wmma::store_matrix_sync(C + m0 * ldc + n0, acc, unsigned(ldc), wmma::mem_row_major);
    }
}

// Rows are (position, head) pairs as in attention_forward_kernel; hd a multiple of 16.
__global__ void __launch_bounds__(kTcThreads)
    attention_forward_tc_kernel(float *out, float *lse, const float *q, const float *k, const float *v,
                                const int64_t *seq_start, int nq, int nkv, int hd, float scale, int64_t window) {
    extern __shared__ float smem[];
    // Dynamic shared memory is only promised 16-byte alignment; WMMA wants 32: start at the next 128 (the launch
    // adds 128 bytes for this).
    auto *smem_bytes = reinterpret_cast<unsigned char *>((reinterpret_cast<uintptr_t>(smem) + 127) & ~uintptr_t(127));
    const Layout L(hd);
    auto *qs = reinterpret_cast<__nv_bfloat16 *>(smem_bytes + L.q); // [kTq][ldq]
    auto *ks = reinterpret_cast<__nv_bfloat16 *>(smem_bytes + L.k); // [kTk][ldq]
    auto *vs = reinterpret_cast<__nv_bfloat16 *>(smem_bytes + L.v); // [kTk][ldq]
    auto *ss = reinterpret_cast<float *>(smem_bytes + L.s);         // [kTq][lds] scores
    auto *ps = reinterpret_cast<__nv_bfloat16 *>(smem_bytes + L.p); // [kTq][ldp] probabilities
    auto *os = reinterpret_cast<float *>(smem_bytes + L.o);         // [kTq][ldo] unnormalised output
    auto *row_max = reinterpret_cast<float *>(smem_bytes + L.rows), *row_sum = row_max + kTq;
    float *row_corr = row_sum + kTq;

    const int tid = int(threadIdx.x), h = int(blockIdx.y), j = h / (nq / nkv);
    const int64_t t0 = seq_start[blockIdx.z], T = seq_start[blockIdx.z + 1] - t0;
    for (int64_t qa = int64_t(blockIdx.x) * kTq; qa < T; qa += int64_t(gridDim.x) * kTq) {
        const int rows = int(min(int64_t(kTq), T - qa)); // queries qa … qa+rows−1
        for (int i = tid; i < kTq * hd; i += kTcThreads) {
            const int r = i / hd, d = i % hd;
            qs[r * L.ldq + d] = __float2bfloat16_rn(r < rows ? q[((t0 + qa + r) * nq + h) * hd + d] : 0.0f);
            os[r * L.ldo + d] = 0.0f;
        }
        if (tid < kTq) row_max[tid] = -INFINITY, row_sum[tid] = 0.0f;
        const int64_t lo = window > 0 ? max(int64_t(0), qa - window + 1) : 0, hi = qa + rows;
        for (int64_t ka = lo; ka < hi; ka += kTk) {
            const int cols = int(min(int64_t(kTk), hi - ka));
            __syncthreads(); // the previous tiles are consumed
            for (int i = tid; i < kTk * hd; i += kTcThreads) {
                const int c = i / hd, d = i % hd;
                const int64_t src = ((t0 + ka + c) * nkv + j) * hd + d;
                ks[c * L.ldq + d] = __float2bfloat16_rn(c < cols ? k[src] : 0.0f);
                vs[c * L.ldq + d] = __float2bfloat16_rn(c < cols ? v[src] : 0.0f);
            }
            __syncthreads();
            block_mma<true>(ss, L.lds, qs, L.ldq, ks, L.ldq, kTq, kTk, hd, false); // S = Q·Kᵀ
            __syncthreads();
            // Online softmax, one thread per row (as attention_forward_kernel), invisible pairs masked here.
            if (tid < kTq) {
                const float *sr = ss + tid * L.lds;
                __nv_bfloat16 *pr = ps + tid * L.ldp;
                const float old_max = row_max[tid];
                float m = old_max;
                for (int c = 0; c < kTk; ++c)
                    if (tid < rows && c < cols && attn::visible(qa + tid, ka + c, window)) m = fmaxf(m, sr[c] * scale);
                const float corr = m == -INFINITY ? 1.0f : expf(old_max - m);
                float sum = row_sum[tid] * corr;
                for (int c = 0; c < kTk; ++c) {
                    const bool vis = tid < rows && c < cols && attn::visible(qa + tid, ka + c, window);
                    const float p = vis ? expf(sr[c] * scale - m) : 0.0f;
                    pr[c] = __float2bfloat16_rn(p);
                    sum += p;
                }
                row_max[tid] = m, row_sum[tid] = sum, row_corr[tid] = corr;
            }
            __syncthreads();
            for (int i = tid; i < kTq * hd; i += kTcThreads) os[i / hd * L.ldo + i % hd] *= row_corr[i / hd];
            __syncthreads();
            block_mma<false>(os, L.ldo, ps, L.ldp, vs, L.ldq, kTq, hd, kTk, true); // O += P·V
        }
        __syncthreads();
        for (int i = tid; i < rows * hd; i += kTcThreads) {
            const int r = i / hd, d = i % hd;
            out[((t0 + qa + r) * nq + h) * hd + d] = os[r * L.ldo + d] / row_sum[r];
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
    const size_t bytes = Layout(int(s.hd)).bytes + 128;
    attn::allow_shared_bytes(attention_forward_tc_kernel, bytes);
    attention_forward_tc_kernel<<<attn::tile_grid(batch, s.nq, kTq), kTcThreads, bytes>>>(
        out, lse, q, k, v, batch.seq_start, int(s.nq), int(s.nkv), int(s.hd), float(s.scale), s.window);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
