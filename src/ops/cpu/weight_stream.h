// How a linear layer runs on weights stored narrower than fp32 (linear_bf16.h, linear_i8.h), whatever the storage:
// few input rows stream every weight once through a dot kernel that widens it in registers (memory-bound, as
// batch-1 decoding must be); many rows widen a panel of weight rows at a time into fp32 for the GEMM, whose cache
// blocking wins once the weights would be streamed many times (measured: bench/README.md). Batch-invariant decoding
// takes the dot passes for any row count, and fp32 weights too (linear_f32.h).
//
// A storage type W provides
//   template <int R> void dot(float *acc, const float *x, int64_t ldx, int64_t o, int64_t c, int64_t n) const;
//       acc[r] += Σ_{i<n} x[r·ldx + i] · w[o, c + i] for R input rows (x points at column c);
//   void widen(float *dst, int64_t o0, int64_t rows) const;   // rows [o0, o0 + rows) of w as fp32, [rows, I]
//   static constexpr int64_t kColAlign;                       // where a column chunk may start (a multiple of it)
// and may provide
//   template <int R> void dot2(float *acc0, float *acc1, const float *x, int64_t ldx, int64_t o, int64_t c,
//                              int64_t n) const;              // dot for weight rows o and o + 1 at once, alike
#pragma once
#include "ops/cpu/gemm.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace zaya::cpu::weight_stream {

// A row's products are summed in pieces of kSumCols columns from column 0, each piece by the storage's dot kernel
// and added to the row's total in column order, whatever the pass's row count R: the kernels' arithmetic for a row
// does not depend on R (on AVX-512; the AVX2 kernels' chains per row do), so a row's output has the same bits in a
// pass of 1 row as of 8. A speculative draft's rows, or several requests decoded in one step, then decode exactly as
// one row alone would, up to dot_max_rows rows (the GEMM paths above sum in their own order).
inline constexpr int64_t kSumCols = 1024;

// Rows of W in blocks, columns in chunks: a chunk of the R input rows (R × kCols floats, 32 KB for 8 rows) stays in
// L1 while a block of weight rows passes over it; without the chunks, 8 input rows of 2048 columns (64 KB) were
// re-read from L2 for every weight row and capped a pass at ~60 GFLOP/s. Every weight is still read once.
template <int R, class W>
void dot_block(float *y, int64_t ldy, const float *x, const W &w, const float *b, int64_t I, int64_t O) {
    static_assert(kSumCols % W::kColAlign == 0, "a piece must start where the storage's column chunks may");
    // Unchunked when the R rows fit L1 anyway (decode, R = 1): chunks break the weights' sequential stream, and that
    // measured 30 % slower for one row. Chunks are whole pieces, so the pieces are the same either way.
    constexpr int64_t kRowBlock = 32, kL1Floats = 8192;
    const int64_t kCols = int64_t(R) * I <= kL1Floats ? I : std::max(kSumCols, kL1Floats / R / kSumCols * kSumCols);
#pragma omp parallel for schedule(static)
    for (int64_t o0 = 0; o0 < O; o0 += kRowBlock) {
        const int64_t o1 = std::min(O, o0 + kRowBlock);
        float acc[kRowBlock][R] = {};
        for (int64_t c = 0; c < I; c += kCols) {
            const int64_t end = std::min(I, c + kCols);
            int64_t o = o0;
            // A storage may read two weight rows at once (dot2: the same sums, each load of x serving both), for
            // passes of 4 or more rows, which those loads bound; fewer rows stream one weight row at a time (two
            // streams measured ~15 % slower for one row of the LM head from DRAM).
            if constexpr (R >= 4 && requires { w.template dot2<R>(acc[0], acc[1], x, I, o, c, I); })
                for (; o + 1 < o1; o += 2)
                    for (int64_t p = c; p < end; p += kSumCols)
                        w.template dot2<R>(acc[o - o0], acc[o + 1 - o0], x + p, I, o, p, std::min(kSumCols, end - p));
            for (; o < o1; ++o)
                for (int64_t p = c; p < end; p += kSumCols)
                    w.template dot<R>(acc[o - o0], x + p, I, o, p, std::min(kSumCols, end - p));
        }
        for (int64_t o = o0; o < o1; ++o)
            for (int r = 0; r < R; ++r) y[r * ldy + o] = acc[o - o0][r] + (b ? b[o] : 0.0f);
    }
}

// Passes of 4 or more rows read the weights in column chunks (dot_block), a stream the hardware prefetcher does not
// follow: the storage types' dot kernels prefetch each chunk kPrefetchRows weight rows ahead. One row streams whole
// rows, which the hardware follows: there prefetching measured ~4 % slower, so it is left alone. Measured
// (bench/README.md): the LM head (262,272 × 2048, from DRAM) at 8 rows, bf16 weights with bf16 rows 83–112 → 161
// GFLOP/s (with the rows' alignment), with fp32 rows 70–71 → 83; int8 weights 108–118 → 150–164.
inline constexpr int64_t kPrefetchRows = 4;

// The piece at column c of the weight row kPrefetchRows after row o of W [O, I], for a pass of R rows; null where
// nothing is to be prefetched.
template <int R, class T> const T *chunk_ahead(const T *W, int64_t I, int64_t O, int64_t o, int64_t c) {
    return R >= 4 && o + kPrefetchRows < O ? W + (o + kPrefetchRows) * I + c : nullptr;
}

// dot2's work for weight rows o and o + 1 of W [O, I] (element T), in passes of up to 4 of its R input rows (two
// weight rows' sums of 8 rows would take every vector register): pass.template operator()<Rows>(acc[2], first input
// row, w[2] (the rows' pieces at column c), ahead[2]); the second pass reads what the first prefetched.
template <int R, class T, class Pass>
void two_weight_rows(float *acc0, float *acc1, const T *W, int64_t I, int64_t O, int64_t o, int64_t c, Pass &&pass) {
    const T *w[2] = {W + o * I + c, W + (o + 1) * I + c};
    const T *ahead[2] = {chunk_ahead<R>(W, I, O, o, c), chunk_ahead<R>(W, I, O, o + 1, c)};
    constexpr int kFirst = R > 4 ? 4 : R;
    float *a[2] = {acc0, acc1};
    pass.template operator()<kFirst>(a, 0, w, ahead);
    if constexpr (R > 4) {
        float *b[2] = {acc0 + 4, acc1 + 4};
        const T *none[2] = {nullptr, nullptr};
        pass.template operator()<R - 4>(b, 4, w, none);
    }
}

inline constexpr int64_t kPass = 8; // rows per pass (4 measured slower: 188 vs 142 ms for 8 rows of the LM head)

// Few rows: each pass of up to kPass rows reads every weight row once and uses it for all of them.
template <class W> void dot_passes(float *y, int64_t ldy, const float *x, const W &w, const float *b, int64_t N,
                                   int64_t I, int64_t O) {
    for (int64_t n = 0; n < N; n += kPass) {
        float *yp = y + n * ldy;
        const float *xp = x + n * I;
        switch (std::min<int64_t>(kPass, N - n)) {
        case 1: dot_block<1>(yp, ldy, xp, w, b, I, O); break;
        case 2: dot_block<2>(yp, ldy, xp, w, b, I, O); break;
        case 3: dot_block<3>(yp, ldy, xp, w, b, I, O); break;
        case 4: dot_block<4>(yp, ldy, xp, w, b, I, O); break;
        case 5: dot_block<5>(yp, ldy, xp, w, b, I, O); break;
        case 6: dot_block<6>(yp, ldy, xp, w, b, I, O); break;
        case 7: dot_block<7>(yp, ldy, xp, w, b, I, O); break;
        default: dot_block<8>(yp, ldy, xp, w, b, I, O); break;
        }
    }
}

// y[n, :] += b for N rows of O (nothing when b is null).
inline void add_bias(float *y, int64_t ldy, const float *b, int64_t N, int64_t O) {
    if (!b) return;
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t o = 0; o < O; ++o) y[n * ldy + o] += b[o];
}

// Many rows: widen kPanel weight rows at a time into fp32 and multiply them with the GEMM. The widening costs
// O·I per call, shared by all N rows.
template <class W> void panels(float *y, int64_t ldy, const float *x, const W &w, const float *b, int64_t N,
                               int64_t I, int64_t O) {
    constexpr int64_t kPanel = 256;
    thread_local std::vector<float> panel; // grows once to kPanel·I; reused by every later call
    panel.resize(size_t(std::min(kPanel, O) * I));
    for (int64_t o0 = 0; o0 < O; o0 += kPanel) {
        const int64_t rows = std::min(kPanel, O - o0);
        w.widen(panel.data(), o0, rows);
        gemm(false, true, N, rows, I, 1.0f, x, I, panel.data(), I, 0.0f, y + o0, ldy);
    }
    add_bias(y, ldy, b, N, O);
}

// y[N, O] (row stride ldy) = x[N, I] · wᵀ + b: dot passes up to dot_max_rows rows, panels above.
template <class W> void linear(float *y, int64_t ldy, const float *x, const W &w, const float *b, int64_t N,
                               int64_t I, int64_t O, int64_t dot_max_rows) {
    if (N <= 0 || O <= 0) return;
    if (N <= dot_max_rows) dot_passes(y, ldy, x, w, b, N, I, O);
    else panels(y, ldy, x, w, b, N, I, O);
}

} // namespace zaya::cpu::weight_stream
