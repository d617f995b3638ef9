// Residual scaling fused with the RMSNorm that reads its output (every layer boundary of the model), forward and
// backward. A block owns whole rows and keeps each thread's columns in registers, so the residual stream is read
// once: the unfused pair reads it back for the norm (forward) and passes the summed gradient through memory twice
// (backward). No atomics: the parameter gradients are column sums over rows in a fixed order.
#include "ops/cuda/check.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/ops.h"
#include "ops/cuda/residual_scale.cuh"

#include <cuda_bf16.h>

namespace zaya::cuda {

namespace {

constexpr int kCols = 4;               // columns per thread: a row of D ≤ kCols·1024 fits one block's registers
constexpr int64_t kRowsPerBlock = 32;  // backward: rows per block, whose parameter-gradient partials it writes
constexpr int kParamGrads = 5;         // backward partials: dw, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias

// Sum over the block, every thread gets it; warp shuffles, then the warps' sums in a fixed order: deterministic.
template <int kThreads> __device__ float row_sum(float v) {
    __shared__ float warp_sums[kThreads / 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
    __syncthreads();
    float total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    __syncthreads(); // warp_sums is reused by the next row
    return total;
}

// One block per row: out = residual scaling, y = w ⊙ out·rstd.
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    residual_rmsnorm_forward_kernel(float *out, float *y, __nv_bfloat16 *y16, float *rstd, const float *x,
                                    const float *res, const float *hs_scale, const float *hs_bias,
                                    const float *res_scale, const float *res_bias, const float *w, int64_t D,
                                    float eps) {
    await_previous_kernel();
    const int64_t base = int64_t(blockIdx.x) * D;
    float v[kCols];
    float ss = 0;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        const int64_t i = threadIdx.x + int64_t(j) * kThreads;
        v[j] = 0;
        if (i < D) {
            v[j] = residual_scaled(x[base + i], res[base + i], hs_scale, hs_bias, res_scale, res_bias, i);
            out[base + i] = v[j];
            ss += v[j] * v[j];
        }
    }
    const float r = rsqrtf(row_sum<kThreads>(ss) / float(D) + eps);
    if (threadIdx.x == 0) rstd[blockIdx.x] = r;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        const int64_t i = threadIdx.x + int64_t(j) * kThreads;
        if (i < D) {
            const float yv = w[i] * (v[j] * r);
            y[base + i] = yv;
            if (y16) y16[base + i] = __float2bfloat16_rn(yv);
        }
    }
}

// Block b: rows [b·kRowsPerBlock, …) in order. Per row, g = (g +) the norm's dx, then residual scaling's input
// gradients from g; the five parameter gradients accumulate per column in registers and go out as the block's
// partials [kParamGrads, D].
template <int kThreads>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_residual_backward_kernel(float *partial, float *dx, float *dres, const float *g, const float *dy,
                                     const float *out, const float *w, const float *rstd, const float *x,
                                     const float *res, const float *hs_scale, const float *hs_bias,
                                     const float *res_scale, const float *res_bias, int64_t N, int64_t D,
                                     bool accumulate_g, bool accumulate_dres) {
    const int64_t r0 = int64_t(blockIdx.x) * kRowsPerBlock, r1 = min(r0 + kRowsPerBlock, N);
    float a_dw[kCols] = {}, a_hs[kCols] = {}, a_hb[kCols] = {}, a_rs[kCols] = {}, a_rb[kCols] = {};
    for (int64_t n = r0; n < r1; ++n) {
        const int64_t base = n * D;
        const float r = rstd[n];
        float dyv[kCols], ov[kCols];
        float dot = 0;
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
            const int64_t i = threadIdx.x + int64_t(j) * kThreads;
            dyv[j] = ov[j] = 0;
            if (i < D) {
                dyv[j] = dy[base + i], ov[j] = out[base + i];
                dot += w[i] * dyv[j] * ov[j] * r;
            }
        }
        const float m = row_sum<kThreads>(dot) / float(D);
#pragma unroll
        for (int j = 0; j < kCols; ++j) {
            const int64_t i = threadIdx.x + int64_t(j) * kThreads;
            if (i >= D) continue;
            const float dnorm = r * (w[i] * dyv[j] - ov[j] * r * m);
            const float gi = accumulate_g ? g[base + i] + dnorm : dnorm;
            a_dw[j] += dyv[j] * ov[j] * r;
            a_hb[j] += gi * hs_scale[i];
            a_hs[j] += gi * (x[base + i] + hs_bias[i]);
            a_rb[j] += gi * res_scale[i];
            a_rs[j] += gi * (res[base + i] + res_bias[i]);
            dx[base + i] = gi * hs_scale[i];
            dres[base + i] = accumulate_dres ? dres[base + i] + gi * res_scale[i] : gi * res_scale[i];
        }
    }
    float *p = partial + int64_t(blockIdx.x) * kParamGrads * D;
#pragma unroll
    for (int j = 0; j < kCols; ++j) {
        const int64_t i = threadIdx.x + int64_t(j) * kThreads;
        if (i >= D) continue;
        p[i] = a_dw[j], p[D + i] = a_hs[j], p[2 * D + i] = a_hb[j], p[3 * D + i] = a_rs[j], p[4 * D + i] = a_rb[j];
    }
}

struct ParamGrads {
    float *g[kParamGrads]; // dw, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias
};

// Thread (q, column i): grads.g[q][i] += Σ_b partial[b, q, i], blocks in order.
__global__ void add_partials_kernel(ParamGrads grads, const float *partial, int64_t blocks, int64_t D) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= kParamGrads * D) return;
    const int64_t q = k / D, i = k % D;
    float acc = 0;
    for (int64_t b = 0; b < blocks; ++b) acc += partial[(b * kParamGrads + q) * D + i];
    grads.g[q][i] += acc;
}

// The smallest block (a power of two ≥ 32) whose threads hold a row of D in kCols registers each; 0 if none does.
int threads_for(int64_t D) {
    for (int t = 32; t <= 1024; t *= 2)
        if (int64_t(t) * kCols >= D) return t;
    return 0;
}

template <int kThreads>
void launch_forward(int64_t N, float *out, float *y, __nv_bfloat16 *y16, float *rstd, const float *x, const float *res,
                    const float *hs_scale, const float *hs_bias, const float *res_scale, const float *res_bias,
                    const float *w, int64_t D, float eps) {
    launch_kernel(residual_rmsnorm_forward_kernel<kThreads>, unsigned(N), kThreads, 0, out, y, y16, rstd, x, res,
                  hs_scale, hs_bias, res_scale, res_bias, w, D, eps);
}
template <int kThreads>
void launch_backward(int64_t blocks, float *partial, float *dx, float *dres, const float *g, const float *dy,
                     const float *out, const float *w, const float *rstd, const float *x, const float *res,
                     const float *hs_scale, const float *hs_bias, const float *res_scale, const float *res_bias,
                     int64_t N, int64_t D, bool accumulate_g, bool accumulate_dres) {
    rmsnorm_residual_backward_kernel<kThreads><<<unsigned(blocks), kThreads, 0, launch_stream()>>>(
        partial, dx, dres, g, dy, out, w, rstd, x, res, hs_scale, hs_bias, res_scale, res_bias, N, D, accumulate_g,
        accumulate_dres);
}
// Indexed by log2(threads / 32).
constexpr decltype(&launch_forward<32>) kForward[] = {launch_forward<32>,  launch_forward<64>,  launch_forward<128>,
                                                      launch_forward<256>, launch_forward<512>, launch_forward<1024>};
constexpr decltype(&launch_backward<32>) kBackward[] = {launch_backward<32>,  launch_backward<64>,
                                                        launch_backward<128>, launch_backward<256>,
                                                        launch_backward<512>, launch_backward<1024>};
int launch_index(int threads) {
    int k = 0;
    while ((32 << k) < threads) ++k;
    return k;
}

} // namespace

void residual_rmsnorm_forward(float *out, float *y, float *rstd, const float *x, const float *res,
                              const float *hs_scale, const float *hs_bias, const float *res_scale,
                              const float *res_bias, const float *w, int64_t N, int64_t D, float eps, uint16_t *y16) {
    if (N == 0) return;
    const int threads = threads_for(D);
    if (threads == 0) { // rows too wide for registers: the two unfused kernels
        residual_scale_forward(out, x, res, hs_scale, hs_bias, res_scale, res_bias, N, D);
        return rmsnorm_forward(y, rstd, out, w, N, D, eps, y16);
    }
    kForward[launch_index(threads)](N, out, y, reinterpret_cast<__nv_bfloat16 *>(y16), rstd, x, res, hs_scale, hs_bias,
                                    res_scale, res_bias, w, D, eps);
    ZAYA_CUDA_LAUNCHED();
}

void rmsnorm_residual_backward(float *dx, float *dres, float *d_hs_scale, float *d_hs_bias, float *d_res_scale,
                               float *d_res_bias, float *dw, float *g, const float *dy, const float *out,
                               const float *w, const float *rstd, const float *x, const float *res,
                               const float *hs_scale, const float *hs_bias, const float *res_scale,
                               const float *res_bias, int64_t N, int64_t D, bool accumulate_g,
                               bool accumulate_dres) {
    if (N == 0) return;
    const int threads = threads_for(D);
    if (threads == 0) { // rows too wide for registers: the two unfused ops, through g
        rmsnorm_backward(g, dw, dy, out, w, rstd, N, D, accumulate_g);
        return residual_scale_backward(dx, dres, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias, g, x, res, hs_scale,
                                       hs_bias, res_scale, res_bias, N, D, accumulate_dres);
    }
    const int64_t blocks = (N + kRowsPerBlock - 1) / kRowsPerBlock;
    auto *partial = static_cast<float *>(
        device_scratch(Scratch::NormResidualPartials, size_t(blocks * kParamGrads * D) * sizeof(float)));
    kBackward[launch_index(threads)](blocks, partial, dx, dres, g, dy, out, w, rstd, x, res, hs_scale, hs_bias,
                                     res_scale, res_bias, N, D, accumulate_g, accumulate_dres);
    ZAYA_CUDA_LAUNCHED();
    const ParamGrads grads{{dw, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias}};
    add_partials_kernel<<<blocks_for(kParamGrads * D, 256), 256, 0, launch_stream()>>>(grads, partial, blocks, D);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
