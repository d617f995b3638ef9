// Causal GQA attention as block GEMMs (see attention.h). The g = nq/nkv query heads of one kv head are packed per
// query block into one matrix, rows (head, token): [g·rq, hd]. A block's scores for the whole group then come from
// one GEMM against the kv head's keys, read in place as a strided view (row stride nkv·hd), and so do P·V and the
// backward products. Blocks are bounded (query_block(g) × kBlockK*): scratch memory does not grow with the sequence.
#include "core/dtype.h"
#include "core/error.h"
#include "core/fastmath.h"
#include "core/parallel.h"
#include "core/profile.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/attention_rows.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/softmax_natural.h"
#include "ops/cpu/softmax_pow2.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <omp.h>
#include <type_traits>
#include <vector>

namespace zaya::cpu {

namespace {

constexpr int64_t kBlockKF = 256; // keys per block in the forward pass (online softmax across blocks)
constexpr int64_t kBlockKB = 256; // keys per block in the backward pass (a grid both of its modes share)

// Query tokens per block: g·query_block(g) = 64–128 packed rows. Measured (small preset, 1 thread): 32 tokens for
// g = 4 beat 64 by ~8%, less diagonal waste; with g = 1, 64 beat 32 by ~10%, longer GEMMs.
int64_t query_block(int64_t g) { return std::clamp<int64_t>(128 / g, 16, 64); }

// The first key position t sees: causal, and within the sliding window (HF convention: the window includes t).
int64_t first_key(int64_t t, int64_t window) { return window > 0 ? std::max<int64_t>(0, t - window + 1) : 0; }

// Sequence b's rows (SeqPrefix): its query at position t is row q0 + t of q, its key at position t row k0 + t of k
// and v; its queries are positions [pos0, end).
struct SeqRows {
    int64_t q0, k0, pos0, end;
};
SeqRows seq_rows(const int64_t *seq_start, int64_t b, const SeqPrefix *prefix) {
    const int64_t T = seq_start[b + 1] - seq_start[b], p0 = prefix ? prefix->first_position(b) : 0;
    const int64_t k0 = prefix && prefix->key_start ? prefix->key_start[b] : seq_start[b];
    return {seq_start[b] - p0, k0, p0, p0 + T};
}

// One unit of parallel work: sequence b, kv head j, and the query block or key block starting at a, or the whole
// sequence; work (query-key pairs) orders the tasks.
enum class Span : uint8_t { QueryBlock, KeyBlock, Sequence };
struct Task {
    int64_t b, j, a, work;
    Span span;
};

// Heaviest first, so that a dynamic schedule ends balanced; the order never changes results (one writer per row).
void sort_by_work(std::vector<Task> &tasks) {
    std::stable_sort(tasks.begin(), tasks.end(), [](const Task &x, const Task &y) { return x.work > y.work; });
}

// Query-key pairs a query block [qa, qb) computes: its visible keys span [first_key(qa), qb).
int64_t block_work(int64_t qa, int64_t qb, int64_t window) { return (qb - qa) * (qb - first_key(qa, window)); }

// x[N, nh, hd] rows (token, head) → packed[g·rq, hd] rows (head hh, token i) for heads h0 … h0+g−1 and tokens
// n0 … n0+rq−1.
void pack_group(real *packed, const real *x, int64_t n0, int64_t rq, int64_t nh, int64_t h0, int64_t g,
                int64_t hd) {
    for (int64_t hh = 0; hh < g; ++hh)
        for (int64_t i = 0; i < rq; ++i) {
            const real *src = x + ((n0 + i) * nh + h0 + hh) * hd;
            real *dst = packed + (hh * rq + i) * hd;
#pragma omp simd
            for (int64_t d = 0; d < hd; ++d) dst[d] = src[d];
        }
}

// The inverse of pack_group: packed[g·rq, hd] → x rows, scaled per row by mul (may be null: 1).
void unpack_group(real *x, const real *packed, const real *mul, int64_t n0, int64_t rq, int64_t nh, int64_t h0,
                  int64_t g, int64_t hd) {
    for (int64_t hh = 0; hh < g; ++hh)
        for (int64_t i = 0; i < rq; ++i) {
            const int64_t r = hh * rq + i;
            const real f = mul ? mul[r] : real(1);
            const real *src = packed + r * hd;
            real *dst = x + ((n0 + i) * nh + h0 + hh) * hd;
#pragma omp simd
            for (int64_t d = 0; d < hd; ++d) dst[d] = src[d] * f;
        }
}

} // namespace

namespace {

// The forward pass's two block products over keys and values of element KE. fp32 (real): S = scale·Q·Kᵀ [R, cols]
// for a packed query block qp [R, hd] and a key block (row stride ldk), and O += P·V [R, hd], by the SGEMM (which
// follows matmul_precision(), as training's attention does).
void block_scores(real *S, const real *qp, uint16_t *, int64_t R, int64_t cols, int64_t hd, real scale,
                  const real *kblk, int64_t ldk) {
    gemm(false, true, R, cols, hd, scale, qp, hd, kblk, ldk, real(0), S, kBlockKF);
}
void block_values(real *O, const real *P, const uint16_t *, int64_t R, int64_t cols, int64_t hd, const real *vblk,
                  int64_t ldk) {
    gemm(false, false, R, hd, cols, real(1), P, kBlockKF, vblk, ldk, real(1), O, hd);
}
#ifndef ZAYA_DOUBLE
// bf16 (a bf16 cache's rows, as stored; ops/cpu/attention.h): the queries rounded to bf16 (into qb [R, hd]) and the
// bf16 GEMM, S in log2 units (scale·log2 e); P·V from P rounded to bf16 (pb [R, kBlockKF]) by the bf16 GEMM —
// products exact in fp32, fp32 sums, what the decode path computes from the same rounded values.
void block_scores(float *S, const float *qp, uint16_t *qb, int64_t R, int64_t cols, int64_t hd, float scale,
                  const uint16_t *kblk, int64_t ldk) {
    f32_to_bf16_n(qp, qb, size_t(R * hd));
    gemm_bf16(false, true, R, cols, hd, scale * pow2::kLog2e, qb, hd, kblk, ldk, 0.0f, S, kBlockKF);
}
void block_values(float *O, const float *, const uint16_t *pb, int64_t R, int64_t cols, int64_t hd,
                  const uint16_t *vblk, int64_t ldk) {
    gemm_bf16(false, false, R, hd, cols, 1.0f, pb, kBlockKF, vblk, ldk, 1.0f, O, hd);
}
#endif

// attention_forward over keys of element KE: real, or uint16_t (bf16 bits; the fp32 build only).
template <class KE>
void forward_blocks(real *out, real *lse, const real *q, const KE *k, const KE *v, const int64_t *seq_start,
                    int64_t B, const AttnShape &s, const SeqPrefix *prefix) {
    constexpr bool kBf16 = std::is_same_v<KE, uint16_t>;
    ZAYA_ASSERT(!prefix || prefix->key_start || !prefix->pos0); // queries from a later position need their keys' rows
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, g = nq / nkv, ldk = nkv * hd;
    // Tasks (sequence, kv head, query block): each writes its own rows of out and lse, so any split is exact.
    const int64_t bq = query_block(g), R_max = g * bq;
    std::vector<Task> tasks;
    for (int64_t b = 0; b < B; ++b) {
        const SeqRows sr = seq_rows(seq_start, b, prefix);
        for (int64_t qa = sr.pos0; qa < sr.end; qa += bq)
            for (int64_t j = 0; j < nkv; ++j)
                tasks.push_back({b, j, qa, block_work(qa, std::min(qa + bq, sr.end), s.window), Span::QueryBlock});
    }
    sort_by_work(tasks);

    FirstError error; // a failing GEMM must not leave the region (core/parallel.h)
#pragma omp parallel
    {
        // Per-thread scratch, once per call: packed Q and output accumulator [R, hd], scores/probabilities
        // [R, kBlockKF], running max and sum [R].
        std::vector<real> qp(size_t(R_max * hd)), acc(size_t(R_max * hd)), sp(size_t(R_max * kBlockKF));
        std::vector<real> row_max(static_cast<size_t>(R_max)), row_sum(static_cast<size_t>(R_max));
        // bf16 keys and values: Q and P rounded.
        std::vector<uint16_t> q16(kBf16 ? size_t(R_max * hd) : 0), p16(kBf16 ? size_t(R_max * kBlockKF) : 0);
#pragma omp for schedule(dynamic)
        for (size_t ti = 0; ti < tasks.size(); ++ti) error.run([&] {
            const Task &tk = tasks[ti];
            const SeqRows sr = seq_rows(seq_start, tk.b, prefix);
            const int64_t t0 = sr.q0, T = sr.end, j = tk.j;
            const int64_t qa = tk.a, qb = std::min(qa + bq, T), rq = qb - qa, R = g * rq;
            pack_group(qp.data(), q, t0 + qa, rq, nq, j * g, g, hd);
            std::fill_n(acc.data(), R * hd, real(0));
            std::fill_n(row_max.data(), R, -std::numeric_limits<real>::infinity());
            std::fill_n(row_sum.data(), R, real(0));
            for (int64_t ka = first_key(qa, s.window); ka < qb; ka += kBlockKF) {
                const int64_t cols = std::min(kBlockKF, qb - ka);
                const int64_t at = ((sr.k0 + ka) * nkv + j) * hd;
                block_scores(sp.data(), qp.data(), q16.data(), R, cols, hd, s.scale, k + at, ldk);
                // Online softmax, row by row: P = exp(S − new max) on visible keys (0 elsewhere), and what was
                // accumulated under the old max is rescaled. bf16: P = 2^(S − M), M an integer (above).
                for (int64_t r = 0; r < R; ++r) {
                    const int64_t t = qa + r % rq;
                    const int64_t c0 = std::max<int64_t>(0, first_key(t, s.window) - ka);
                    const int64_t c1 = std::min(cols, t - ka + 1);
                    real *pr = sp.data() + r * kBlockKF;
                    if (c0 >= c1) { // nothing visible in this block (rows above the diagonal, or left of the window)
                        std::fill_n(pr, cols, real(0));
                        if constexpr (kBf16) std::fill_n(p16.data() + r * kBlockKF, cols, uint16_t(0));
                        continue;
                    }
                    real m = -std::numeric_limits<real>::infinity();
#pragma omp simd reduction(max : m)
                    for (int64_t c = c0; c < c1; ++c) m = pr[c] > m ? pr[c] : m; // std::max here stays scalar (GCC 12)
                    // The invisible keys' P is 0; the loops below run over the visible ones only, unmasked.
                    std::fill(pr, pr + c0, real(0));
                    std::fill(pr + c1, pr + cols, real(0));
                    real sum = 0, corr;
                    if constexpr (kBf16) {
#ifndef ZAYA_DOUBLE
                        m = std::max(row_max[size_t(r)], pow2::max_of_scores(m));
#pragma omp simd reduction(+ : sum)
                        for (int64_t c = c0; c < c1; ++c) {
                            const float p = pow2::exp2_below(pr[c], m);
                            pr[c] = p;
                            sum += p;
                        }
                        f32_to_bf16_n(pr, p16.data() + r * kBlockKF, size_t(cols)); // no subnormals to flush
                        corr = pow2::pow2_int(row_max[size_t(r)] - m); // exact; 0 for the first visible block (−∞)
#endif
                    } else {
                        m = std::max(m, row_max[size_t(r)]);
#pragma omp simd reduction(+ : sum)
                        for (int64_t c = c0; c < c1; ++c) {
                            const real p = fast_exp(pr[c] - m);
                            pr[c] = p;
                            sum += p;
                        }
                        // The first visible block has max −∞: corr ≈ 0 multiplies an accumulator of zeros.
                        corr = fast_exp(row_max[size_t(r)] - m);
                    }
                    row_max[size_t(r)] = m;
                    row_sum[size_t(r)] = row_sum[size_t(r)] * corr + sum;
                    if (corr != real(1)) {
                        real *ar = acc.data() + r * hd;
#pragma omp simd
                        for (int64_t d = 0; d < hd; ++d) ar[d] *= corr;
                    }
                }
                // O += P·V [R, hd]
                block_values(acc.data(), sp.data(), p16.data(), R, cols, hd, v + at, ldk);
            }
            // lse = max + log(rowsum) (bf16: in log2 units); out = O / rowsum (every row sees at least its own key:
            // rowsum > 0).
            for (int64_t r = 0; r < R; ++r) {
                const real l = row_sum[size_t(r)], m = row_max[size_t(r)];
                if (lse) {
                    real &e = lse[(t0 + qa + r % rq) * nq + j * g + r / rq];
                    e = kBf16 ? (m + std::log2(l)) * std::numbers::ln2_v<real> : m + std::log(l);
                }
                row_sum[size_t(r)] = real(1) / l; // the factor unpack_group applies
            }
            unpack_group(out, acc.data(), row_sum.data(), t0 + qa, rq, nq, j * g, g, hd);
        });
    }
    error.rethrow();
}

} // namespace

void attention_forward(real *out, real *lse, const real *q, const real *k, const real *v, const int64_t *seq_start,
                       int64_t B, const AttnShape &s, const SeqPrefix *prefix) {
    ZAYA_PROFILE("attention");
    forward_blocks(out, lse, q, k, v, seq_start, B, s, prefix);
}

namespace {

// What the backward pass reads, and its shape.
struct BackwardIn {
    const real *dout, *out, *lse, *q, *k, *v;
    int64_t nq, nkv, hd, g, window;
    real scale;
    int64_t bq; // query_block(g)
};

// Per-thread scratch of the backward pass, allocated once per call (R = g·bq rows at most).
struct BackwardScratch {
    std::vector<real> qp, dop, dqp; // packed Q, dO and the dQ accumulator [R, hd]
    std::vector<real> lse, dd;      // the saved lse and D = rowsum(dO∘O) [R]
    std::vector<real> p, ds;        // P and P∘(dP − D) of one block pair [R, kBlockKB]
    BackwardScratch(int64_t R, int64_t hd)
        : qp(size_t(R * hd)), dop(size_t(R * hd)), dqp(size_t(R * hd)), lse(size_t(R)), dd(size_t(R)),
          p(size_t(R * kBlockKB)), ds(size_t(R * kBlockKB)) {}
};

// Packs query block [qa, qa+rq) of sequence rows sr, heads of kv head j: Q, dO [R, hd]; lse, D [R].
void pack_query_block(BackwardScratch &sc, const BackwardIn &in, const SeqRows &sr, int64_t qa, int64_t rq,
                      int64_t j) {
    const int64_t nq = in.nq, hd = in.hd, t0 = sr.q0;
    pack_group(sc.qp.data(), in.q, t0 + qa, rq, nq, j * in.g, in.g, hd);
    pack_group(sc.dop.data(), in.dout, t0 + qa, rq, nq, j * in.g, in.g, hd);
    for (int64_t hh = 0; hh < in.g; ++hh)
        for (int64_t i = 0; i < rq; ++i) {
            const int64_t row = (t0 + qa + i) * nq + j * in.g + hh, r = hh * rq + i;
            const real *dor = in.dout + row * hd, *orow = in.out + row * hd;
            real dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t d = 0; d < hd; ++d) dot += dor[d] * orow[d];
            sc.dd[size_t(r)] = dot;
            sc.lse[size_t(r)] = in.lse[row];
        }
}

// The packed query block [qa, qa+rq) against keys [ka, ka+cols): P = exp(scale·Q·Kᵀ − lse) on visible keys (0
// elsewhere) into sc.p, and P∘(dP − D) with dP = dO·Vᵀ into sc.ds, both [R, cols] (row stride kBlockKB).
void pair_probs(BackwardScratch &sc, const BackwardIn &in, const SeqRows &sr, int64_t qa, int64_t rq, int64_t ka,
                int64_t cols, int64_t j) {
    const int64_t hd = in.hd, ldk = in.nkv * hd, R = in.g * rq;
    const real *kblk = in.k + ((sr.k0 + ka) * in.nkv + j) * hd, *vblk = in.v + ((sr.k0 + ka) * in.nkv + j) * hd;
    gemm(false, true, R, cols, hd, in.scale, sc.qp.data(), hd, kblk, ldk, real(0), sc.p.data(), kBlockKB);
    gemm(false, true, R, cols, hd, real(1), sc.dop.data(), hd, vblk, ldk, real(0), sc.ds.data(), kBlockKB);
    for (int64_t r = 0; r < R; ++r) {
        const int64_t t = qa + r % rq;
        const int64_t c0 = std::max<int64_t>(0, first_key(t, in.window) - ka), c1 = std::min(cols, t - ka + 1);
        const real l = sc.lse[size_t(r)], dd = sc.dd[size_t(r)];
        real *pr = sc.p.data() + r * kBlockKB, *dsr = sc.ds.data() + r * kBlockKB;
#pragma omp simd
        for (int64_t c = 0; c < cols; ++c) {
            const real p = c >= c0 && c < c1 ? fast_exp(pr[c] - l) : real(0);
            pr[c] = p;
            dsr[c] = p * (dsr[c] - dd);
        }
    }
}

// dV[ka, ka+cols) += Pᵀ·dO and dK[ka, ka+cols) += scale·dSᵀ·Q [cols, hd], in place in kv head j's rows.
void pair_dkdv(real *dk, real *dv, const BackwardScratch &sc, const BackwardIn &in, const SeqRows &sr, int64_t rq,
               int64_t ka, int64_t cols, int64_t j) {
    const int64_t hd = in.hd, ldk = in.nkv * hd, R = in.g * rq, off = ((sr.k0 + ka) * in.nkv + j) * hd;
    gemm(true, false, cols, hd, R, real(1), sc.p.data(), kBlockKB, sc.dop.data(), hd, real(1), dv + off, ldk);
    gemm(true, false, cols, hd, R, in.scale, sc.ds.data(), kBlockKB, sc.qp.data(), hd, real(1), dk + off, ldk);
}

// Gradients of query block [qa, qa+rq) of kv head j's group: dQ over every key block it sees (in key order), written
// to dq; with dkdv, also the block's contributions to dK and dV.
void query_block_grads(real *dq, real *dk, real *dv, bool dkdv, BackwardScratch &sc, const BackwardIn &in,
                       const SeqRows &sr, int64_t qa, int64_t j) {
    const int64_t hd = in.hd, ldk = in.nkv * hd, qb = std::min(qa + in.bq, sr.end), rq = qb - qa, R = in.g * rq;
    const int64_t lo = first_key(qa, in.window);
    pack_query_block(sc, in, sr, qa, rq, j);
    std::fill_n(sc.dqp.data(), R * hd, real(0));
    // Key blocks on the fixed grid (multiples of kBlockKB), cut to the keys this block sees.
    for (int64_t kg = lo / kBlockKB * kBlockKB; kg < qb; kg += kBlockKB) {
        const int64_t ka = std::max(kg, lo), cols = std::min(kg + kBlockKB, qb) - ka;
        pair_probs(sc, in, sr, qa, rq, ka, cols, j);
        if (dkdv) pair_dkdv(dk, dv, sc, in, sr, rq, ka, cols, j);
        // dQ += scale·dS·K [R, hd]
        gemm(false, false, R, hd, cols, in.scale, sc.ds.data(), kBlockKB, in.k + ((sr.k0 + ka) * in.nkv + j) * hd,
             ldk, real(1), sc.dqp.data(), hd);
    }
    unpack_group(dq, sc.dqp.data(), nullptr, sr.q0 + qa, rq, in.nq, j * in.g, in.g, hd);
}

// dK, dV of key block [kg, kg+kBlockKB) of kv head j: every query block that sees it, in query order — the same
// pairs, products and order as query_block_grads, so the result is bit for bit the fused pass's.
void key_block_grads(real *dk, real *dv, BackwardScratch &sc, const BackwardIn &in, const SeqRows &sr, int64_t kg,
                     int64_t j) {
    // The query blocks (on the grid from pos0, as query_block_grads walks them) with a query at or after kg.
    const int64_t first = sr.pos0 + std::max<int64_t>(0, kg - sr.pos0) / in.bq * in.bq;
    for (int64_t qa = first; qa < sr.end && first_key(qa, in.window) < kg + kBlockKB; qa += in.bq) {
        const int64_t qb = std::min(qa + in.bq, sr.end), rq = qb - qa;
        const int64_t ka = std::max(kg, first_key(qa, in.window)), cols = std::min(kg + kBlockKB, qb) - ka;
        pack_query_block(sc, in, sr, qa, rq, j);
        pair_probs(sc, in, sr, qa, rq, ka, cols, j);
        pair_dkdv(dk, dv, sc, in, sr, rq, ka, cols, j);
    }
}

// dK, dV at key positions [a, b) of kv head j are accumulated in place: they start at zero.
void zero_kv_rows(real *dk, real *dv, const SeqRows &sr, int64_t a, int64_t b, int64_t nkv, int64_t j, int64_t hd) {
    const int64_t t0 = sr.k0;
    for (int64_t t = a; t < b; ++t) {
        std::fill_n(dk + ((t0 + t) * nkv + j) * hd, hd, real(0));
        std::fill_n(dv + ((t0 + t) * nkv + j) * hd, hd, real(0));
    }
}

} // namespace

void attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *out, const real *lse,
                        const real *q, const real *k, const real *v, const int64_t *seq_start, int64_t B,
                        const AttnShape &s, const SeqPrefix *prefix) {
    ZAYA_PROFILE("attention_backward");
    ZAYA_ASSERT(!prefix || prefix->key_start || !prefix->pos0); // queries from a later position need their keys' rows
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, g = nq / nkv;
    const int64_t bq = query_block(g);
    const BackwardIn in{dout, out, lse, q, k, v, nq, nkv, hd, g, s.window, s.scale, bq};
    // Sequences that share their keys (the same key_start: context parallelism's two parts of one sequence) sum
    // into the same dK, dV rows: they form one group, whose tasks take them in order. Without a prefix every
    // sequence is a group of its own.
    struct Group {
        int64_t first, last, key_end, work; // sequences [first, last), keys at positions [0, key_end)
    };
    std::vector<Group> groups;
    int64_t total = 0, heaviest = 0;
    for (int64_t b = 0; b < B; ++b) {
        const SeqRows sr = seq_rows(seq_start, b, prefix);
        if (groups.empty() || sr.k0 != seq_rows(seq_start, groups.back().first, prefix).k0 || !prefix)
            groups.push_back({b, b, 0, 0});
        Group &gr = groups.back();
        gr.last = b + 1;
        gr.key_end = std::max(gr.key_end, sr.end);
        for (int64_t qa = sr.pos0; qa < sr.end; qa += bq)
            gr.work += block_work(qa, std::min(qa + bq, sr.end), s.window);
    }
    for (const Group &gr : groups) total += gr.work * nkv, heaviest = std::max(heaviest, gr.work);
    // Fused: one task per (group, kv head) owns its dQ, dK and dV rows — 5 GEMMs per block pair. When that cannot
    // keep every thread busy (one sequence dominates, or fewer tasks than threads), split instead: dQ by query block
    // and dK/dV by key block, which recomputes P and dS (7 GEMMs per pair) but spreads. Both compute the same
    // products in the same order, so the results are identical whichever is chosen: the thread count never shows.
    const bool fused = heaviest * omp_get_max_threads() <= total;
    std::vector<Task> tasks; // b: the group (Sequence, KeyBlock) or the sequence (QueryBlock)
    for (int64_t gi = 0; gi < int64_t(groups.size()); ++gi) {
        const Group &gr = groups[size_t(gi)];
        const int64_t T = gr.key_end; // keys at positions [0, T)
        for (int64_t j = 0; j < nkv && gr.work > 0; ++j) {
            if (fused) {
                tasks.push_back({gi, j, 0, gr.work, Span::Sequence});
                continue;
            }
            for (int64_t b = gr.first; b < gr.last; ++b) {
                const SeqRows sr = seq_rows(seq_start, b, prefix);
                for (int64_t qa = sr.pos0; qa < sr.end; qa += bq)
                    tasks.push_back({b, j, qa, block_work(qa, std::min(qa + bq, sr.end), s.window), Span::QueryBlock});
            }
            // A key block is seen by the queries up to its last key + window − 1 (an estimate, for the order only).
            for (int64_t kg = 0; kg < T; kg += kBlockKB) {
                const int64_t kb = std::min(kg + kBlockKB, T);
                const int64_t q_end = s.window > 0 ? std::min(T, kb - 1 + s.window) : T;
                tasks.push_back({gi, j, kg, (kb - kg) * (q_end - kg), Span::KeyBlock});
            }
        }
    }
    sort_by_work(tasks);

    FirstError error;
#pragma omp parallel
    {
        BackwardScratch sc(g * bq, hd);
#pragma omp for schedule(dynamic)
        for (size_t ti = 0; ti < tasks.size(); ++ti) error.run([&] {
            const Task &tk = tasks[ti];
            switch (tk.span) {
            case Span::Sequence: { // dK, dV accumulate over the group's sequences' query blocks, in order
                const Group &gr = groups[size_t(tk.b)];
                zero_kv_rows(dk, dv, seq_rows(seq_start, gr.first, prefix), 0, gr.key_end, nkv, tk.j, hd);
                for (int64_t b = gr.first; b < gr.last; ++b) {
                    const SeqRows sr = seq_rows(seq_start, b, prefix);
                    for (int64_t qa = sr.pos0; qa < sr.end; qa += bq)
                        query_block_grads(dq, dk, dv, true, sc, in, sr, qa, tk.j);
                }
                break;
            }
            case Span::QueryBlock:
                query_block_grads(dq, dk, dv, false, sc, in, seq_rows(seq_start, tk.b, prefix), tk.a, tk.j);
                break;
            case Span::KeyBlock: {
                const Group &gr = groups[size_t(tk.b)];
                zero_kv_rows(dk, dv, seq_rows(seq_start, gr.first, prefix), tk.a,
                             std::min(tk.a + kBlockKB, gr.key_end), nkv, tk.j, hd);
                for (int64_t b = gr.first; b < gr.last; ++b)
                    key_block_grads(dk, dv, sc, in, seq_rows(seq_start, b, prefix), tk.a, tk.j);
                break;
            }
            }
        });
    }
    error.rethrow();
}

// Work item = (query row, kv head, key block): the group's G = nq/nkv query heads are scored against each cached key
// row as it is read, and weigh each value row as it is read, so a decoding step reads the cache once per kv head,
// not once per query head (G = 4 for ZAYA1: the cache outweighs the weights at long context). The keys are split
// into blocks of kCachedKeyBlock, so that one token's attention still spreads over every thread (flash-decoding):
// each block keeps its max, sum and unnormalised output, merged in a second pass, in block order. The split is the
// same for every row count (it was whole for 8+ rows of 2 kv heads, which summed a speculative draft's rows
// otherwise than one decoding row's), and depends on no thread count: a row's result is the same bits however many
// rows share the call (tests/unit/test_batch_invariance.cpp).
namespace {
constexpr int64_t kCachedKeyBlock = 512;
inline real widen(real x) { return x; }
inline real widen(uint16_t x) { return bf16_to_f32(x); }

// The softmax of a cache's element: an fp32 cache's natural one; a bf16 cache's in powers of two (as its prompt
// chunks', forward_blocks), each probability rounded to bf16 for P·V. scale: of Q·Kᵀ. row: one row of scores in
// place → the weights of the values, its maximum m and Σ P; rescale: a split's factor, from its maximum minus the
// row's.
template <class KV> struct CachedSoftmax {
    static real scale(real s) { return s; }
    static void row(real *t, int64_t len, real &m, real &sum) { natural_softmax_row(t, len, m, sum); }
    static real rescale(real dm) { return fast_exp(dm); }
};
#ifndef ZAYA_DOUBLE
template <> struct CachedSoftmax<uint16_t> {
    static float scale(float s) { return s * pow2::kLog2e; }
    static void row(float *t, int64_t len, float &m, float &sum) { pow2::softmax_row(t, len, m, sum); }
    static float rescale(float dm) { return pow2::pow2_int(dm); }
};
#endif

template <class KV>
void attention_cached_over(real *out, const real *q, const KV *k, const KV *v, int64_t n, int64_t p0,
                           const AttnShape &s) {
    constexpr int64_t block = kCachedKeyBlock;
    const int64_t nq = s.nq, nkv = s.nkv, hd = s.hd, G = nq / nkv, total = p0 + n;
    const int64_t blocks = (total + block - 1) / block, items = n * nkv * blocks, stride = hd + 2;
    using Softmax = CachedSoftmax<KV>;
    const real scale = Softmax::scale(s.scale);
    // Per item and head of the group: max, sum, then the unnormalised output [hd].
    // The calling thread's; the region's threads reach it through `parts` (their own thread_local would be empty).
    thread_local std::vector<real> partial;
    partial.resize(size_t(items * G * stride));
    real *const parts = partial.data();
#pragma omp parallel
    {
        std::vector<real> scores; // [G, block], grown once per call and thread
        std::vector<real> q_rounded(std::is_same_v<KV, uint16_t> ? size_t(G * hd) : 0);
#pragma omp for schedule(dynamic)
        for (int64_t item = 0; item < items; ++item) {
            const int64_t c = item % blocks, j = (item / blocks) % nkv, i = item / (blocks * nkv), pos = p0 + i;
            const int64_t t0 = std::max(first_key(pos, s.window), c * block), t1 = std::min(pos + 1, (c + 1) * block);
            real *part = parts + item * G * stride;
            if (t0 >= t1) { // a block before the window or after the query: contributes nothing
                for (int64_t g = 0; g < G; ++g) {
                    part[g * stride] = -std::numeric_limits<real>::infinity();
                    std::fill_n(part + g * stride + 1, hd + 1, real(0));
                }
                continue;
            }
            const int64_t len = t1 - t0;
            scores.resize(size_t(G * len));
            const real *qg = q + (i * nq + j * G) * hd; // the group's G query heads, consecutive
            if constexpr (std::is_same_v<KV, uint16_t>) { // rounded as the prompt path's bf16 GEMM rounds them
                for (int64_t d = 0; d < G * hd; ++d) q_rounded[size_t(d)] = bf16_to_f32(f32_to_bf16(qg[d]));
                qg = q_rounded.data();
            }
#ifndef ZAYA_DOUBLE
            if (attention_item(part, stride, qg, k + j * hd, v + j * hd, nkv * hd, t0, t1, G, hd, scale, scores))
                continue; // done in registers (attention_rows.h); else the loops below
#endif
            for (int64_t t = t0; t < t1; ++t) {
                const KV *kr = k + (t * nkv + j) * hd;
                for (int64_t g = 0; g < G; ++g) {
                    const real *qr = qg + g * hd;
                    real dot = 0;
#pragma omp simd reduction(+ : dot)
                    for (int64_t d = 0; d < hd; ++d) dot += qr[d] * widen(kr[d]);
                    scores[size_t(g * len + t - t0)] = dot * scale;
                }
            }
            for (int64_t g = 0; g < G; ++g) {
                Softmax::row(scores.data() + g * len, len, part[g * stride], part[g * stride + 1]);
                std::fill_n(part + g * stride + 2, hd, real(0));
            }
            for (int64_t t = t0; t < t1; ++t) {
                const KV *vr = v + (t * nkv + j) * hd;
                for (int64_t g = 0; g < G; ++g) {
                    const real p = scores[size_t(g * len + t - t0)];
                    real *o = part + g * stride + 2;
#pragma omp simd
                    for (int64_t d = 0; d < hd; ++d) o[d] += p * widen(vr[d]);
                }
            }
        }
        // Merge each (query row, head)'s blocks, in block order.
#pragma omp for schedule(static)
        for (int64_t ih = 0; ih < n * nq; ++ih) {
            const int64_t i = ih / nq, h = ih % nq, j = h / G, g = h % G;
            const real *first = parts + ((i * nkv + j) * blocks * G + g) * stride;
            real m = -std::numeric_limits<real>::infinity();
            for (int64_t c = 0; c < blocks; ++c) m = std::max(m, first[c * G * stride]);
            real *o = out + ih * hd, sum = 0;
            std::fill_n(o, hd, real(0));
            for (int64_t c = 0; c < blocks; ++c) {
                const real *part = first + c * G * stride;
                if (part[1] == 0) continue;
                const real w = Softmax::rescale(part[0] - m);
                sum += w * part[1];
                for (int64_t d = 0; d < hd; ++d) o[d] += w * part[2 + d];
            }
            const real inv = real(1) / sum;
            for (int64_t d = 0; d < hd; ++d) o[d] *= inv;
        }
    }
}
// Many new rows (a prompt chunk): attention_forward's block GEMMs, the chunk one sequence whose queries start at
// position p0 and whose keys are the cache's (SeqPrefix), so that a block of queries reads each key block once —
// per query row, as above, every row read every key on its own (a 8,192-token prompt at ZAYA1-8B shapes spent 63 %
// of its prefill there). `key0`: the cache row of the position the keys given start at (the rows before the chunk's
// window may be left out).
constexpr int64_t kBlockedFromRows = 16;

template <class KE>
void attention_cached_blocked(real *out, const real *q, const KE *k, const KE *v, int64_t n, int64_t p0,
                              int64_t key0, const AttnShape &s) {
    const int64_t seq_start[2] = {0, n}, pos0[1] = {p0}, key_start[1] = {-key0};
    SeqPrefix prefix;
    prefix.pos0 = pos0;
    prefix.key_start = key_start; // position t's key is row t − key0 of k and v (t ≥ key0 is all it reads)
    forward_blocks(out, nullptr, q, k, v, seq_start, 1, s, &prefix);
}

// The per-row path: attention_cached_over for any n, in groups of rows whose partial sums (one set per row, kv head
// and key block) stay within ~32 MB: each row's sums are its own, so the grouping changes no bits.
template <class KV>
void attention_cached_each_row(real *out, const real *q, const KV *k, const KV *v, int64_t n, int64_t p0,
                               const AttnShape &s) {
    constexpr int64_t kItems = 8192;
    const int64_t blocks = (p0 + n + kCachedKeyBlock - 1) / kCachedKeyBlock;
    const int64_t rows = std::max<int64_t>(1, kItems / (s.nkv * blocks));
    for (int64_t i = 0; i < n; i += rows)
        attention_cached_over(out + i * s.nq * s.hd, q + i * s.nq * s.hd, k, v, std::min(rows, n - i), p0 + i, s);
}

} // namespace

void attention_cached(real *out, const real *q, const real *k, const real *v, int64_t n, int64_t p0,
                      const AttnShape &s, bool batch_invariant) {
    ZAYA_PROFILE("attention_cached");
    if (batch_invariant || n < kBlockedFromRows) return attention_cached_each_row(out, q, k, v, n, p0, s);
    attention_cached_blocked(out, q, k, v, n, p0, 0, s);
}

#ifndef ZAYA_DOUBLE
void attention_cached(real *out, const real *q, const uint16_t *k, const uint16_t *v, int64_t n, int64_t p0,
                      const AttnShape &s, bool batch_invariant) {
    ZAYA_PROFILE("attention_cached");
    if (batch_invariant || n < kBlockedFromRows) return attention_cached_each_row(out, q, k, v, n, p0, s);
    const int64_t key0 = first_key(p0, s.window), at = key0 * s.nkv * s.hd; // the keys from the first query's window
    attention_cached_blocked(out, q, k + at, v + at, n, p0, key0, s);
}
#endif

} // namespace zaya::cpu
