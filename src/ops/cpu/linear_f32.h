// Linear layers on fp32 weights at inference (InferModel's fp32 matrices: models trained here, f32 checkpoints).
// oneDNN's SGEMM runs near its best for up to 8 rows and far below it from 9 to a few dozen (2048 → 1024 in L3:
// 98 GFLOP/s at 8 rows, 22 at 16, 41 at 32, 69 at 64; bench/README.md, `zaya_bench_linear`) — the rows a decoding
// batch or an expert's share of a prompt chunk has. So up to kF32SliceMaxRows rows run as SGEMMs of 8 rows each
// (each reads the weights again, as the bf16 dot kernel's passes do), more as one SGEMM.
#pragma once
#include "ops/cpu/gemm.h"

#include <cstdint>

namespace zaya::cpu {

// y[N, O] (row stride ldy) = x[N, I] · W[O, I]ᵀ + b[O] (b may be null); x's rows as they are (F32) or rounded to
// bf16 first (BF16), multiplied by the fp32 weights either way. batch_invariant: every row through the streaming
// dot passes of linear_bf16's kernel on fp32 weights (weight_stream.h: a row's output then has the same bits
// whatever rows share the call, on AVX-512), not the SGEMM, whose sums for a row depend on the rows beside it.
void linear_f32(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t N, int64_t I,
                int64_t O, MatmulPrecision rows = MatmulPrecision::F32, bool batch_invariant = false);

inline constexpr int64_t kF32SliceRows = 8, kF32SliceMaxRows = 64;

// linear_f32 with the path forced: slices of kF32SliceRows rows when N ≤ slice_max_rows, else one SGEMM (tests and
// benchmarks).
void linear_f32_with(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t N, int64_t I,
                     int64_t O, int64_t slice_max_rows, MatmulPrecision rows = MatmulPrecision::F32);

} // namespace zaya::cpu
