// The router's MLP in one kernel (ops/cuda/moe.h router_mlp_forward): RMSNorm → fc1 → GELU → fc2 → GELU → out
// → softmax and selection. A block owns a tile of kTok tokens; their activations stay in shared memory between the
// layers and the weights stream through it in chunks, each read once per tile. Every intermediate the backward
// reads is still written out.
#include "ops/cuda/check.cuh"
#include "ops/cuda/moe.h"
#include "ops/cuda/router_select.cuh"

#include <cmath>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;     // in the linear layers, thread = output unit (a pass per 256 units)
constexpr int kWarps = kThreads / 32;
constexpr int64_t kTok = 16;      // tokens per block
constexpr int64_t kChunk = 8;     // input units per staged weight chunk

struct RouterArgs {
    float *r_norm, *r_rstd, *h1, *a1, *h2, *a2, *logits, *probs, *p_sel;
    int32_t *choice;
    const float *rho, *norm_w, *fc1, *fc1_b, *fc2, *fc2_b, *out, *bias;
    int64_t N, R, K;
    float eps;
};

// Shared memory: two activation tiles [kTok, R], a weight chunk [kChunk, kThreads], the logits [kTok, K].
size_t shared_floats(int64_t R, int64_t K) { return size_t(2 * kTok * R + kChunk * kThreads + kTok * K); }

__device__ float gelu(float x) { return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f)); }

// y = W·x + b for the tile (x, y [kTok, R] in shared memory; W [R, R]); h (pre-activation) and a = gelu(h) go to
// global rows n0…, a also to y; b may be null. Ends with a barrier.
__device__ void linear_gelu(float *y, float *h, float *a, const float *x, float *ws, const float *W, const float *b,
                            int64_t n0, int64_t nt, int64_t R) {
    const int tid = int(threadIdx.x);
    for (int64_t o0 = 0; o0 < R; o0 += kThreads) {
        const int64_t o = o0 + tid;
        float acc[kTok];
#pragma unroll
        for (int64_t t = 0; t < kTok; ++t) acc[t] = o < R && b ? b[o] : 0.0f;
        for (int64_t i0 = 0; i0 < R; i0 += kChunk) {
            const int64_t ni = min(kChunk, R - i0);
            for (int64_t e = tid; e < ni * kThreads; e += kThreads) { // ws[ic][ol] = W[o0 + ol][i0 + ic]
                const int64_t ol = e / ni, ic = e % ni;
                ws[ic * kThreads + ol] = o0 + ol < R ? W[(o0 + ol) * R + i0 + ic] : 0.0f;
            }
            __syncthreads();
            for (int64_t ic = 0; ic < ni; ++ic) {
                const float w = ws[ic * kThreads + tid];
#pragma unroll
                for (int64_t t = 0; t < kTok; ++t) acc[t] += w * x[t * R + i0 + ic];
            }
            __syncthreads(); // ws is restaged next
        }
#pragma unroll
        for (int64_t t = 0; t < kTok; ++t) {
            const float v = gelu(acc[t]);
            if (o < R) y[t * R + o] = v;
            if (o < R && t < nt) h[(n0 + t) * R + o] = acc[t], a[(n0 + t) * R + o] = v;
        }
    }
    __syncthreads();
}

__global__ void __launch_bounds__(kThreads) router_mlp_kernel(RouterArgs a) {
    extern __shared__ float smem[];
    const int64_t R = a.R, K = a.K, n0 = int64_t(blockIdx.x) * kTok, nt = min(kTok, a.N - n0);
    const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
    float *xs = smem, *ys = xs + kTok * R, *ws = ys + kTok * R, *ls = ws + kChunk * kThreads;

    // RMSNorm, a warp per token (tokens past the end: zeros, never written out).
    for (int64_t t = warp; t < kTok; t += kWarps) {
        const float *x = a.rho + (t < nt ? n0 + t : n0) * R;
        float ss = 0.0f;
        for (int64_t i = lane; t < nt && i < R; i += 32) ss += x[i] * x[i];
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float r = rsqrtf(ss / float(R) + a.eps);
        if (t < nt && lane == 0) a.r_rstd[n0 + t] = r;
        for (int64_t i = lane; i < R; i += 32) {
            const float v = t < nt ? a.norm_w[i] * (x[i] * r) : 0.0f;
            xs[t * R + i] = v;
            if (t < nt) a.r_norm[(n0 + t) * R + i] = v;
        }
    }
    __syncthreads();
    linear_gelu(ys, a.h1, a.a1, xs, ws, a.fc1, a.fc1_b, n0, nt, R);
    linear_gelu(xs, a.h2, a.a2, ys, ws, a.fc2, a.fc2_b, n0, nt, R);
    // Logits (no bias): one thread per (token, class).
    for (int64_t e = tid; e < kTok * K; e += kThreads) {
        const int64_t t = e / K, k = e % K;
        const float *w = a.out + k * R, *x = xs + t * R;
        float acc = 0.0f;
        for (int64_t i = 0; i < R; ++i) acc += w[i] * x[i];
        ls[e] = acc;
        if (t < nt) a.logits[(n0 + t) * K + k] = acc;
    }
    __syncthreads();
    // Softmax and selection, one thread per token, in the arithmetic order of cpu::router_select_forward.
    if (tid < nt) {
        const int64_t n = n0 + tid;
        router_select_token(a.probs + n * K, a.choice[n], a.p_sel[n], ls + tid * K, a.bias, K);
    }
}

} // namespace

bool router_mlp_fusable(int64_t R, int64_t K) { return shared_floats(R, K) * sizeof(float) <= 48 * 1024; }

void router_mlp_forward(float *r_norm, float *r_rstd, float *h1, float *a1, float *h2, float *a2, float *logits,
                        float *probs, int32_t *choice, float *p_sel, const float *rho, const float *norm_w,
                        const float *fc1, const float *fc1_b, const float *fc2, const float *fc2_b, const float *out,
                        const float *bias, int64_t N, int64_t R, int64_t K, float eps) {
    if (N == 0) return;
    const RouterArgs a{r_norm, r_rstd, h1,  a1,    h2,  a2,    logits, probs, p_sel, choice, rho, norm_w,
                       fc1,    fc1_b,  fc2, fc2_b, out, bias, N,      R,     K,     eps};
    router_mlp_kernel<<<unsigned((N + kTok - 1) / kTok), kThreads, shared_floats(R, K) * sizeof(float),
                        launch_stream()>>>(a);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
