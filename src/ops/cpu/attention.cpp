#include "core/fastmath.h"
#include "core/profile.h"
#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace zaya::cpu {

namespace {
constexpr int64_t kTileQ = 64;
constexpr int64_t kTileK = 64;
} // namespace

void attention_forward(real *out, real *lse, const real *q, const real *k, const real *v, const int64_t *seq_start,
                       int64_t B, const AttnShape &s) {
    ZAYA_PROFILE("attention");
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, group = nq / nkv;
    // Work items: (sequence, query tile, head); flattened so OpenMP balances long and short sequences.
    std::vector<int64_t> tile_start(size_t(B + 1), 0);
    for (int64_t b = 0; b < B; ++b)
        tile_start[size_t(b + 1)] = tile_start[size_t(b)] + (seq_start[b + 1] - seq_start[b] + kTileQ - 1) / kTileQ;
    const int64_t items = tile_start[size_t(B)] * nq;

#pragma omp parallel
    {
        // Per-thread tiles: scores [kTileQ, kTileK], accumulator [kTileQ, hd], keys transposed [hd, kTileK] so the
        // score loop runs along keys (contiguous, vectorised) instead of reducing along hd for every key.
        std::vector<real> scores(size_t(kTileQ * kTileK)), acc(size_t(kTileQ * hd)), kt(size_t(hd * kTileK));
        std::vector<real> row_max(kTileQ), row_sum(kTileQ);
        constexpr real kNegInf = -std::numeric_limits<real>::infinity();
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < items; ++item) {
            const int64_t h = item % nq, tile = item / nq;
            const int64_t b = std::upper_bound(tile_start.begin(), tile_start.end(), tile) - tile_start.begin() - 1;
            const int64_t t0 = seq_start[b], T = seq_start[b + 1] - t0;
            const int64_t qa = (tile - tile_start[size_t(b)]) * kTileQ, qb = std::min(qa + kTileQ, T);
            const int64_t rows = qb - qa, j = h / group;
            std::fill(acc.begin(), acc.begin() + rows * hd, 0.0f);
            std::fill(row_max.begin(), row_max.end(), kNegInf);
            std::fill(row_sum.begin(), row_sum.end(), 0.0f);
            // Keys this tile can see: [lo, qb) — causal, and within the sliding window of its first row.
            const int64_t lo = s.window > 0 ? std::max<int64_t>(0, qa - s.window + 1) : 0;
            for (int64_t ka = lo; ka < qb; ka += kTileK) {
                const int64_t kb = std::min(ka + kTileK, qb), cols = kb - ka;
                for (int64_t c = 0; c < cols; ++c) {
                    const real *kr = k + ((t0 + ka + c) * nkv + j) * hd;
                    for (int64_t d = 0; d < hd; ++d) kt[size_t(d * kTileK + c)] = kr[d];
                }
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t tq = qa + r;
                    const real *qr = q + ((t0 + tq) * nq + h) * hd;
                    real *sr = scores.data() + r * kTileK;
                    std::fill(sr, sr + cols, 0.0f);
                    for (int64_t d = 0; d < hd; ++d) {
                        const real qd = qr[d] * s.scale;
                        const real *kd = kt.data() + d * kTileK;
#pragma omp simd
                        for (int64_t c = 0; c < cols; ++c) sr[c] += qd * kd[c];
                    }
                    // Visible keys of this row: tk ≤ tq and, with a window, tk > tq − window.
                    const int64_t c_end = std::min(cols, tq - ka + 1);
                    const int64_t c_begin = s.window > 0 ? std::max<int64_t>(0, tq - s.window + 1 - ka) : 0;
                    if (c_begin >= c_end) continue;
                    real m = row_max[size_t(r)];
                    for (int64_t c = c_begin; c < c_end; ++c) m = std::max(m, sr[c]);
                    // Online softmax: rescale what was accumulated under the old max.
                    const real corr = fast_exp(row_max[size_t(r)] - m);
                    row_max[size_t(r)] = m;
                    real *ar = acc.data() + r * hd;
                    real sum = row_sum[size_t(r)] * corr;
#pragma omp simd
                    for (int64_t d = 0; d < hd; ++d) ar[d] *= corr;
                    for (int64_t c = c_begin; c < c_end; ++c) {
                        const real pr = fast_exp(sr[c] - m);
                        sum += pr;
                        const real *vr = v + ((t0 + ka + c) * nkv + j) * hd;
#pragma omp simd
                        for (int64_t d = 0; d < hd; ++d) ar[d] += pr * vr[d];
                    }
                    row_sum[size_t(r)] = sum;
                }
            }
            for (int64_t r = 0; r < rows; ++r) {
                const int64_t n = t0 + qa + r;
                const real inv = 1.0f / row_sum[size_t(r)];
                real *orow = out + (n * nq + h) * hd;
                const real *ar = acc.data() + r * hd;
                for (int64_t d = 0; d < hd; ++d) orow[d] = ar[d] * inv;
                if (lse) lse[n * nq + h] = row_max[size_t(r)] + std::log(row_sum[size_t(r)]);
            }
        }
    }
}

namespace {

// Row-wise D_i = dO_i · O_i, the softmax-backward correction term.
void attention_row_dots(real *rd, const real *dout, const real *out, int64_t N, int64_t nq, int64_t hd) {
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N * nq; ++r) {
        real acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t d = 0; d < hd; ++d) acc += dout[r * hd + d] * out[r * hd + d];
        rd[r] = acc;
    }
}

// Copies rows [t0+ka, t0+kb) of head j of x[N,nkv,hd] into xt[hd, kTileK] (transposed, so that dot products with
// one query row run along keys).
void transpose_tile(real *xt, const real *x, int64_t t0, int64_t ka, int64_t kb, int64_t nkv, int64_t j, int64_t hd) {
    for (int64_t c = 0; c < kb - ka; ++c) {
        const real *xr = x + ((t0 + ka + c) * nkv + j) * hd;
        for (int64_t d = 0; d < hd; ++d) xt[d * kTileK + c] = xr[d];
    }
}

// For one query row against a key tile (transposed kt, vt): ds[c] = P·(dP − D)·scale and p[c] = P for visible
// keys c ∈ [c0, c1), 0 elsewhere.
void row_tile_grads(real *p, real *ds, const real *qr, const real *dor, const real *kt, const real *vt, int64_t cols,
                    int64_t c0, int64_t c1, int64_t hd, real scale, real lse, real dd) {
    real sc[kTileK], dp[kTileK];
    for (int64_t c = 0; c < cols; ++c) sc[c] = 0, dp[c] = 0;
    for (int64_t d = 0; d < hd; ++d) {
        const real qd = qr[d], gd = dor[d];
        const real *kd = kt + d * kTileK, *vd = vt + d * kTileK;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) sc[c] += qd * kd[c], dp[c] += gd * vd[c];
    }
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) {
        const bool vis = c >= c0 && c < c1;
        const real pr = vis ? fast_exp(sc[c] * scale - lse) : real(0);
        p[c] = pr;
        ds[c] = pr * (dp[c] - dd) * scale;
    }
}

} // namespace

void attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *out, const real *lse,
                        const real *q, const real *k, const real *v, const int64_t *seq_start, int64_t B,
                        const AttnShape &s) {
    ZAYA_PROFILE("attention_backward");
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, group = nq / nkv;
    const int64_t N = seq_start[B];
    std::vector<real> rd(size_t(N * nq));
    attention_row_dots(rd.data(), dout, out, N, nq, hd);
    // Tiles of every sequence (the same tiling serves queries in pass 1 and keys in pass 2).
    std::vector<int64_t> tile_start(size_t(B + 1), 0);
    for (int64_t b = 0; b < B; ++b)
        tile_start[size_t(b + 1)] = tile_start[size_t(b)] + (seq_start[b + 1] - seq_start[b] + kTileK - 1) / kTileK;
    const int64_t tiles = tile_start[size_t(B)];
    auto locate = [&](int64_t tile, int64_t &b, int64_t &t0, int64_t &T, int64_t &a0, int64_t &a1) {
        b = std::upper_bound(tile_start.begin(), tile_start.end(), tile) - tile_start.begin() - 1;
        t0 = seq_start[b];
        T = seq_start[b + 1] - t0;
        a0 = (tile - tile_start[size_t(b)]) * kTileK;
        a1 = std::min(a0 + kTileK, T);
    };

#pragma omp parallel
    {
        std::vector<real> kt(size_t(hd * kTileK)), vt(size_t(hd * kTileK));
        real p[kTileK], ds[kTileK];
        // Pass 1 — dq = scale·Σ_k P(dP − D)·k, one (query tile, head) per task.
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < tiles * nq; ++item) {
            const int64_t h = item % nq, j = h / group;
            int64_t b, t0, T, qa, qb;
            locate(item / nq, b, t0, T, qa, qb);
            for (int64_t tq = qa; tq < qb; ++tq) std::fill_n(dq + ((t0 + tq) * nq + h) * hd, hd, real(0));
            const int64_t lo = s.window > 0 ? std::max<int64_t>(0, qa - s.window + 1) : 0;
            for (int64_t ka = lo / kTileK * kTileK; ka < qb; ka += kTileK) {
                const int64_t kb = std::min(ka + kTileK, qb), cols = kb - ka;
                transpose_tile(kt.data(), k, t0, ka, kb, nkv, j, hd);
                transpose_tile(vt.data(), v, t0, ka, kb, nkv, j, hd);
                for (int64_t tq = qa; tq < qb; ++tq) {
                    const int64_t n = t0 + tq;
                    const int64_t c1 = std::min(cols, tq - ka + 1);
                    const int64_t c0 = s.window > 0 ? std::max<int64_t>(0, tq - s.window + 1 - ka) : 0;
                    if (c0 >= c1) continue;
                    row_tile_grads(p, ds, q + (n * nq + h) * hd, dout + (n * nq + h) * hd, kt.data(), vt.data(),
                                   cols, c0, c1, hd, s.scale, lse[n * nq + h], rd[size_t(n * nq + h)]);
                    real *dqr = dq + (n * nq + h) * hd;
                    for (int64_t c = c0; c < c1; ++c) {
                        const real *kr = k + ((t0 + ka + c) * nkv + j) * hd;
                        const real g = ds[c];
#pragma omp simd
                        for (int64_t d = 0; d < hd; ++d) dqr[d] += g * kr[d];
                    }
                }
            }
        }
        // Pass 2 — dv = Σ_q P·dO and dk = scale·Σ_q P(dP − D)·q over the group's heads, one (key tile, kv head)
        // per task, so each dk/dv row has exactly one writer.
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < tiles * nkv; ++item) {
            const int64_t j = item % nkv;
            int64_t b, t0, T, ka, kb;
            locate(item / nkv, b, t0, T, ka, kb);
            const int64_t cols = kb - ka;
            for (int64_t tk = ka; tk < kb; ++tk) {
                std::fill_n(dk + ((t0 + tk) * nkv + j) * hd, hd, real(0));
                std::fill_n(dv + ((t0 + tk) * nkv + j) * hd, hd, real(0));
            }
            transpose_tile(kt.data(), k, t0, ka, kb, nkv, j, hd);
            transpose_tile(vt.data(), v, t0, ka, kb, nkv, j, hd);
            // Queries that see any key of the tile: [ka, last) — causal, and bounded by the window.
            const int64_t last = s.window > 0 ? std::min<int64_t>(T, kb - 1 + s.window) : T;
            for (int64_t h = j * group; h < (j + 1) * group; ++h)
                for (int64_t tq = ka; tq < last; ++tq) {
                    const int64_t n = t0 + tq;
                    const int64_t c1 = std::min(cols, tq - ka + 1);
                    const int64_t c0 = s.window > 0 ? std::max<int64_t>(0, tq - s.window + 1 - ka) : 0;
                    if (c0 >= c1) continue;
                    const real *qr = q + (n * nq + h) * hd, *dor = dout + (n * nq + h) * hd;
                    row_tile_grads(p, ds, qr, dor, kt.data(), vt.data(), cols, c0, c1, hd, s.scale, lse[n * nq + h],
                                   rd[size_t(n * nq + h)]);
                    for (int64_t c = c0; c < c1; ++c) {
                        real *dvr = dv + ((t0 + ka + c) * nkv + j) * hd, *dkr = dk + ((t0 + ka + c) * nkv + j) * hd;
                        const real pc = p[c], gc = ds[c];
#pragma omp simd
                        for (int64_t d = 0; d < hd; ++d) dvr[d] += pc * dor[d], dkr[d] += gc * qr[d];
                    }
                }
        }
    }
}

void attention_cached(real *out, const real *q, const real *k, const real *v, int64_t n, int64_t p0,
                      const AttnShape &s) {
    ZAYA_PROFILE("attention_cached");
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, group = nq / nkv;
#pragma omp parallel
    {
        std::vector<real> scores(size_t(p0 + n)); // grows once per call and thread
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < n * nq; ++item) {
            const int64_t i = item / nq, h = item % nq, j = h / group, pos = p0 + i;
            const int64_t lo = s.window > 0 ? std::max<int64_t>(0, pos - s.window + 1) : 0;
            const real *qr = q + (i * nq + h) * hd;
            real m = -std::numeric_limits<real>::infinity();
            for (int64_t t = lo; t <= pos; ++t) {
                const real *kr = k + (t * nkv + j) * hd;
                real dot = 0;
#pragma omp simd reduction(+ : dot)
                for (int64_t d = 0; d < hd; ++d) dot += qr[d] * kr[d];
                scores[size_t(t)] = dot * s.scale;
                m = std::max(m, scores[size_t(t)]);
            }
            real sum = 0;
            real *o = out + (i * nq + h) * hd;
            std::fill(o, o + hd, real(0));
            for (int64_t t = lo; t <= pos; ++t) {
                const real p = std::exp(scores[size_t(t)] - m);
                sum += p;
                const real *vr = v + (t * nkv + j) * hd;
#pragma omp simd
                for (int64_t d = 0; d < hd; ++d) o[d] += p * vr[d];
            }
            const real inv = real(1) / sum;
            for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
        }
    }
}

} // namespace zaya::cpu
