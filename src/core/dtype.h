// Element types zaya reads and writes, and scalar conversions between them.
#pragma once
#include <cstdint>
#include <cstring>
#include <string_view>

namespace zaya {

// I8: inference weights quantized to int8 with a scale per group (ops/cpu/linear_i8.h); its values alone mean
// nothing, so it is never read from or written to files, and the conversions below refuse it.
enum class DType : uint8_t { F32, BF16, F16, I8 };

inline size_t dtype_size(DType t) { return t == DType::F32 ? 4 : t == DType::I8 ? 1 : 2; }

// Safetensors spelling: "F32", "BF16", "F16" (and "I8", which dtype_parse does not accept).
std::string_view dtype_name(DType t);
// Returns false for a name zaya does not support.
bool dtype_parse(std::string_view name, DType &out);

inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = uint32_t(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return uint16_t(bits >> 16);
}

// n values at once, for GEMM operands: AVX512_BF16's conversion where the build has it — round to nearest even
// as f32_to_bf16, except that it flushes denormals (|x| < 2^-126) to zero; files use f32_to_bf16's exact bits.
void f32_to_bf16_n(const float *src, uint16_t *dst, size_t n);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Converts n elements of type `t` at `src` to fp32.
void convert_to_f32(DType t, const void *src, float *dst, size_t n);
// Converts n fp32 values to type `t` at `dst`.
void convert_from_f32(DType t, const float *src, void *dst, size_t n);

} // namespace zaya
