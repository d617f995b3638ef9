// CCA's forward chain in one kernel (ops/cuda/cca.h cca_conv_qk_forward): depthwise conv → grouped conv → q-k mean
// → QK-norm → RoPE; and the backward of its last three steps in one (cca_qk_backward). A block owns a tile of kTile tokens of one sequence and one KV group (its g query heads and its
// key head: everything the mean and the norms couple), so nothing but the saved activations goes through memory.
// The grouped conv is a small GEMM per head: the block stages the depthwise rows of the tile and chunks of the
// head's weights in shared memory (rows padded against bank conflicts), so each weight is read once per tile, not
// once per token, and reads the depthwise rows four channels at a time.
#include "core/error.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/launch.cuh"

#include <algorithm>
#include <cfloat>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 128;           // 4 warps; in the conv, thread = output channel (a pass per 128 channels)
constexpr int kWarps = kThreads / 32;
constexpr int64_t kTile = 16;           // tokens per block
constexpr int64_t kChunk = 32;          // input channels per staged weight chunk
// A staged weight chunk's rows (one per input channel) are kThreads + 1 floats apart: its staging writes, whose
// consecutive threads take consecutive input channels, then fall in different banks (at kThreads apart all 32 lanes
// of a warp hit one bank, a 32-way conflict on every store).
constexpr int64_t kWsRow = kThreads + 1;

struct ChainArgs {
    float *o, *p, *q, *k, *qn, *kn;
    const float *z;
    const int64_t *ss;
    const float *wd, *bd, *wg, *bg, *temp, *cos_t, *sin_t;
    int64_t C, hd, k0, k1, nq, nkv, half; // half = rot/2: pairs (i, i + half), i < half, rotate
    float scale;                          // √hd
};

// Dynamic shared memory: the tile's depthwise rows [kTile + k1 − 1, hd], a weight chunk [kChunk, kWsRow], one
// row buffer [hd] per warp (without the conv: the row buffers alone).
size_t shared_floats(int64_t hd, int64_t k1, bool conv = true) {
    return size_t((conv ? (kTile + k1 - 1) * hd + kChunk * kWsRow : 0) + kWarps * hd);
}

__device__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Grid: (token tile, KV group j, sequence b). (Launch bounds with a minimum of one block per SM: without it ptxas
// held the kernel to 96 registers and spilled the accumulators.) kConv false: the conv output o is already there
// (cca_conv_forward_bf16); the chain from the mean on.
template <bool kConv> __global__ void __launch_bounds__(kThreads, 1) cca_chain_kernel(ChainArgs a) {
    await_previous_kernel();
    extern __shared__ float smem[];
    const int64_t C = a.C, hd = a.hd, k0 = a.k0, k1 = a.k1, g = a.nq / a.nkv, j = blockIdx.y, b = blockIdx.z;
    const int64_t t0 = a.ss[b], T = a.ss[b + 1] - t0, p0 = t0 + b * (k1 - 1); // first z and p rows of sequence b
    const int64_t ts = int64_t(blockIdx.x) * kTile, te = min(ts + kTile, T);   // tokens [ts, te) of the sequence
    // Tile 0 always runs: it writes the sequence's padding rows of p, even for an empty sequence.
    if (ts >= T && blockIdx.x != 0) return;
    const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
    float *ps = smem, *ws = ps + (kTile + k1 - 1) * hd;
    float *row = (kConv ? ws + kChunk * kWsRow : smem) + warp * hd;
    // Local p rows [ts, te + k1 − 1) feed the tile; this block writes those of its positions [ts, te) and, tile 0,
    // the padding rows before position 0.
    const int64_t prow0 = ts, prows = max(te, ts) - ts + k1 - 1, own0 = blockIdx.x == 0 ? 0 : ts + k1 - 1;

    for (int64_t hh = 0; kConv && hh <= g; ++hh) {
        const int64_t g0 = (hh < g ? j * g + hh : a.nq + j) * hd; // the head's channels: conv group = head
        // Depthwise: ps[r − prow0][i] = p[local row r][g0 + i] (as the unfused kernel, position r − (k1 − 1)).
        for (int64_t e = tid; e < prows * hd; e += kThreads) {
            const int64_t r = prow0 + e / hd, c = g0 + e % hd, pos = r - (k1 - 1);
            float acc = a.bd[c];
            for (int64_t i = 0; i < k0; ++i) {
                const int64_t t = pos - (k0 - 1) + i;
                if (t < 0) continue; // zero padding
                acc += a.wd[c * k0 + i] * a.z[(t0 + t) * C + c];
            }
            ps[e] = acc;
            if (r >= own0) a.p[(p0 + r) * C + c] = acc;
        }
        __syncthreads();
        // Grouped conv: o[t][g0 + oc] = bg + Σ_τ Σ_i wg[(g0 + oc, i, τ)]·p[local row t + τ][g0 + i].
        for (int64_t oc0 = 0; oc0 < hd; oc0 += kThreads) {
            const int64_t oc = oc0 + tid;
            float acc[kTile];
#pragma unroll
            for (int64_t tt = 0; tt < kTile; ++tt) acc[tt] = oc < hd ? a.bg[g0 + oc] : 0.0f;
            for (int64_t tau = 0; tau < k1; ++tau)
                for (int64_t i0 = 0; i0 < hd; i0 += kChunk) {
                    const int64_t ni = min(kChunk, hd - i0);
                    for (int64_t e = tid; e < ni * kThreads; e += kThreads) { // ws[ic][ocl]
                        const int64_t ocl = e / ni, ic = e % ni;
                        ws[ic * kWsRow + ocl] =
                            oc0 + ocl < hd ? a.wg[((g0 + oc0 + ocl) * hd + i0 + ic) * k1 + tau] : 0.0f;
                    }
                    __syncthreads();
                    int64_t ic = 0;
                    // Four input channels per step where the rows allow (hd a multiple of 4: 16-byte aligned): one
                    // float4 read of the depthwise row (the same for every thread: a broadcast) feeds four FMAs,
                    // added in the same order as one channel at a time.
                    if (hd % 4 == 0)
                        for (; ic + 4 <= ni; ic += 4) {
                            const float w0 = ws[ic * kWsRow + tid], w1 = ws[(ic + 1) * kWsRow + tid];
                            const float w2 = ws[(ic + 2) * kWsRow + tid], w3 = ws[(ic + 3) * kWsRow + tid];
#pragma unroll
                            for (int64_t tt = 0; tt < kTile; ++tt) {
                                const float4 pv = *reinterpret_cast<const float4 *>(ps + (tt + tau) * hd + i0 + ic);
                                acc[tt] += w0 * pv.x;
                                acc[tt] += w1 * pv.y;
                                acc[tt] += w2 * pv.z;
                                acc[tt] += w3 * pv.w;
                            }
                        }
                    for (; ic < ni; ++ic) {
                        const float w = ws[ic * kWsRow + tid];
#pragma unroll
                        for (int64_t tt = 0; tt < kTile; ++tt) acc[tt] += w * ps[(tt + tau) * hd + i0 + ic];
                    }
                    __syncthreads(); // ws is restaged next
                }
#pragma unroll
            for (int64_t tt = 0; tt < kTile; ++tt) // (rows past the sequence's end computed garbage: not written)
                if (oc < hd && tt < te - ts) a.o[(t0 + ts + tt) * C + g0 + oc] = acc[tt];
        }
        __syncthreads(); // ps is refilled for the next head
    }
    // (__syncthreads makes the block's global writes of o visible to the whole block.)

    // Mean, norm, RoPE: one warp per (token, head) row; rows in rounds so every warp meets the same barriers.
    const int64_t Dq = a.nq * hd, rows = (te > ts ? te - ts : 0) * (g + 1);
    for (int64_t r0 = 0; r0 < rows; r0 += kWarps) {
        const int64_t r = r0 + warp;
        const bool active = r < rows;
        const int64_t n = t0 + ts + (active ? r / (g + 1) : 0), hh = active ? r % (g + 1) : 0;
        const float *zq = a.z + n * C, *zk = zq + Dq, *oq = a.o + n * C, *ok = oq + Dq;
        float ss = 0.0f;
        for (int64_t d = lane; active && d < hd; d += 32) {
            float v;
            if (hh < g) { // q head h = o_q + (z_q + z_k[j])/2
                const int64_t h = j * g + hh;
                v = oq[h * hd + d] + (zq[h * hd + d] + zk[j * hd + d]) * 0.5f;
            } else { // k head j = o_k + the group's mean of the same terms
                float m = 0.0f;
                for (int64_t h = j * g; h < (j + 1) * g; ++h) m += (zq[h * hd + d] + zk[j * hd + d]) * 0.5f;
                v = ok[j * hd + d] + m / float(g);
            }
            row[d] = v;
            ss += v * v;
        }
        const float nrm = fmaxf(sqrtf(warp_sum(ss)), FLT_EPSILON); // torch.finfo(float32).eps, as transformers
        const float f = a.scale / nrm, t = hh < g ? 1.0f : a.temp[j];
        __syncthreads(); // row[] complete before lanes read each other's entries
        if (active) {
            const bool is_q = hh < g;
            const int64_t head = is_q ? n * a.nq + j * g + hh : n * a.nkv + j; // row of q[N·nq] or k[N·nkv]
            float *out = (is_q ? a.q : a.k) + head * hd;
            if (lane == 0) (is_q ? a.qn : a.kn)[head] = nrm;
            const auto normed = [&](int64_t d) { return is_q ? row[d] * f : row[d] * f * t; };
            for (int64_t i = lane; i < a.half; i += 32) {
                const float c = a.cos_t[n * a.half + i], s = a.sin_t[n * a.half + i];
                const float x0 = normed(i), x1 = normed(i + a.half);
                out[i] = x0 * c - x1 * s;
                out[i + a.half] = x1 * c + x0 * s;
            }
            for (int64_t d = 2 * a.half + lane; d < hd; d += 32) out[d] = normed(d);
        }
        __syncthreads(); // row[] is rewritten next round
    }
}

// Backward of the mean → norm → RoPE part, one block per (token n, KV group j), one warp per head of the group
// (g query heads, then the key head). Each warp rotates its head's gradient back, recomputes the pre-norm vector
// from the saved conv output and z, and differentiates the norm; the block then splits the group's gradients into
// the conv output's and the mean path's shares.
// Up to 1024 threads (32 per head of a KV group): the bound keeps the compiler's register use launchable at that
// width.
__global__ void __launch_bounds__(1024)
    cca_qk_backward_kernel(float *dconv, float *dz, double *dtemp_rows, const float *dq, const float *dk,
                           const float *o, const float *z, const float *qn, const float *kn, const float *temp,
                           const float *cos_t, const float *sin_t, int64_t nq, int64_t nkv, int64_t hd, int64_t half,
                           float scale) {
    extern __shared__ float smem[]; // [g + 1, hd]: each head's gradient w.r.t. its pre-norm vector
    __shared__ double dt_lanes[32];
    const int64_t n = blockIdx.x, j = blockIdx.y, g = nq / nkv, C = (nq + nkv) * hd, Dq = nq * hd;
    const int lane = int(threadIdx.x) % 32;
    const int64_t hh = threadIdx.x / 32;
    const bool is_q = hh < g;
    const int64_t head = is_q ? n * nq + j * g + hh : n * nkv + j; // row of dq[N·nq] or dk[N·nkv]
    const float *d_out = (is_q ? dq : dk) + head * hd;
    const float *zq = z + n * C, *zk = zq + Dq, *oq = o + n * C, *ok = oq + Dq;
    float *d = smem + hh * hd;
    // RoPE backward (rotation by −θ): gradient w.r.t. the normalised vector.
    for (int64_t i = lane; i < half; i += 32) {
        const float c = cos_t[n * half + i], sn = -sin_t[n * half + i];
        const float a = d_out[i], b = d_out[i + half];
        d[i] = a * c - b * sn;
        d[i + half] = b * c + a * sn;
    }
    for (int64_t i = 2 * half + lane; i < hd; i += 32) d[i] = d_out[i];
    // The pre-norm entries this lane owns (recomputed as the forward computed them) and the norm's dot products.
    const auto pre = [&](int64_t i) {
        if (is_q) {
            const int64_t h = j * g + hh;
            return oq[h * hd + i] + (zq[h * hd + i] + zk[j * hd + i]) * 0.5f;
        }
        float m = 0.0f;
        for (int64_t h = j * g; h < (j + 1) * g; ++h) m += (zq[h * hd + i] + zk[j * hd + i]) * 0.5f;
        return ok[j * hd + i] + m / float(g);
    };
    const float nrm = (is_q ? qn : kn)[head];
    float udy = 0.0f;
    double dt = 0.0;
    __syncthreads(); // d[] complete: lanes read entries other lanes rotated
    for (int64_t i = lane; i < hd; i += 32) {
        const float x = pre(i);
        udy += x / nrm * d[i];
        if (!is_q) dt += double(d[i]) * double(scale * x / nrm);
    }
    for (int off = 16; off > 0; off >>= 1) udy += __shfl_xor_sync(0xffffffffu, udy, off);
    if (!is_q) dt_lanes[lane] = dt; // the key warp's lanes; summed in lane order below
    const float f = (is_q ? 1.0f : temp[j]) * scale / nrm;
    const bool clamped = nrm <= FLT_EPSILON;
    __syncthreads();
    for (int64_t i = lane; i < hd; i += 32) d[i] = f * (clamped ? d[i] : d[i] - pre(i) / nrm * udy);
    if (!is_q && lane == 0) {
        double total = 0.0;
        for (int l = 0; l < 32; ++l) total += dt_lanes[l];
        dtemp_rows[n * nkv + j] = total;
    }
    __syncthreads();
    // q[h] = o_q[h] + (z_q[h] + z_k[j])/2, k[j] = o_k[j] + mean_h of the same: dconv = dq‖dk, dz the mean path's.
    float *dc = dconv + n * C, *dzq = dz + n * C, *dzk = dzq + Dq;
    const float *dkp = smem + g * hd;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
        const float dkj = dkp[i] / float(2 * g);
        float acc = 0.0f;
        for (int64_t h = 0; h < g; ++h) {
            const float dqh = smem[h * hd + i];
            dc[(j * g + h) * hd + i] = dqh;
            const float m = 0.5f * dqh + dkj;
            dzq[(j * g + h) * hd + i] = m;
            acc += m;
        }
        dc[Dq + j * hd + i] = dkp[i];
        dzk[j * hd + i] = acc;
    }
}

bool fusable(int64_t hd, int64_t k1) { return shared_floats(hd, k1) * sizeof(float) <= 48 * 1024; }

// Whether cca_qk_backward_kernel's dynamic shared memory ([g + 1, hd] floats) fits a launch without opting in: the
// 48 KiB hold static and dynamic together, and the kernel has dt_lanes (32 doubles) of its own.
bool qk_backward_fits(int64_t g, int64_t hd) {
    return size_t((g + 1) * hd) * sizeof(float) + 32 * sizeof(double) <= 48 * 1024;
}

} // namespace

void cca_conv_qk_forward(float *o, float *p, float *q, float *k, float *qn, float *kn, const float *z,
                         const VarlenBatch &batch, const ConvShape &s, const float *wd, const float *bd,
                         const float *wg, const float *bg, const float *temp, const float *cos_t, const float *sin_t,
                         int64_t nq, int64_t nkv, int64_t rot, const uint16_t *wg16) {
    const int64_t hd = s.C / s.groups;
    if (s.groups != nq + nkv || nkv <= 0 || nq % nkv != 0)
        fail("cca_conv_qk_forward: {} conv groups for {} query and {} key heads", s.groups, nq, nkv);
    if (wg16) cca_conv_forward_bf16(o, p, z, batch, s, wd, bd, wg16, bg); // then the chain without its conv
    if (!fusable(hd, s.k1)) { // a tile too large for shared memory: the unfused chain
        if (!wg16) cca_conv_forward(o, p, z, batch, s, wd, bd, wg, bg);
        cca_qk_mean_forward(q, k, o, z, batch.N, nq, nkv, hd);
        cca_qk_norm_forward(q, k, qn, kn, temp, batch.N, nq, nkv, hd);
        rope_forward(q, cos_t, sin_t, batch.N, nq, hd, rot);
        return rope_forward(k, cos_t, sin_t, batch.N, nkv, hd, rot);
    }
    if (batch.B == 0) return;
    if (batch.B > 65535 || nkv > 65535)
        fail("cca_conv_qk_forward: {} sequences, {} KV heads exceed the grid", batch.B, nkv);
    const ChainArgs a{o,   p,   q,    k,    qn,   kn, z,   batch.seq_start, wd,      bd,
                      wg,  bg,  temp, cos_t, sin_t, s.C, hd, s.k0,          s.k1,    nq,
                      nkv, rot / 2, sqrtf(float(hd))};
    const unsigned tiles = unsigned(std::max<int64_t>(1, (batch.max_len + kTile - 1) / kTile));
    const dim3 grid(tiles, unsigned(nkv), unsigned(batch.B));
    if (wg16) launch_kernel(cca_chain_kernel<false>, grid, kThreads, shared_floats(hd, s.k1, false) * sizeof(float), a);
    else launch_kernel(cca_chain_kernel<true>, grid, kThreads, shared_floats(hd, s.k1) * sizeof(float), a);
}

void cca_qk_backward(float *dconv, float *dz, float *dtemp, float *dq, float *dk, float *q_pre, float *k_pre,
                     const float *conv, const float *z, const float *qn, const float *kn, const float *temp,
                     const float *cos_t, const float *sin_t, int64_t N, int64_t nq, int64_t nkv, int64_t hd,
                     int64_t rot) {
    if (nkv <= 0 || nq % nkv != 0) fail("cca_qk_backward: {} query heads for {} key heads", nq, nkv);
    const int64_t threads = 32 * (nq / nkv + 1);
    if (threads > 1024 || !qk_backward_fits(nq / nkv, hd)) { // the unfused chain
        rope_backward(dq, cos_t, sin_t, N, nq, hd, rot);
        rope_backward(dk, cos_t, sin_t, N, nkv, hd, rot);
        cca_qk_mean_forward(q_pre, k_pre, conv, z, N, nq, nkv, hd);
        cca_qk_norm_backward(dq, dk, dtemp, q_pre, k_pre, qn, kn, temp, N, nq, nkv, hd);
        return cca_qk_mean_backward(dconv, dz, dq, dk, N, nq, nkv, hd);
    }
    if (N == 0) return;
    if (nkv > 65535) fail("cca_qk_backward: {} KV heads exceed the grid", nkv);
    auto *dtemp_rows = static_cast<double *>(device_scratch(Scratch::CcaTempRows, size_t(N * nkv) * sizeof(double)));
    cca_qk_backward_kernel<<<dim3(unsigned(N), unsigned(nkv)), unsigned(threads),
                             size_t((nq / nkv + 1) * hd) * sizeof(float)>>>(dconv, dz, dtemp_rows, dq, dk, conv, z, qn,
                                                                            kn, temp, cos_t, sin_t, nq, nkv, hd,
                                                                            rot / 2, sqrtf(float(hd)));
    ZAYA_CUDA_LAUNCHED();
    add_temp_grads(dtemp, dtemp_rows, N, nkv);
}

} // namespace zaya::cuda
