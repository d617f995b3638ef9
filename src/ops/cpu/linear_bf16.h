// Linear layers whose weights stay in bf16 (inference on real checkpoints, spec A.9): no fp32 copy of the weights
// ever exists, and accumulation is fp32. Activations are fp32 (MatmulPrecision::F32: each weight widened exactly —
// a 16-bit shift — as it is read) or rounded to bf16 first (BF16, as transformers runs a bf16 model and llama.cpp
// a bf16 GGUF: the products stay exact in fp32, at twice the arithmetic rate on AVX512_BF16). Few rows (decoding)
// stream the weights once through a dot kernel — memory-bound by design; many rows (prefill) go to a GEMM: fp32
// activations against widened panels of weight rows and the SGEMM, bf16 ones straight to the bf16 GEMM.
#pragma once
#include "ops/cpu/gemm.h"

#include <cstdint>

namespace zaya::cpu {

// y[N, O] (row stride ldy) = x[N, I] · W[O, I]ᵀ + b[O]; W is bf16 (raw uint16 bits), b may be null; x's rows are
// taken as they are (F32) or rounded to bf16 (BF16). batch_invariant: every row through the dot passes, however
// many (weight_stream.h: a row's output then has the same bits whatever rows share the call, on AVX-512).
void linear_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                 int64_t O, MatmulPrecision rows = MatmulPrecision::F32, bool batch_invariant = false);

// Rows at or below this count use the streaming dot kernel (in passes of up to 8 rows: each pass reads the weights
// once); above it the GEMM, whose cache blocking wins once the weights would be streamed many times (measured:
// bench/README.md, `zaya_bench_linear`). fp32 activations: 8 rows run near the FMA peak, and the widened panels
// pay for their widening only from ~64 rows.
inline constexpr int64_t kBf16DotMaxRows = 64;
// bf16 activations: the vdpbf16ps dot passes run at 170–250 GFLOP/s from 8 rows; the bf16 GEMM (no widening) passes
// them from ~24–32 rows (2048 → 4096: 183 at 24 rows, 215 at 32).
inline constexpr int64_t kBf16InDotMaxRows = 24;

// linear_bf16 with the path forced: dot passes when N ≤ dot_max_rows, else the GEMM (tests and benchmarks).
void linear_bf16_with(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                      int64_t O, int64_t dot_max_rows, MatmulPrecision rows);

// x's N×I values rounded to bf16 and widened back (exactly): the rows a BF16 linear multiplies, for an fp32 matrix's
// SGEMM. In this thread's buffer, valid until its next call.
const float *bf16_rounded_rows(const float *x, int64_t N, int64_t I);

// dst[n, :] = widen(table[ids[n], :]) for a bf16 table of row length D.
void gather_rows_bf16(float *dst, const uint16_t *table, const int32_t *ids, int64_t N, int64_t D);

} // namespace zaya::cpu
