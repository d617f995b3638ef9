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
                    const real corr = std::exp(row_max[size_t(r)] - m);
                    row_max[size_t(r)] = m;
                    real *ar = acc.data() + r * hd;
                    real sum = row_sum[size_t(r)] * corr;
#pragma omp simd
                    for (int64_t d = 0; d < hd; ++d) ar[d] *= corr;
                    for (int64_t c = c_begin; c < c_end; ++c) {
                        const real pr = std::exp(sr[c] - m);
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
        for (int64_t d = 0; d < hd; ++d) acc += dout[r * hd + d] * out[r * hd + d];
        rd[r] = acc;
    }
}

// Is key tk visible from query tq?
inline bool visible(int64_t tq, int64_t tk, int64_t window) { return tk <= tq && (window <= 0 || tk > tq - window); }

} // namespace

void attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *out, const real *lse,
                        const real *q, const real *k, const real *v, const int64_t *seq_start, int64_t B,
                        const AttnShape &s) {
    ZAYA_PROFILE("attention_backward");
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, group = nq / nkv;
    const int64_t N = seq_start[B];
    std::vector<real> rd(size_t(N * nq));
    attention_row_dots(rd.data(), dout, out, N, nq, hd);

    // Pass 1 — dq: for each (query row, head), dq = scale · Σ_k P(dP − D)·k over visible keys.
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t item = 0; item < N * nq; ++item) {
        const int64_t n = item / nq, h = item % nq, j = h / group;
        const int64_t b = std::upper_bound(seq_start, seq_start + B + 1, n) - seq_start - 1;
        const int64_t t0 = seq_start[b], tq = n - t0;
        const int64_t lo = s.window > 0 ? std::max<int64_t>(0, tq - s.window + 1) : 0;
        const real *qr = q + (n * nq + h) * hd, *dor = dout + (n * nq + h) * hd;
        real *dqr = dq + (n * nq + h) * hd;
        std::fill(dqr, dqr + hd, real(0));
        const real l = lse[n * nq + h], dd = rd[size_t(n * nq + h)];
        for (int64_t tk = lo; tk <= tq; ++tk) {
            const real *kr = k + ((t0 + tk) * nkv + j) * hd, *vr = v + ((t0 + tk) * nkv + j) * hd;
            real sc = 0, dp = 0;
#pragma omp simd reduction(+ : sc, dp)
            for (int64_t d = 0; d < hd; ++d) sc += qr[d] * kr[d], dp += dor[d] * vr[d];
            const real ds = std::exp(sc * s.scale - l) * (dp - dd) * s.scale;
#pragma omp simd
            for (int64_t d = 0; d < hd; ++d) dqr[d] += ds * kr[d];
        }
    }

    // Pass 2 — dk, dv: for each (key row, kv head), sum over the query heads of its group and visible queries.
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t item = 0; item < N * nkv; ++item) {
        const int64_t n = item / nkv, j = item % nkv;
        const int64_t b = std::upper_bound(seq_start, seq_start + B + 1, n) - seq_start - 1;
        const int64_t t0 = seq_start[b], T = seq_start[b + 1] - t0, tk = n - t0;
        const int64_t hi = s.window > 0 ? std::min<int64_t>(T - 1, tk + s.window - 1) : T - 1;
        const real *kr = k + (n * nkv + j) * hd, *vr = v + (n * nkv + j) * hd;
        real *dkr = dk + (n * nkv + j) * hd, *dvr = dv + (n * nkv + j) * hd;
        std::fill(dkr, dkr + hd, real(0));
        std::fill(dvr, dvr + hd, real(0));
        for (int64_t h = j * group; h < (j + 1) * group; ++h)
            for (int64_t tq = tk; tq <= hi; ++tq) {
                if (!visible(tq, tk, s.window)) continue;
                const int64_t m = t0 + tq;
                const real *qr = q + (m * nq + h) * hd, *dor = dout + (m * nq + h) * hd;
                real sc = 0, dp = 0;
#pragma omp simd reduction(+ : sc, dp)
                for (int64_t d = 0; d < hd; ++d) sc += qr[d] * kr[d], dp += dor[d] * vr[d];
                const real pr = std::exp(sc * s.scale - lse[m * nq + h]);
                const real ds = pr * (dp - rd[size_t(m * nq + h)]) * s.scale;
#pragma omp simd
                for (int64_t d = 0; d < hd; ++d) dvr[d] += pr * dor[d], dkr[d] += ds * qr[d];
            }
    }
}

} // namespace zaya::cpu
