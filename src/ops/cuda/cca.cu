// CCA's elementwise pieces: q-k mean paths and RoPE one thread per output element group, QK-norm one thread per
// head row (hd is ~128: a short loop), each mirroring the arithmetic order of its cpu:: twin.
#include "ops/cuda/cca.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/column_sum.cuh"

#include <cfloat>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

// One thread per (token n, kv head j, dim d): the group's q heads h ∈ [j·g, (j+1)·g) and kv head j.
__global__ void qk_mean_forward_kernel(float *q, float *k, const float *o, const float *z, int64_t N, int64_t nq,
                                       int64_t nkv, int64_t hd) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * nkv * hd) return;
    const int64_t n = i / (nkv * hd), j = i / hd % nkv, d = i % hd;
    const int64_t C = (nq + nkv) * hd, Dq = nq * hd, g = nq / nkv;
    const float *zq = z + n * C, *zk = zq + Dq, *oq = o + n * C, *ok = oq + Dq;
    float acc = 0.0f;
    for (int64_t h = j * g; h < (j + 1) * g; ++h) {
        const float m = (zq[h * hd + d] + zk[j * hd + d]) * 0.5f;
        q[n * Dq + h * hd + d] = oq[h * hd + d] + m;
        acc += m;
    }
    k[(n * nkv + j) * hd + d] = ok[j * hd + d] + acc / float(g);
}

// One thread per (n, j, d), as the forward: q[h] = o_q[h] + (z_q[h] + z_k[j])/2, k[j] = o_k[j] + mean_h of the same.
__global__ void qk_mean_backward_kernel(float *dconv, float *dz, const float *dq, const float *dk, int64_t N,
                                        int64_t nq, int64_t nkv, int64_t hd) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * nkv * hd) return;
    const int64_t n = i / (nkv * hd), j = i / hd % nkv, d = i % hd;
    const int64_t C = (nq + nkv) * hd, Dq = nq * hd, g = nq / nkv;
    const float dkj_full = dk[(n * nkv + j) * hd + d];
    const float dkj = dkj_full / float(2 * g);
    float *dc = dconv + n * C, *dzq = dz + n * C, *dzk = dzq + Dq;
    float acc = 0.0f;
    for (int64_t h = j * g; h < (j + 1) * g; ++h) {
        const float dqh = dq[n * Dq + h * hd + d];
        dc[h * hd + d] = dqh;
        const float m = 0.5f * dqh + dkj; // gradient of the mean term of q head h
        dzq[h * hd + d] = m;
        acc += m;
    }
    dc[Dq + j * hd + d] = dkj_full;
    dzk[j * hd + d] = acc;
}

// Row `r` of the q heads (r < N·nq) or, after them, of the k heads: x ← scale·x/max(‖x‖, ε) (·temp[j] for keys).
__global__ void qk_norm_forward_kernel(float *q, float *k, float *qn, float *kn, const float *temp, int64_t N,
                                       int64_t nq, int64_t nkv, int64_t hd, float scale) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= N * (nq + nkv)) return;
    const bool is_q = r < N * nq;
    const int64_t row = is_q ? r : r - N * nq; // row of q[N·nq] or k[N·nkv]
    float *x = (is_q ? q : k) + row * hd;
    float ss = 0.0f;
    for (int64_t d = 0; d < hd; ++d) ss += x[d] * x[d];
    const float nrm = fmaxf(sqrtf(ss), FLT_EPSILON); // torch.finfo(float32).eps, as transformers clamps
    const float f = scale / nrm;
    for (int64_t d = 0; d < hd; ++d) x[d] *= f;
    if (is_q) {
        qn[row] = nrm;
    } else {
        const float t = temp[row % nkv];
        for (int64_t d = 0; d < hd; ++d) x[d] *= t;
        kn[row] = nrm;
    }
}

// The backward of y = factor·scale·x/n, n = max(‖x‖, ε), in place on d: (factor·scale/n)·(d − u·(u·d)), u = x/n,
// unless the clamp was active (then n is a constant).
__device__ void normalize_backward(float *d, const float *x, float nrm, float factor, float scale, int64_t hd) {
    float udy = 0.0f;
    for (int64_t i = 0; i < hd; ++i) udy += x[i] / nrm * d[i];
    const float f = factor * scale / nrm;
    const bool clamped = nrm <= FLT_EPSILON;
    for (int64_t i = 0; i < hd; ++i) d[i] = f * (clamped ? d[i] : d[i] - x[i] / nrm * udy);
}

// Rows as in the forward. Key rows also leave dT = Σ dk̂·scale·x/n in dtemp_rows[row] (double), before d changes.
__global__ void qk_norm_backward_kernel(float *dq, float *dk, double *dtemp_rows, const float *q_pre,
                                        const float *k_pre, const float *qn, const float *kn, const float *temp,
                                        int64_t N, int64_t nq, int64_t nkv, int64_t hd, float scale) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= N * (nq + nkv)) return;
    if (r < N * nq) {
        normalize_backward(dq + r * hd, q_pre + r * hd, qn[r], 1.0f, scale, hd);
        return;
    }
    const int64_t row = r - N * nq;
    float *d = dk + row * hd;
    const float *x = k_pre + row * hd;
    const float nrm = kn[row];
    double dt = 0.0;
    for (int64_t i = 0; i < hd; ++i) dt += double(d[i]) * double(scale * x[i] / nrm);
    dtemp_rows[row] = dt;
    normalize_backward(d, x, nrm, temp[row % nkv], scale, hd);
}

// x ← R(sign·θ)·x on the pairs (i, i + rot/2) of every head; one thread per (n, head, i < rot/2).
__global__ void rope_rotate_kernel(float *x, const float *cos_t, const float *sin_t, int64_t N, int64_t H,
                                   int64_t hd, int64_t rot, float sign) {
    const int64_t half = rot / 2;
    const int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (t >= N * H * half) return;
    const int64_t n = t / (H * half), h = t / half % H, i = t % half;
    float *u = x + (n * H + h) * hd;
    const float c = cos_t[n * half + i], sn = sign * sin_t[n * half + i];
    const float a = u[i], b = u[i + half];
    u[i] = a * c - b * sn;
    u[i + half] = b * c + a * sn;
}

void rope_rotate(float *x, const float *cos_t, const float *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot,
                 float sign) {
    const int64_t n = N * H * (rot / 2);
    if (n == 0) return;
    rope_rotate_kernel<<<blocks_for(n, kThreads), kThreads, 0, launch_stream()>>>(x, cos_t, sin_t, N, H, hd, rot, sign);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace

void cca_qk_mean_forward(float *q, float *k, const float *o, const float *z, int64_t N, int64_t nq, int64_t nkv,
                         int64_t hd) {
    const int64_t n = N * nkv * hd;
    if (n == 0) return;
    qk_mean_forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, launch_stream()>>>(q, k, o, z, N, nq, nkv, hd);
    ZAYA_CUDA_LAUNCHED();
}

void cca_qk_mean_backward(float *dconv, float *dz, const float *dq, const float *dk, int64_t N, int64_t nq,
                          int64_t nkv, int64_t hd) {
    const int64_t n = N * nkv * hd;
    if (n == 0) return;
    qk_mean_backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, launch_stream()>>>(dconv, dz, dq, dk, N, nq, nkv,
                                                                                       hd);
    ZAYA_CUDA_LAUNCHED();
}

void cca_qk_norm_forward(float *q, float *k, float *qn, float *kn, const float *temp, int64_t N, int64_t nq,
                         int64_t nkv, int64_t hd) {
    const int64_t rows = N * (nq + nkv);
    if (rows == 0) return;
    qk_norm_forward_kernel<<<blocks_for(rows, kThreads), kThreads, 0, launch_stream()>>>(q, k, qn, kn, temp, N, nq, nkv,
                                                                                         hd, sqrtf(float(hd)));
    ZAYA_CUDA_LAUNCHED();
}

void cca_qk_norm_backward(float *dq, float *dk, float *dtemp, const float *q_pre, const float *k_pre, const float *qn,
                          const float *kn, const float *temp, int64_t N, int64_t nq, int64_t nkv, int64_t hd) {
    const int64_t rows = N * (nq + nkv);
    if (rows == 0) return;
    // The per-token key-temperature gradients in grow-once scratch (as the fused cca_qk_backward's): no allocation,
    // and no wait for the device before a free.
    auto *dtemp_rows = static_cast<double *>(device_scratch(Scratch::CcaTempRows, size_t(N * nkv) * sizeof(double)));
    qk_norm_backward_kernel<<<blocks_for(rows, kThreads), kThreads, 0, launch_stream()>>>(
        dq, dk, dtemp_rows, q_pre, k_pre, qn, kn, temp, N, nq, nkv, hd, sqrtf(float(hd)));
    ZAYA_CUDA_LAUNCHED();
    add_temp_grads(dtemp, dtemp_rows, N, nkv);
}

void add_temp_grads(float *dtemp, const double *dtemp_rows, int64_t N, int64_t nkv) {
    column_sum_add<double>(dtemp, ColumnOf<double>{dtemp_rows, nkv}, N, nkv);
}

void rope_forward(float *x, const float *cos_t, const float *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot) {
    rope_rotate(x, cos_t, sin_t, N, H, hd, rot, 1.0f);
}

void rope_backward(float *dx, const float *cos_t, const float *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot) {
    rope_rotate(dx, cos_t, sin_t, N, H, hd, rot, -1.0f);
}

} // namespace zaya::cuda
