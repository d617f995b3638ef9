// Linear layers whose weights stay in bf16 (inference on real checkpoints, spec A.9): activations and accumulation
// are fp32, each weight is widened exactly (bf16 → fp32 is a 16-bit shift) as it is read, so no fp32 copy of the
// weights ever exists. Few rows (decoding) stream the weights once through a dot kernel — memory-bound by design;
// many rows (prefill) widen a panel of weight rows at a time and hand it to the fp32 GEMM.
#pragma once
#include <cstdint>

namespace zaya::cpu {

// y[N, O] (row stride ldy) = x[N, I] · W[O, I]ᵀ + b[O]; W is bf16 (raw uint16 bits), b may be null.
void linear_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                 int64_t O);

// Rows at or below this count use the streaming dot kernel (in passes of up to 8 rows: each pass reads the weights
// once, and with 8 rows it runs near the FMA peak); above it, widened panels and the GEMM, whose cache blocking wins
// once the weights would be streamed many times (measured: bench/README.md).
inline constexpr int64_t kBf16DotMaxRows = 64;

// linear_bf16 with the path forced: dot passes when N ≤ dot_max_rows, else panels (tests and benchmarks).
void linear_bf16_with(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                      int64_t O, int64_t dot_max_rows);

// dst[n, :] = widen(table[ids[n], :]) for a bf16 table of row length D.
void gather_rows_bf16(float *dst, const uint16_t *table, const int32_t *ids, int64_t N, int64_t D);

} // namespace zaya::cpu
