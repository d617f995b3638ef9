// The CCA convolution (cca.h): its grouped stage runs as one GEMM per head group, hence its own file — the rest of
// cca.h needs no GEMM (and links into the CUDA tests' CPU reference).
#include "core/profile.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/reduce.h"

#include <algorithm>
#include <vector>

namespace zaya::cpu {

namespace {

// W_γ[o][τ·hd + i] = wg[(γ·hd + o)·hd·k1 + i·k1 + τ]: each group's weight as one [hd, k1·hd] matrix.
void pack_grouped_weight(std::vector<real> &packed, const real *wg, const ConvShape &s) {
    const int64_t C = s.C, k1 = s.k1, hd = C / s.groups;
    packed.resize(size_t(C * k1 * hd));
    for (int64_t c = 0; c < C; ++c)
        for (int64_t tau = 0; tau < k1; ++tau)
            for (int64_t i = 0; i < hd; ++i) packed[size_t((c * k1 + tau) * hd + i)] = wg[(c * hd + i) * k1 + tau];
}

// cols[γ][n][τ·hd + i] = p[row of (n's sequence, position t+τ)][γ·hd + i]   (groups × N × k1·hd)
void im2col_grouped(std::vector<real> &cols, const real *p, const int64_t *seq_start, int64_t B, const ConvShape &s) {
    const int64_t C = s.C, k1 = s.k1, hd = C / s.groups, N = seq_start[B], kw = k1 * hd;
    cols.resize(size_t(s.groups * N * kw));
    for (int64_t b = 0; b < B; ++b) {
        const real *ps = p + (seq_start[b] + b * (k1 - 1)) * C;
#pragma omp parallel for schedule(static)
        for (int64_t n = seq_start[b]; n < seq_start[b + 1]; ++n) {
            const int64_t t = n - seq_start[b];
            for (int64_t g = 0; g < s.groups; ++g)
                for (int64_t tau = 0; tau < k1; ++tau)
                    std::copy_n(ps + (t + tau) * C + g * hd, hd, cols.data() + (g * N + n) * kw + tau * hd);
        }
    }
}

// Rows up to which the grouped conv runs as direct dot products (grouped_conv_few_rows) instead of packing the
// weights and one GEMM per group: cached decoding's [state ; new] rows. Packing touches every weight once, as many
// operations as the products of one row, so for a few rows it alone would cost more than the products. 64, not
// fewer: the direct path sums each output alone, the same whatever rows share the call, so a speculative draft's
// rows (state + last token + up to 61 drafted) and a batch of 16 decoding sequences (48 rows) get one row's sums
// (weight_stream.h's batch invariance); at ZAYA1-8B's shapes the conv is ~1 % of a decode step's products, and 16
// clients decoded as fast with 64 as with 16 (bench/README.md).
constexpr int64_t kDirectRows = 64;

// o[n, c] = bg[c] + Σ_{i,τ} wg[(c·hd + i)·k1 + τ] · p[row of (n, t+τ)][γ·hd + i] for c in group γ: each output one
// contiguous dot product of its channel's weights, in their stored order, with the row's inputs gathered once per
// (row, group) into that order. Every output is one thread's, summed in a fixed order: the thread count changes
// nothing.
void grouped_conv_few_rows(real *o, const real *p, const int64_t *seq_start, int64_t B, const ConvShape &s,
                           const real *wg, const real *bg) {
    const int64_t C = s.C, k1 = s.k1, hd = C / s.groups, N = seq_start[B], kw = k1 * hd;
    thread_local std::vector<real> scratch; // this (calling) thread's: the parallel loop below uses its pointer
    scratch.resize(size_t(N * C * k1));
    real *const xs = scratch.data(); // [N, groups, hd·k1]: x[n, γ][i·k1 + τ]
    for (int64_t b = 0; b < B; ++b) {
        const real *ps = p + (seq_start[b] + b * (k1 - 1)) * C;
        for (int64_t n = seq_start[b]; n < seq_start[b + 1]; ++n) {
            const int64_t t = n - seq_start[b];
            for (int64_t tau = 0; tau < k1; ++tau) {
                const real *row = ps + (t + tau) * C;
                real *x = xs + n * C * k1 + tau;
                for (int64_t c = 0; c < C; ++c) x[c * k1] = row[c]; // channel c = γ·hd + i, at (γ·hd + i)·k1 + τ
            }
        }
    }
    // Rows in blocks of kRowBlock, so that a block's inputs for one head group (64 rows × hd·k1 values, 64 KB at
    // ZAYA1-8B's shape) stay in cache while the group's channels pass over them: with every row at once (a prompt's
    // chunk, batch-invariant decoding) each channel re-read all of them from memory. The sums are unchanged.
    constexpr int64_t kRowBlock = 64;
    const int64_t blocks = (N + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static)
    for (int64_t item = 0; item < blocks * C; ++item) {
        const int64_t c = item % C, n0 = item / C * kRowBlock, n1 = std::min(N, n0 + kRowBlock);
        const real *w = wg + c * kw;
        const int64_t group_at = c / hd * kw;
        for (int64_t n = n0; n < n1; ++n) {
            const real *x = xs + n * C * k1 + group_at;
            real acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int64_t m = 0; m < kw; ++m) acc += w[m] * x[m];
            o[n * C + c] = bg[c] + acc;
        }
    }
}

} // namespace

void cca_conv_forward(real *o, real *p, const real *z, const int64_t *seq_start, int64_t B, const ConvShape &s,
                      const real *wd, const real *bd, const real *wg, const real *bg, const SeqPrefix *prefix,
                      bool batch_invariant) {
    ZAYA_PROFILE("cca_conv");
    const int64_t C = s.C, k0 = s.k0, k1 = s.k1, hd = C / s.groups, H = cca_conv_halo(s);
    // Depthwise conv: p_j = bd + Σ_i wd[i]·z̃_{j−(k0−1)+i}, for j = −(k1−1) … T−1; z̃ is zero before t = 0, or the
    // halo's rows (z_prev) there.
    for (int64_t b = 0; b < B; ++b) {
        const int64_t t0 = seq_start[b], T = seq_start[b + 1] - t0;
        const real *zs = z + t0 * C;
        // z̃ at t < 0 is zh + t·C down to the document's start (−pos0), zero before it.
        const bool halo = prefix && prefix->continues(b);
        const real *zh = halo ? prefix->z_prev + (prefix->halo_entry(b) * H + H) * C : nullptr;
        const int64_t t_min = halo ? -std::min(H, prefix->first_position(b)) : 0;
        real *ps = p + (t0 + b * (k1 - 1)) * C;
#pragma omp parallel for schedule(static)
        for (int64_t j = -(k1 - 1); j < T; ++j) {
            real *pr = ps + (j + k1 - 1) * C;
            for (int64_t c = 0; c < C; ++c) pr[c] = bd[c];
            for (int64_t i = 0; i < k0; ++i) {
                int64_t t = j - (k0 - 1) + i;
                if (t < t_min) continue;
                const real *zr = t < 0 ? zh + t * C : zs + t * C;
                for (int64_t c = 0; c < C; ++c) pr[c] += wd[c * k0 + i] * zr[c];
            }
        }
    }
    if (batch_invariant || seq_start[B] <= kDirectRows) return grouped_conv_few_rows(o, p, seq_start, B, s, wg, bg);
    // Grouped conv as one GEMM per head group γ over all tokens: o[n, γ] = bg + X_γ[n] · W_γᵀ with the im2col
    // row X_γ[n] = (p_{t}, …, p_{t+k1−1})[γ] (p rows of n's sequence, padding included) and W_γ[o][τ·hd + i].
    // thread_local scratch grows once; only this (calling) thread touches the vectors themselves.
    thread_local std::vector<real> packed, cols;
    pack_grouped_weight(packed, wg, s);
    im2col_grouped(cols, p, seq_start, B, s);
    const int64_t N = seq_start[B], kw = k1 * hd;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) std::copy(bg, bg + C, o + n * C);
    for (int64_t g = 0; g < s.groups; ++g)
        gemm(false, true, N, hd, kw, 1.0f, cols.data() + g * N * kw, kw, packed.data() + g * hd * kw, kw, 1.0f,
             o + g * hd, C);
}

void cca_conv_backward(real *dz, real *dp, real *dwd, real *dbd, real *dwg, real *dbg, const real *dout,
                       const real *z, const real *p, const int64_t *seq_start, int64_t B, const ConvShape &s,
                       const real *wd, const real *wg, const SeqPrefix *prefix) {
    ZAYA_PROFILE("cca_conv_backward");
    const int64_t C = s.C, k0 = s.k0, k1 = s.k1, hd = C / s.groups, H = cca_conv_halo(s);
    // Grouped conv, as in the forward: o[n, γ] = X_γ[n]·W_γᵀ  ⇒  dW_γ += doᵀ·X_γ,  dX_γ = do·W_γ, scattered back
    // onto the p rows it was gathered from.
    const int64_t N = seq_start[B], kw = k1 * hd;
    thread_local std::vector<real> packed, dpacked, cols, dcols;
    pack_grouped_weight(packed, wg, s);
    im2col_grouped(cols, p, seq_start, B, s);
    dpacked.assign(size_t(C * kw), real(0));
    dcols.resize(size_t(s.groups * N * kw));
    column_dot_add(dbg, dout, C, nullptr, 0, N, C);
    for (int64_t g = 0; g < s.groups; ++g) {
        gemm(true, false, hd, kw, N, 1.0f, dout + g * hd, C, cols.data() + g * N * kw, kw, 0.0f,
             dpacked.data() + g * hd * kw, kw);
        gemm(false, false, N, kw, hd, 1.0f, dout + g * hd, C, packed.data() + g * hd * kw, kw, 0.0f,
             dcols.data() + g * N * kw, kw);
    }
    for (int64_t c = 0; c < C; ++c)
        for (int64_t tau = 0; tau < k1; ++tau)
            for (int64_t i = 0; i < hd; ++i) dwg[(c * hd + i) * k1 + tau] += dpacked[size_t((c * k1 + tau) * hd + i)];
    const real *dcols_all = dcols.data(); // thread_local: OpenMP workers must not name it themselves
    for (int64_t b = 0; b < B; ++b) {
        const int64_t t0 = seq_start[b], T = seq_start[b + 1] - t0;
        if (T == 0) continue;
        const real *zs = z + t0 * C;
        // The halo: z̃ at t < 0 is zh + t·C down to the document's start, t_min; its gradient is written for every
        // row of the sequence's entry (zero before t_min, all zero when it does not continue).
        const bool halo = prefix && prefix->continues(b);
        const int64_t entry = prefix ? prefix->halo_entry(b) : -1;
        const real *zh = halo ? prefix->z_prev + (entry * H + H) * C : nullptr;
        real *dzh = halo ? prefix->dz_prev + (entry * H + H) * C : nullptr;
        const int64_t t_min = halo ? -std::min(H, prefix->first_position(b)) : 0;
        if (prefix && prefix->dz_prev && entry >= 0)
            std::fill_n(prefix->dz_prev + entry * H * C, (H + t_min) * C, real(0));
        real *dps = dp + (t0 + b * (k1 - 1)) * C;
        real *dzs = dz + t0 * C;
        const int64_t rows = T + k1 - 1;
        // p row j of this sequence was gathered by positions t = j − τ (τ < k1, 0 ≤ t < T): one writer per row.
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < rows; ++j) {
            real *dr = dps + j * C;
            std::fill(dr, dr + C, real(0));
            for (int64_t tau = 0; tau < k1; ++tau) {
                const int64_t t = j - tau;
                if (t < 0 || t >= T) continue;
                for (int64_t g = 0; g < s.groups; ++g) {
                    const real *src = dcols_all + (g * N + t0 + t) * kw + tau * hd;
#pragma omp simd
                    for (int64_t i = 0; i < hd; ++i) dr[g * hd + i] += src[i];
                }
            }
        }
        // Depthwise conv: p_j = bd + Σ_i wd[i]·z̃_{j−(k0−1)+i}; every p row (padding rows too) carries the bias.
        column_dot_add(dbd, dps, C, nullptr, 0, rows, C);
        // By column chunks, rows in order (each channel's sums keep their order), vectorised across channels.
        // Positions t < 0 exist only with the halo (they reach back to −H, or to the document's start).
        for_column_chunks(C, [&](int64_t c0, int64_t c1) {
            const int64_t w = c1 - c0;
            real acc[kColumnChunk];
            for (int64_t i = 0; i < k0; ++i) {
                std::fill_n(acc, w, real(0));
                for (int64_t j = std::max<int64_t>(-(k1 - 1), t_min + k0 - 1 - i); j < T; ++j) { // t ≥ t_min
                    const int64_t t = j - (k0 - 1) + i;
                    const real *dr = dps + (j + k1 - 1) * C + c0, *zr = (t < 0 ? zh : zs) + t * C + c0;
#pragma omp simd
                    for (int64_t c = 0; c < w; ++c) acc[c] += dr[c] * zr[c];
                }
                for (int64_t c = 0; c < w; ++c) dwd[(c0 + c) * k0 + i] += acc[c];
            }
            std::vector<real> wdt(size_t(k0 * w)); // wdt[i·w + c]: tap i of the chunk's weights, contiguous
            for (int64_t i = 0; i < k0; ++i)
                for (int64_t c = 0; c < w; ++c) wdt[size_t(i * w + c)] = wd[(c0 + c) * k0 + i];
            for (int64_t t = t_min; t < T; ++t) {
                std::fill_n(acc, w, real(0));
                for (int64_t i = 0; i < k0; ++i) {
                    const int64_t j = t + (k0 - 1) - i;
                    if (j >= T || j < -(k1 - 1)) continue;
                    const real *dr = dps + (j + k1 - 1) * C + c0, *wi = wdt.data() + i * w;
#pragma omp simd
                    for (int64_t c = 0; c < w; ++c) acc[c] += wi[c] * dr[c];
                }
                if (t < 0) { // the halo's gradient, written
                    std::copy_n(acc, w, dzh + t * C + c0);
                    continue;
                }
                real *dzr = dzs + t * C + c0;
#pragma omp simd
                for (int64_t c = 0; c < w; ++c) dzr[c] += acc[c];
            }
        });
    }
}

} // namespace zaya::cpu
