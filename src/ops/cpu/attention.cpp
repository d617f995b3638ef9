#include "ops/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace zaya::cpu {

namespace {
constexpr int64_t kTileQ = 32;
constexpr int64_t kTileK = 64;
} // namespace

void attention_forward(float *out, float *lse, const float *q, const float *k, const float *v, const int64_t *seq_start,
                       int64_t B, const AttnShape &s) {
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, group = nq / nkv;
    // Work items: (sequence, query tile, head); flattened so OpenMP balances long and short sequences.
    std::vector<int64_t> tile_start(size_t(B + 1), 0);
    for (int64_t b = 0; b < B; ++b)
        tile_start[size_t(b + 1)] = tile_start[size_t(b)] + (seq_start[b + 1] - seq_start[b] + kTileQ - 1) / kTileQ;
    const int64_t items = tile_start[size_t(B)] * nq;

#pragma omp parallel
    {
        std::vector<float> scores(size_t(kTileQ * kTileK)), acc(size_t(kTileQ * hd)), row_max(kTileQ), row_sum(kTileQ);
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < items; ++item) {
            const int64_t h = item % nq, tile = item / nq;
            const int64_t b = std::upper_bound(tile_start.begin(), tile_start.end(), tile) - tile_start.begin() - 1;
            const int64_t t0 = seq_start[b], T = seq_start[b + 1] - t0;
            const int64_t qa = (tile - tile_start[size_t(b)]) * kTileQ, qb = std::min(qa + kTileQ, T);
            const int64_t rows = qb - qa, j = h / group;
            std::fill(acc.begin(), acc.begin() + rows * hd, 0.0f);
            std::fill(row_max.begin(), row_max.end(), -std::numeric_limits<float>::infinity());
            std::fill(row_sum.begin(), row_sum.end(), 0.0f);
            // Keys this tile can see: [lo, qb) — causal, and within the sliding window of its first row.
            const int64_t lo = s.window > 0 ? std::max<int64_t>(0, qa - s.window + 1) : 0;
            for (int64_t ka = lo; ka < qb; ka += kTileK) {
                const int64_t kb = std::min(ka + kTileK, qb), cols = kb - ka;
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t tq = qa + r;
                    const float *qr = q + ((t0 + tq) * nq + h) * hd;
                    float *sr = scores.data() + r * kTileK;
                    float m = row_max[size_t(r)];
                    for (int64_t c = 0; c < cols; ++c) {
                        const int64_t tk = ka + c;
                        if (tk > tq || (s.window > 0 && tk <= tq - s.window)) {
                            sr[c] = -std::numeric_limits<float>::infinity();
                            continue;
                        }
                        const float *kr = k + ((t0 + tk) * nkv + j) * hd;
                        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
                        for (int64_t d = 0; d < hd; ++d) dot += qr[d] * kr[d];
                        sr[c] = dot * s.scale;
                        m = std::max(m, sr[c]);
                    }
                    if (m == -std::numeric_limits<float>::infinity()) continue; // nothing visible yet
                    // Online softmax: rescale what was accumulated under the old max.
                    const float corr = std::exp(row_max[size_t(r)] - m);
                    row_max[size_t(r)] = m;
                    float *ar = acc.data() + r * hd;
                    float sum = row_sum[size_t(r)] * corr;
                    for (int64_t d = 0; d < hd; ++d) ar[d] *= corr;
                    for (int64_t c = 0; c < cols; ++c) {
                        if (sr[c] == -std::numeric_limits<float>::infinity()) continue;
                        const float pr = std::exp(sr[c] - m);
                        sum += pr;
                        const float *vr = v + ((t0 + ka + c) * nkv + j) * hd;
#pragma omp simd
                        for (int64_t d = 0; d < hd; ++d) ar[d] += pr * vr[d];
                    }
                    row_sum[size_t(r)] = sum;
                }
            }
            for (int64_t r = 0; r < rows; ++r) {
                const int64_t n = t0 + qa + r;
                const float inv = 1.0f / row_sum[size_t(r)];
                float *orow = out + (n * nq + h) * hd;
                const float *ar = acc.data() + r * hd;
                for (int64_t d = 0; d < hd; ++d) orow[d] = ar[d] * inv;
                if (lse) lse[n * nq + h] = row_max[size_t(r)] + std::log(row_sum[size_t(r)]);
            }
        }
    }
}

} // namespace zaya::cpu
