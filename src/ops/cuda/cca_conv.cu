// The CCA convolution (ops/cpu/cca.h, spec A.3) on the GPU: direct kernels, one thread per output element, fp32.
// No GEMM and no atomics: every element (forward outputs, dp, dz, each parameter gradient) has exactly one writer
// thread, which sums its terms in a fixed order, so the backward is deterministic run to run.
//
// Row bookkeeping (as the CPU op): sequence b owns z/o rows [ss[b], ss[b+1]) (T = ss[b+1] − ss[b] tokens) and p rows
// [ss[b] + b·(k1−1), ss[b+1] + (b+1)·(k1−1)): T + k1 − 1 rows, local p row r ∈ [0, T+k1−1) holding depthwise
// position j = r − (k1−1) ∈ [−(k1−1), T). Output position t reads p local rows t … t+k1−1 (taps τ = 0 … k1−1), and
// p position j reads z positions j−(k0−1) … j (taps i = 0 … k0−1; t < 0 is the zero padding).
#include "core/error.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/varlen.cuh"

#include <algorithm>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;
// The parameter-gradient reductions sum their tokens in chunks of this many (fp32 partial per chunk, then the
// partials in order): error ~ (kChunk + N/kChunk)·ε instead of N·ε for one long serial fp32 sum.
constexpr int64_t kChunk = 256;

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

// dp[local row r][c] (=): the outputs t = r − τ (0 ≤ t < T) read p row r at tap τ through channel i = c − γ·hd,
// so dp = Σ_{τ<k1} Σ_{o<hd} dout[t][γ·hd + o] · wg[(γ·hd + o)·hd·k1 + i·k1 + τ]. Rows nobody read get 0.
__global__ void grouped_backward_dp_kernel(float *dp, const float *dout, const int64_t *ss, int64_t C, int64_t hd,
                                           int64_t k1, const float *wg) {
    const int64_t b = blockIdx.y, t0 = ss[b], T = ss[b + 1] - t0;
    const int64_t p0 = t0 + b * (k1 - 1);
    const int64_t total = (T + k1 - 1) * C;
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = e / C, c = e % C, g0 = c / hd * hd, i = c - g0;
        float acc = 0.0f;
        for (int64_t tau = 0; tau < k1; ++tau) {
            const int64_t t = r - tau;
            if (t < 0 || t >= T) continue;
            const float *dr = dout + (t0 + t) * C + g0;
            for (int64_t oc = 0; oc < hd; ++oc) acc += dr[oc] * wg[((g0 + oc) * hd + i) * k1 + tau];
        }
        dp[(p0 + r) * C + c] = acc;
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

// dwg[(c·hd + i)·k1 + τ] += Σ over tokens n (in order) of dout[n][c] · p[local row t+τ of n's sequence][γ·hd + i].
// Thread w = (τ·C + c)·hd + i: neighbouring threads read neighbouring p channels.
__global__ void grouped_backward_dw_kernel(float *dwg, const float *dout, const float *p, const int64_t *ss,
                                           int64_t B, int64_t C, int64_t hd, int64_t k1) {
    const int64_t w = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (w >= k1 * C * hd) return;
    const int64_t tau = w / (C * hd), c = w / hd % C, i = w % hd, pc = c / hd * hd + i, N = ss[B];
    float total = 0.0f, part = 0.0f;
    int64_t b = 0;
    for (int64_t n = 0; n < N; ++n) {
        while (n >= ss[b + 1]) ++b;
        // p row of (n's sequence b, local row t+τ) = ss[b] + b·(k1−1) + (n − ss[b]) + τ
        part += dout[n * C + c] * p[(n + b * (k1 - 1) + tau) * C + pc];
        if ((n + 1) % kChunk == 0) total += part, part = 0.0f;
    }
    dwg[(c * hd + i) * k1 + tau] += total + part;
}

} // namespace

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
                       const float *wg) {
    check_shape(s);
    if (batch.B == 0) return;
    const int64_t C = s.C, hd = C / s.groups, P = batch.N + batch.B * (s.k1 - 1);
    // dp first (everything of the depthwise stage reads it), then each gradient by its own kernel: stream order.
    grouped_backward_dp_kernel<<<seq_grid(batch, batch.max_len + s.k1 - 1, C), kThreads, 0, launch_stream()>>>(
        dp, dout, batch.seq_start, C, hd, s.k1, wg);
    ZAYA_CUDA_LAUNCHED();
    column_sum_add<float>(dbd, ColumnOf<float>{dp, C}, P, C);
    if (batch.N == 0) return;
    depthwise_backward_dz_kernel<<<seq_grid(batch, batch.max_len, C), kThreads, 0, launch_stream()>>>(
        dz, dp, batch.seq_start, C, s.k0, s.k1, wd);
    ZAYA_CUDA_LAUNCHED();
    column_sum_add<float>(dwd, DepthwiseWeightGrad{dp, z, batch.seq_start, batch.B, C, s.k0, s.k1}, batch.N, C * s.k0);
    grouped_backward_dw_kernel<<<blocks_for(s.k1 * C * hd, kThreads), kThreads, 0, launch_stream()>>>(
        dwg, dout, p, batch.seq_start, batch.B, C, hd, s.k1);
    ZAYA_CUDA_LAUNCHED();
    column_sum_add<float>(dbg, ColumnOf<float>{dout, C}, batch.N, C);
}

} // namespace zaya::cuda
