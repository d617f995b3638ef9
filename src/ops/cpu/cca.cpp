#include "core/profile.h"
#include "ops/cpu/cca.h"

#include "ops/cpu/gemm.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

namespace zaya::cpu {

void cca_conv_forward(real *o, real *p, const real *z, const int64_t *seq_start, int64_t B, const ConvShape &s,
                      const real *wd, const real *bd, const real *wg, const real *bg) {
    ZAYA_PROFILE("cca_conv");
    const int64_t C = s.C, k0 = s.k0, k1 = s.k1, hd = C / s.groups;
    // Depthwise conv: p_j = bd + Σ_i wd[i]·z̃_{j−(k0−1)+i}, for j = −(k1−1) … T−1; z̃ is zero before t = 0.
    for (int64_t b = 0; b < B; ++b) {
        const int64_t t0 = seq_start[b], T = seq_start[b + 1] - t0;
        const real *zs = z + t0 * C;
        real *ps = p + (t0 + b * (k1 - 1)) * C;
#pragma omp parallel for schedule(static)
        for (int64_t j = -(k1 - 1); j < T; ++j) {
            real *pr = ps + (j + k1 - 1) * C;
            for (int64_t c = 0; c < C; ++c) pr[c] = bd[c];
            for (int64_t i = 0; i < k0; ++i) {
                int64_t t = j - (k0 - 1) + i;
                if (t < 0) continue;
                const real *zr = zs + t * C;
                for (int64_t c = 0; c < C; ++c) pr[c] += wd[c * k0 + i] * zr[c];
            }
        }
    }
    // Grouped conv: per head γ and tap τ a [hd_out, hd_in] matrix; repack so each is contiguous for the GEMM.
    thread_local std::vector<real> packed;
    packed.resize(size_t(k1 * C * hd));
    for (int64_t tau = 0; tau < k1; ++tau)
        for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < hd; ++i) packed[size_t((tau * C + c) * hd + i)] = wg[(c * hd + i) * k1 + tau];
    for (int64_t b = 0; b < B; ++b) {
        const int64_t t0 = seq_start[b], T = seq_start[b + 1] - t0;
        if (T == 0) continue;
        real *os = o + t0 * C;
        const real *ps = p + (t0 + b * (k1 - 1)) * C;
        for (int64_t t = 0; t < T; ++t) std::copy(bg, bg + C, os + t * C);
        // o_t[γ] += W_τγ · p_{t−(k1−1)+τ}[γ]; row t−(k1−1)+τ of sequence b is row t+τ of ps.
        for (int64_t g = 0; g < s.groups; ++g)
            for (int64_t tau = 0; tau < k1; ++tau)
                gemm(false, true, T, hd, hd, 1.0f, ps + tau * C + g * hd, C, packed.data() + (tau * C + g * hd) * hd,
                     hd, 1.0f, os + g * hd, C);
    }
}

void cca_qk_mean_forward(real *q, real *k, const real *o, const real *z, int64_t N, int64_t nq, int64_t nkv,
                         int64_t hd) {
    ZAYA_PROFILE("cca_qk_mean");
    const int64_t C = (nq + nkv) * hd, Dq = nq * hd, g = nq / nkv;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *zq = z + n * C, *zk = zq + Dq;
        const real *oq = o + n * C, *ok = oq + Dq;
        real *qr = q + n * Dq, *kr = k + n * nkv * hd;
        for (int64_t j = 0; j < nkv; ++j) {
            for (int64_t d = 0; d < hd; ++d) kr[j * hd + d] = 0.0f;
            for (int64_t h = j * g; h < (j + 1) * g; ++h)
                for (int64_t d = 0; d < hd; ++d) {
                    real m = (zq[h * hd + d] + zk[j * hd + d]) * 0.5f;
                    qr[h * hd + d] = oq[h * hd + d] + m;
                    kr[j * hd + d] += m;
                }
            for (int64_t d = 0; d < hd; ++d) kr[j * hd + d] = ok[j * hd + d] + kr[j * hd + d] / real(g);
        }
    }
}

// x ← x·(scale/max(‖x‖, ε)) per head; returns the clamped norm.
static inline real l2_normalize(real *x, int64_t hd, real scale) {
    real ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t d = 0; d < hd; ++d) ss += x[d] * x[d];
    real nrm = std::max(std::sqrt(ss), real(FLT_EPSILON)); // torch.finfo(float32).eps, as transformers clamps
    real f = scale / nrm;
    for (int64_t d = 0; d < hd; ++d) x[d] *= f;
    return nrm;
}

void cca_qk_norm_forward(real *q, real *k, real *qn, real *kn, const real *temp, int64_t N, int64_t nq,
                         int64_t nkv, int64_t hd) {
    ZAYA_PROFILE("cca_qk_norm");
    const real scale = std::sqrt(real(hd));
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t h = 0; h < nq; ++h) qn[n * nq + h] = l2_normalize(q + (n * nq + h) * hd, hd, scale);
        for (int64_t j = 0; j < nkv; ++j) {
            real *kr = k + (n * nkv + j) * hd;
            kn[n * nkv + j] = l2_normalize(kr, hd, scale);
            for (int64_t d = 0; d < hd; ++d) kr[d] *= temp[j];
        }
    }
}

void rope_tables(real *cos_t, real *sin_t, const int32_t *pos, int64_t N, int64_t rot, double theta) {
    const int64_t half = rot / 2;
    std::vector<real> inv_freq(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) // 1 / θ^(2i/rot) in fp32, as transformers' default rope init computes it
        inv_freq[size_t(i)] = 1.0f / std::pow(real(theta), real(2 * i) / real(rot));
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < half; ++i) {
            real angle = real(pos[n]) * inv_freq[size_t(i)];
            cos_t[n * half + i] = real(std::cos(double(angle)));
            sin_t[n * half + i] = real(std::sin(double(angle)));
        }
}

void rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot) {
    ZAYA_PROFILE("rope");
    const int64_t half = rot / 2;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *c = cos_t + n * half, *s = sin_t + n * half;
        for (int64_t h = 0; h < H; ++h) {
            real *u = x + (n * H + h) * hd;
            for (int64_t i = 0; i < half; ++i) {
                real a = u[i], b = u[i + half];
                u[i] = a * c[i] - b * s[i];
                u[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

} // namespace zaya::cpu
