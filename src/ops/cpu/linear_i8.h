// Linear layers with int8 weights (inference only: `--quantize int8`): each weight row is cut into groups of
// kI8Group columns, each group stored as int8 values q and one fp32 scale s, w ≈ s·q with s = max|w| / 127 over the
// group (symmetric, round to nearest). Each call quantizes its input rows by the same rule (one scale per row and
// group, as llama.cpp's Q8_0 does), so a group's 64 products are summed exactly as integers — with AVX-512 VNNI 64
// of them per instruction — and scaled once into fp32: batch-1 decoding streams the weights at about a byte each
// (half of bf16) with little arithmetic per byte. Few rows run that dot kernel; many rows multiply the dequantized
// rows by a panel of widened weight rows at a time with the fp32 GEMM (as linear_bf16.h) — the same products, so
// both paths agree to rounding.
#pragma once
#include <cstdint>

namespace zaya::cpu {

inline constexpr int64_t kI8Group = 64; // columns per scale: 4 bytes of scale per 64 of weights (+6 %)

// Scales per row of I columns.
inline int64_t i8_groups(int64_t I) { return (I + kI8Group - 1) / kI8Group; }

// q[O, I] and scales[O, i8_groups(I)] from fp32 weights w[O, I] (an all-zero group gets scale 0).
void quantize_i8(int8_t *q, float *scales, const float *w, int64_t O, int64_t I);
// The same from bf16 weights (raw uint16 bits).
void quantize_i8_from_bf16(int8_t *q, float *scales, const uint16_t *w, int64_t O, int64_t I);

// y[N, O] (row stride ldy) = x̃[N, I] · (s·q)[O, I]ᵀ + b[O], x̃ the rows of x quantized as above; b may be null.
// batch_invariant: every row through the dot passes, however many (as linear_bf16).
void linear_i8(float *y, int64_t ldy, const float *x, const int8_t *q, const float *scales, const float *b, int64_t N,
               int64_t I, int64_t O, bool batch_invariant = false);

// Rows at or below this count use the dot kernel in passes of up to 8 rows, above it widened panels and the GEMM.
// The passes' integer sums keep ~170 GFLOP/s however many rows (2048 → 4096 in L3; ~120 for 32 MB of weights beyond
// it, each pass reading them again), the panels' SGEMM 62–93 up to 256 rows and 155–160 from 512
// (`zaya_bench_linear`, 2026-12-06).
inline constexpr int64_t kI8DotMaxRows = 256;

// linear_i8 with the path forced: dot passes when N ≤ dot_max_rows, else panels (tests and benchmarks).
void linear_i8_with(float *y, int64_t ldy, const float *x, const int8_t *q, const float *scales, const float *b,
                    int64_t N, int64_t I, int64_t O, int64_t dot_max_rows);

// dst[n, :] = s·q of row ids[n] of a table of row length D.
void gather_rows_i8(float *dst, const int8_t *q, const float *scales, const int32_t *ids, int64_t N, int64_t D);

} // namespace zaya::cpu
