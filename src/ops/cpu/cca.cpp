#include "core/profile.h"
#include "ops/cpu/cca.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>

namespace zaya::cpu {

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

std::vector<float> rope_inv_freq(int64_t rot, double theta) {
    std::vector<float> inv_freq(static_cast<size_t>(rot / 2));
    for (int64_t i = 0; i < rot / 2; ++i) // 1 / θ^(2i/rot) in fp32, as transformers' default rope init computes it
        inv_freq[size_t(i)] = 1.0f / std::pow(float(theta), float(2 * i) / float(rot));
    return inv_freq;
}

void rope_tables(real *cos_t, real *sin_t, const int32_t *pos, int64_t N, int64_t rot, double theta) {
    const int64_t half = rot / 2;
    const std::vector<float> inv_freq = rope_inv_freq(rot, theta);
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < half; ++i) {
            real angle = real(pos[n]) * inv_freq[size_t(i)];
            cos_t[n * half + i] = real(std::cos(double(angle)));
            sin_t[n * half + i] = real(std::sin(double(angle)));
        }
}

namespace {
// x ← R(sign·θ)·x on the (i, i + rot/2) pairs of every head: the forward rotation, or (sign −1) its transpose.
void rope_rotate(real *x, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot,
                 real sign) {
    const int64_t half = rot / 2;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *c = cos_t + n * half, *s = sin_t + n * half;
        for (int64_t h = 0; h < H; ++h) {
            real *u = x + (n * H + h) * hd;
            for (int64_t i = 0; i < half; ++i) {
                const real a = u[i], b = u[i + half], sn = sign * s[i];
                u[i] = a * c[i] - b * sn;
                u[i + half] = b * c[i] + a * sn;
            }
        }
    }
}
} // namespace

void rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot) {
    ZAYA_PROFILE("rope");
    rope_rotate(x, cos_t, sin_t, N, H, hd, rot, real(1));
}

void cca_qk_mean_backward(real *dconv, real *dz, const real *dq, const real *dk, int64_t N, int64_t nq, int64_t nkv,
                          int64_t hd) {
    ZAYA_PROFILE("cca_qk_mean_backward");
    const int64_t C = (nq + nkv) * hd, Dq = nq * hd, g = nq / nkv;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        const real *dqr = dq + n * Dq, *dkr = dk + n * nkv * hd;
        real *dc = dconv + n * C, *dzq = dz + n * C, *dzk = dzq + Dq;
        std::copy(dqr, dqr + Dq, dc);
        std::copy(dkr, dkr + nkv * hd, dc + Dq);
        // q[h] = o_q[h] + (z_q[h] + z_k[j])/2 ;  k[j] = o_k[j] + (1/g)·Σ_h (z_q[h] + z_k[j])/2
        for (int64_t j = 0; j < nkv; ++j)
            for (int64_t d = 0; d < hd; ++d) {
                const real dkj = dkr[j * hd + d] / real(2 * g);
                real acc = 0;
                for (int64_t h = j * g; h < (j + 1) * g; ++h) {
                    const real m = real(0.5) * dqr[h * hd + d] + dkj; // gradient of the mean term m_q[h]
                    dzq[h * hd + d] = m;
                    acc += m;
                }
                dzk[j * hd + d] = acc;
            }
    }
}

void cca_qk_norm_backward(real *dq, real *dk, real *dtemp, const real *q_pre, const real *k_pre, const real *qn,
                          const real *kn, const real *temp, int64_t N, int64_t nq, int64_t nkv, int64_t hd) {
    ZAYA_PROFILE("cca_qk_norm_backward");
    const real scale = std::sqrt(real(hd));
    // y = s·x/n with n = max(‖x‖, ε): dx = (s/n)·(dy − u·(u·dy)), u = x/n, unless the clamp was active.
    auto back = [&](real *d, const real *x, real nrm, real factor) {
        const real clamp = real(FLT_EPSILON);
        real udy = 0;
        for (int64_t i = 0; i < hd; ++i) udy += x[i] / nrm * d[i];
        const real f = factor * scale / nrm;
        const bool clamped = nrm <= clamp;
        for (int64_t i = 0; i < hd; ++i) d[i] = f * (clamped ? d[i] : d[i] - x[i] / nrm * udy);
    };
    std::vector<double> dtemp_rows(size_t(N * nkv));
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        for (int64_t h = 0; h < nq; ++h) back(dq + (n * nq + h) * hd, q_pre + (n * nq + h) * hd, qn[n * nq + h], 1);
        for (int64_t j = 0; j < nkv; ++j) {
            real *d = dk + (n * nkv + j) * hd;
            const real *x = k_pre + (n * nkv + j) * hd;
            const real nrm = kn[n * nkv + j];
            // k̂ = T·s·x/n: dT = Σ dk̂·s·x/n
            double dt = 0;
            for (int64_t i = 0; i < hd; ++i) dt += double(d[i]) * double(scale * x[i] / nrm);
            dtemp_rows[size_t(n * nkv + j)] = dt;
            back(d, x, nrm, temp[j]);
        }
    }
    for (int64_t j = 0; j < nkv; ++j) {
        double acc = 0;
        for (int64_t n = 0; n < N; ++n) acc += dtemp_rows[size_t(n * nkv + j)];
        dtemp[j] += real(acc);
    }
}

void rope_backward(real *dx, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd, int64_t rot) {
    ZAYA_PROFILE("rope_backward");
    rope_rotate(dx, cos_t, sin_t, N, H, hd, rot, real(-1));
}

} // namespace zaya::cpu
