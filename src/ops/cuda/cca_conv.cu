// The CCA convolution (ops/cpu/cca.h, spec A.3) on the GPU, fp32: direct kernels (one thread per output element)
// for the forward and the depthwise backward, tiled GEMM-like kernels for the grouped conv's dp and weight gradient,
// column_sum.cuh's reduction for the biases and depthwise weights. No atomics: every element (forward outputs, dp,
// dz, each parameter gradient) is summed by one thread, or in fixed chunks added in a fixed order, so the backward is
// deterministic run to run.
//
// Under bf16 matmuls the grouped conv runs as the CPU runs it, as GEMMs per head group on an im2col matrix
// (cols[γ][n][τ·hd + i] = p[n's p row + τ][γ·hd + i]) and the weight packed as [hd, k1·hd] per group — here bf16
// operands on cuBLASLt's tensor cores with fp32 accumulation (the CUDA-core fp32 kernels above spend milliseconds
// per layer at 16k tokens on FLOPs the tensor cores run in tens of microseconds).
//
// Row bookkeeping (as the CPU op): sequence b owns z/o rows [ss[b], ss[b+1]) (T = ss[b+1] − ss[b] tokens) and p rows
// [ss[b] + b·(k1−1), ss[b+1] + (b+1)·(k1−1)): T + k1 − 1 rows, local p row r ∈ [0, T+k1−1) holding depthwise
// position j = r − (k1−1) ∈ [−(k1−1), T). Output position t reads p local rows t … t+k1−1 (taps τ = 0 … k1−1), and
// p position j reads z positions j−(k0−1) … j (taps i = 0 … k0−1; t < 0 is the zero padding).
#include "core/error.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/block.h"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/ops.h"
#include "ops/cuda/varlen.cuh"

#include <algorithm>
#include <cuda_bf16.h>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

// Per-sequence grids: blockIdx.y = sequence b, x covers (rows of b) × C elements, grid-stride so a sequence longer
// than the host's max_len would still be covered whole.
dim3 seq_grid(const VarlenBatch &batch, int64_t rows_per_seq, int64_t C) {
    if (batch.B > 65535) fail("cca_conv: {} sequences exceed the CUDA grid (65535)", batch.B);
    const int64_t n = std::max<int64_t>(1, rows_per_seq * C);
    return dim3(std::min<unsigned>(blocks_for(n, kThreads), 1u << 30), unsigned(batch.B));
}

void check_shape(const ConvShape &s) {
    if (s.C <= 0 || s.groups <= 0 || s.C % s.groups != 0 || s.k0 < 1 || s.k1 < 1)
        fail("cca_conv: bad shape C={} groups={} k0={} k1={}", s.C, s.groups, s.k0, s.k1);
}

// p[row of (b, r)][c] = bd[c] + Σ_{i<k0} wd[c·k0+i]·z[t = j−(k0−1)+i][c] over t ≥ 0 (zero padding before),
// j = r − (k1−1).
__global__ void depthwise_forward_kernel(float *p, const float *z, const int64_t *ss, int64_t C, int64_t k0,
                                         int64_t k1, const float *wd, const float *bd) {
    const int64_t b = blockIdx.y, t0 = ss[b], T = ss[b + 1] - t0;
    const int64_t p0 = t0 + b * (k1 - 1); // first p row of sequence b
    const int64_t total = (T + k1 - 1) * C;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = e / C, c = e % C, j = r - (k1 - 1);
        float acc = bd[c];
        for (int64_t i = 0; i < k0; ++i) {
            const int64_t t = j - (k0 - 1) + i; // t ≤ j < T always; t < 0 is padding
            if (t < 0) continue;
            acc += wd[c * k0 + i] * z[(t0 + t) * C + c];
        }
        p[(p0 + r) * C + c] = acc;
    }
}

// o[t][c] = bg[c] + Σ_{τ<k1} Σ_{i<hd} wg[(c·hd + i)·k1 + τ] · p[local row t+τ][γ·hd + i], γ = c / hd.
__global__ void grouped_forward_kernel(float *o, const float *p, const int64_t *ss, int64_t C, int64_t hd,
                                       int64_t k1, const float *wg, const float *bg) {
    const int64_t b = blockIdx.y, t0 = ss[b], T = ss[b + 1] - t0;
    const int64_t p0 = t0 + b * (k1 - 1);
    const int64_t total = T * C;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = e / C, c = e % C, g0 = c / hd * hd; // g0: first channel of c's group
        const float *w = wg + c * hd * k1;
        float acc = bg[c];
        for (int64_t tau = 0; tau < k1; ++tau) {
            const float *pr = p + (p0 + t + tau) * C + g0; // local p row t+τ < T+k1−1
            for (int64_t i = 0; i < hd; ++i) acc += w[i * k1 + tau] * pr[i];
        }
        o[(t0 + t) * C + c] = acc;
    }
}

// The grouped conv's two backward products, per group γ (channels γ·hd … γ·hd + hd − 1), as tiled GEMMs: a block
// computes a kTile × kTile tile of the result, each of its 256 threads a 4 × 4 part (rows ty + 16a, columns
// tx + 16b), over k in steps of kTileK staged in shared memory. The sums run in a fixed order (k in order within a
// block; dwg's row chunks in order after), so both are deterministic. One thread per output element instead re-read
// each input hd·k1 times from L2 (milliseconds per layer at 16k tokens).
constexpr int kTile = 64, kTileK = 16, kTileThreads = 256;
constexpr int64_t kDwChunkRows = 512; // dwg's token chunk per block (partials summed in chunk order)

// dp[p row R][γ·hd + i] (=) = Σ_{τ<k1} Σ_{o<hd} dout[t = r − τ][γ·hd + o] · wg[((γ·hd + o)·hd + i)·k1 + τ] over the
// t in [0, T) of R's sequence (r: R's local row); rows nobody read get 0. Block (x: 64 p rows, y: γ·tiles + i tile).
__global__ void __launch_bounds__(kTileThreads)
    grouped_backward_dp_kernel(float *dp, const float *dout, const int64_t *ss, int64_t B, int64_t P, int64_t C,
                               int64_t hd, int64_t k1, const float *wg) {
    __shared__ float As[kTileK][kTile], Bs[kTileK][kTile]; // As[o][row], Bs[o][i]
    const int64_t tiles = (hd + kTile - 1) / kTile, g0 = int64_t(blockIdx.y) / tiles * hd;
    const int64_t i0 = int64_t(blockIdx.y) % tiles * kTile, m0 = int64_t(blockIdx.x) * kTile;
    const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
    float acc[4][4] = {};
    for (int64_t tau = 0; tau < k1; ++tau)
        for (int64_t ob = 0; ob < hd; ob += kTileK) {
            for (int q = 0; q < kTile * kTileK / kTileThreads; ++q) {
                const int e = tid + q * kTileThreads;
                // A: consecutive threads read consecutive o of one dout row.
                const int am = e / kTileK, ak = e % kTileK;
                const int64_t R = m0 + am, o = ob + ak;
                float a = 0.0f;
                if (R < P && o < hd) {
                    const int64_t b = sequence_of(ss, B, R, k1 - 1), t = R - (ss[b] + b * (k1 - 1)) - tau;
                    if (t >= 0 && t < ss[b + 1] - ss[b]) a = dout[(ss[b] + t) * C + g0 + o];
                }
                As[ak][am] = a;
                const int bk = e / kTile, bn = e % kTile;
                const int64_t ow = ob + bk, i = i0 + bn;
                Bs[bk][bn] = ow < hd && i < hd ? wg[((g0 + ow) * hd + i) * k1 + tau] : 0.0f;
            }
            __syncthreads();
            for (int k = 0; k < kTileK; ++k)
                for (int a = 0; a < 4; ++a)
                    for (int b = 0; b < 4; ++b) acc[a][b] += As[k][ty + 16 * a] * Bs[k][tx + 16 * b];
            __syncthreads();
        }
    for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
            const int64_t R = m0 + ty + 16 * a, i = i0 + tx + 16 * b;
            if (R < P && i < hd) dp[R * C + g0 + i] = acc[a][b];
        }
}

// dz[t][c] += Σ_{i<k0} wd[c·k0+i] · dp[p position j = t+(k0−1)−i][c] over j < T (j ≥ t ≥ 0: never padding).
__global__ void depthwise_backward_dz_kernel(float *dz, const float *dp, const int64_t *ss, int64_t C, int64_t k0,
                                             int64_t k1, const float *wd) {
    const int64_t b = blockIdx.y, t0 = ss[b], T = ss[b + 1] - t0;
    const int64_t p0 = t0 + b * (k1 - 1);
    const int64_t total = T * C;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = e / C, c = e % C;
        float acc = 0.0f;
        for (int64_t i = 0; i < k0; ++i) {
            const int64_t j = t + (k0 - 1) - i;
            if (j >= T) continue;
            acc += wd[c * k0 + i] * dp[(p0 + j + (k1 - 1)) * C + c]; // local row of position j is j + k1 − 1
        }
        dz[(t0 + t) * C + c] += acc;
    }
}

// dwd[c·k0 + i] += Σ over tokens n of dp[p position j = t+(k0−1)−i][c] · z[n][c], for the n whose j is < T (p
// position j read z position t = n − ss[b] at tap i): column w = c·k0 + i of column_sum_add.
struct DepthwiseWeightGrad {
    const float *dp, *z;
    const int64_t *ss;
    int64_t B, C, k0, k1;
    __device__ float operator()(int64_t n, int64_t w) const {
        const int64_t c = w / k0, i = w % k0, b = sequence_of(ss, B, n);
        const int64_t t = n - ss[b], j = t + (k0 - 1) - i, T = ss[b + 1] - ss[b];
        return j < T ? dp[(ss[b] + b * (k1 - 1) + j + (k1 - 1)) * C + c] * z[n * C + c] : 0.0f;
    }
};

// dwg[((γ·hd + o)·hd + i)·k1 + τ] += Σ over tokens n of dout[n][γ·hd + o] · p[n's p row + τ][γ·hd + i]: the tile
// (o, i) of (γ, τ) over one chunk of kDwChunkRows tokens into partial[chunk][that index] (then summed over the
// chunks in order). Block (x: ((γ·k1 + τ)·tiles + o tile)·tiles + i tile, y: token chunk).
__global__ void __launch_bounds__(kTileThreads)
    grouped_backward_dw_kernel(float *partial, const float *dout, const float *p, const int64_t *ss, int64_t B,
                               int64_t N, int64_t C, int64_t hd, int64_t k1) {
    __shared__ float As[kTileK][kTile], Bs[kTileK][kTile]; // As[n][o], Bs[n][i]
    const int64_t tiles = (hd + kTile - 1) / kTile;
    int64_t x = blockIdx.x;
    const int64_t i0 = x % tiles * kTile;
    x /= tiles;
    const int64_t o0 = x % tiles * kTile;
    x /= tiles;
    const int64_t tau = x % k1, g0 = x / k1 * hd;
    const int64_t n0 = int64_t(blockIdx.y) * kDwChunkRows, n1 = n0 + kDwChunkRows < N ? n0 + kDwChunkRows : N;
    const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
    float acc[4][4] = {};
    for (int64_t nb = n0; nb < n1; nb += kTileK) {
        for (int q = 0; q < kTile * kTileK / kTileThreads; ++q) {
            const int e = tid + q * kTileThreads, row = e / kTile, col = e % kTile; // consecutive channels
            const int64_t n = nb + row;
            float a = 0.0f, b = 0.0f;
            if (n < n1) {
                if (o0 + col < hd) a = dout[n * C + g0 + o0 + col];
                if (i0 + col < hd) b = p[(n + sequence_of(ss, B, n) * (k1 - 1) + tau) * C + g0 + i0 + col];
            }
            As[row][col] = a, Bs[row][col] = b;
        }
        __syncthreads();
        for (int k = 0; k < kTileK; ++k)
            for (int a = 0; a < 4; ++a)
                for (int b = 0; b < 4; ++b) acc[a][b] += As[k][ty + 16 * a] * Bs[k][tx + 16 * b];
        __syncthreads();
    }
    float *out = partial + int64_t(blockIdx.y) * (C * hd * k1);
    for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 4; ++b) {
            const int64_t o = o0 + ty + 16 * a, i = i0 + tx + 16 * b;
            if (o < hd && i < hd) out[((g0 + o) * hd + i) * k1 + tau] = acc[a][b];
        }
}

using bf16 = __nv_bfloat16;

// cols[(γ·N + n)·k1·hd + τ·hd + i] = bf16(p[n's p row + τ][γ·hd + i]) for the tokens n of sequence b = blockIdx.y;
// element e = (t·k1 + τ)·C + c, so consecutive threads read consecutive channels of one p row.
__global__ void im2col_bf16_kernel(bf16 *cols, const float *p, const int64_t *ss, int64_t N, int64_t C, int64_t hd,
                                   int64_t k1) {
    const int64_t b = blockIdx.y, t0 = ss[b], T = ss[b + 1] - t0, p0 = t0 + b * (k1 - 1), kw = k1 * hd;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < T * k1 * C;
         e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t c = e % C, tau = e / C % k1, t = e / (C * k1), g = c / hd, i = c % hd;
        cols[(g * N + t0 + t) * kw + tau * hd + i] = __float2bfloat16_rn(p[(p0 + t + tau) * C + c]);
    }
}

// dp[p row of local row r][γ·hd + i] (=) = Σ_{τ<k1} dcols[(γ·N + t0 + r − τ)·k1·hd + τ·hd + i] over the positions
// r − τ ∈ [0, T) of sequence b = blockIdx.y (the inverse gather; rows nobody read get 0).
__global__ void col2im_kernel(float *dp, const float *dcols, const int64_t *ss, int64_t N, int64_t C, int64_t hd,
                              int64_t k1) {
    const int64_t b = blockIdx.y, t0 = ss[b], T = ss[b + 1] - t0, p0 = t0 + b * (k1 - 1), kw = k1 * hd;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < (T + k1 - 1) * C;
         e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = e / C, c = e % C, g = c / hd, i = c % hd;
        float acc = 0.0f;
        for (int64_t tau = 0; tau < k1; ++tau) {
            const int64_t t = r - tau;
            if (t >= 0 && t < T) acc += dcols[(g * N + t0 + t) * kw + tau * hd + i];
        }
        dp[(p0 + r) * C + c] = acc;
    }
}

// packed[(c·k1 + τ)·hd + i] = bf16(wg[(c·hd + i)·k1 + τ]): each group's weight as one [hd, k1·hd] matrix (W_γ of
// cpu::cca_conv_forward).
__global__ void pack_weight_bf16_kernel(bf16 *packed, const float *wg, int64_t C, int64_t hd, int64_t k1) {
    const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= C * k1 * hd) return;
    const int64_t i = e % hd, tau = e / hd % k1, c = e / (hd * k1);
    packed[e] = __float2bfloat16_rn(wg[(c * hd + i) * k1 + tau]);
}

// dwg[(c·hd + i)·k1 + τ] += dpacked[(c·k1 + τ)·hd + i]: a packed weight gradient back into Conv1d's layout.
__global__ void unpack_add_weight_grad_kernel(float *dwg, const float *dpacked, int64_t C, int64_t hd, int64_t k1) {
    const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (e >= C * hd * k1) return;
    const int64_t tau = e % k1, i = e / k1 % hd, c = e / (k1 * hd);
    dwg[e] += dpacked[(c * k1 + tau) * hd + i];
}

// The tensor-core path's scratch (cca.h conv_bf16_pieces), carved from one grow-once buffer.
struct ConvScratch {
    bf16 *cols = nullptr, *dout = nullptr;
    float *dcols = nullptr, *dpacked = nullptr;
    ConvScratch(int64_t N, const ConvShape &s, bool backward) {
        const auto p = scratch_pieces(Scratch::CcaConvBf16, conv_bf16_pieces(N, s, backward));
        cols = reinterpret_cast<bf16 *>(p[0]);
        if (!backward) return;
        dout = reinterpret_cast<bf16 *>(p[1]), dcols = reinterpret_cast<float *>(p[2]);
        dpacked = reinterpret_cast<float *>(p[3]);
    }
};

void check_bf16_shape(const ConvShape &s) {
    if (!conv_on_tensor_cores(s)) fail("cca_conv: head size {} is not a multiple of 8 (bf16 rows)", s.C / s.groups);
}

const uint16_t *bits(const bf16 *p) { return reinterpret_cast<const uint16_t *>(p); }

void im2col_bf16(bf16 *cols, const float *p, const VarlenBatch &batch, const ConvShape &s) {
    im2col_bf16_kernel<<<seq_grid(batch, batch.max_len * s.k1, s.C), kThreads, 0, launch_stream()>>>(
        cols, p, batch.seq_start, batch.N, s.C, s.C / s.groups, s.k1);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace


void pack_conv_weight_bf16(uint16_t *packed, const float *wg, const ConvShape &s) {
    check_shape(s);
    const int64_t n = s.C * s.k1 * (s.C / s.groups);
    pack_weight_bf16_kernel<<<blocks_for(n, kThreads), kThreads, 0, launch_stream()>>>(
        reinterpret_cast<bf16 *>(packed), wg, s.C, s.C / s.groups, s.k1);
    ZAYA_CUDA_LAUNCHED();
}

void cca_conv_forward_bf16(float *o, float *p, const float *z, const VarlenBatch &batch, const ConvShape &s,
                           const float *wd, const float *bd, const uint16_t *wg16, const float *bg) {
    check_shape(s);
    check_bf16_shape(s);
    if (batch.B == 0) return;
    const int64_t C = s.C, hd = C / s.groups, kw = s.k1 * hd, N = batch.N;
    depthwise_forward_kernel<<<seq_grid(batch, batch.max_len + s.k1 - 1, C), kThreads, 0, launch_stream()>>>(
        p, z, batch.seq_start, C, s.k0, s.k1, wd, bd);
    ZAYA_CUDA_LAUNCHED();
    if (N == 0) return;
    const ConvScratch w(N, s, false);
    im2col_bf16(w.cols, p, batch, s);
    for (int64_t g = 0; g < s.groups; ++g) // o[:, γ] = cols_γ · W_γᵀ
        gemm_bf16(false, true, N, hd, kw, 1.0f, bits(w.cols) + g * N * kw, kw, wg16 + g * hd * kw, kw, 0.0f,
                  o + g * hd, C);
    add_bias_rows(o, C, bg, N, C);
}

void cca_conv_forward(float *o, float *p, const float *z, const VarlenBatch &batch, const ConvShape &s,
                      const float *wd, const float *bd, const float *wg, const float *bg) {
    check_shape(s);
    if (batch.B == 0) return;
    const int64_t hd = s.C / s.groups;
    depthwise_forward_kernel<<<seq_grid(batch, batch.max_len + s.k1 - 1, s.C), kThreads, 0, launch_stream()>>>(
        p, z, batch.seq_start, s.C, s.k0, s.k1, wd, bd);
    ZAYA_CUDA_LAUNCHED();
    if (batch.N == 0) return;
    grouped_forward_kernel<<<seq_grid(batch, batch.max_len, s.C), kThreads, 0, launch_stream()>>>(
        o, p, batch.seq_start, s.C, hd, s.k1, wg, bg);
    ZAYA_CUDA_LAUNCHED();
}

void cca_conv_backward(float *dz, float *dp, float *dwd, float *dbd, float *dwg, float *dbg, const float *dout,
                       const float *z, const float *p, const VarlenBatch &batch, const ConvShape &s, const float *wd,
                       const float *wg, const uint16_t *wg16) {
    check_shape(s);
    if (wg16) check_bf16_shape(s);
    if (batch.B == 0) return;
    const int64_t C = s.C, hd = C / s.groups, P = batch.N + batch.B * (s.k1 - 1), N = batch.N, kw = s.k1 * hd;
    // dp first (everything of the depthwise stage reads it), then each gradient by its own kernel: stream order.
    const int64_t tiles = (hd + kTile - 1) / kTile;
    if ((P + kTile - 1) / kTile > (int64_t(1) << 31) - 1 || s.groups * tiles > 65535)
        fail("cca_conv: {} rows × {} groups exceed the CUDA grid", P, s.groups);
    if (wg16 && N > 0) { // the grouped conv's two products as bf16 GEMMs per group (dwg's here, first)
        const ConvScratch w(N, s, true);
        to_bf16(reinterpret_cast<uint16_t *>(w.dout), dout, N * C);
        im2col_bf16(w.cols, p, batch, s);
        for (int64_t g = 0; g < s.groups; ++g) {
            const uint16_t *dout_g = bits(w.dout) + g * hd, *cols_g = bits(w.cols) + g * N * kw;
            gemm_bf16(true, false, hd, kw, N, 1.0f, dout_g, C, cols_g, kw, 0.0f, w.dpacked + g * hd * kw, kw); // dW_γ
            gemm_bf16(false, false, N, kw, hd, 1.0f, dout_g, C, wg16 + g * hd * kw, kw, 0.0f, w.dcols + g * N * kw,
                      kw); // dcols_γ = dout_γ · W_γ
        }
        unpack_add_weight_grad_kernel<<<blocks_for(C * hd * s.k1, kThreads), kThreads, 0, launch_stream()>>>(
            dwg, w.dpacked, C, hd, s.k1);
        ZAYA_CUDA_LAUNCHED();
        col2im_kernel<<<seq_grid(batch, batch.max_len + s.k1 - 1, C), kThreads, 0, launch_stream()>>>(
            dp, w.dcols, batch.seq_start, N, C, hd, s.k1);
    } else {
        grouped_backward_dp_kernel<<<dim3(unsigned((P + kTile - 1) / kTile), unsigned(s.groups * tiles)), kTileThreads,
                                     0, launch_stream()>>>(dp, dout, batch.seq_start, batch.B, P, C, hd, s.k1, wg);
    }
    ZAYA_CUDA_LAUNCHED();
    column_sum_add<float>(dbd, ColumnOf<float>{dp, C}, P, C);
    if (batch.N == 0) return;
    depthwise_backward_dz_kernel<<<seq_grid(batch, batch.max_len, C), kThreads, 0, launch_stream()>>>(
        dz, dp, batch.seq_start, C, s.k0, s.k1, wd);
    ZAYA_CUDA_LAUNCHED();
    column_sum_add<float>(dwd, DepthwiseWeightGrad{dp, z, batch.seq_start, batch.B, C, s.k0, s.k1}, batch.N, C * s.k0);
    column_sum_add<float>(dbg, ColumnOf<float>{dout, C}, batch.N, C);
    if (wg16) return; // dwg came with dp
    const int64_t chunks = (batch.N + kDwChunkRows - 1) / kDwChunkRows, weights = C * hd * s.k1;
    if (chunks > 65535) fail("cca_conv: {} tokens exceed the CUDA grid", batch.N);
    auto *partial = static_cast<float *>(device_scratch(Scratch::ColumnSums, size_t(chunks * weights) * sizeof(float)));
    grouped_backward_dw_kernel<<<dim3(unsigned(s.groups * s.k1 * tiles * tiles), unsigned(chunks)), kTileThreads, 0,
                                 launch_stream()>>>(partial, dout, p, batch.seq_start, batch.B, batch.N, C, hd, s.k1);
    ZAYA_CUDA_LAUNCHED();
    launch_kernel(column_sum_finish_kernel<float, float>, dim3(blocks_for(weights, 256)), dim3(256), 0, dwg,
                  static_cast<const float *>(partial), chunks, weights);
}

} // namespace zaya::cuda
