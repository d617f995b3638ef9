#include "core/dtype.h"

#include "core/error.h"

#include <cmath>
#include <immintrin.h>

namespace zaya {

std::string_view dtype_name(DType t) {
    switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
    case DType::I8: return "I8";
    }
    return "?";
}

bool dtype_parse(std::string_view name, DType &out) {
    if (name == "F32") out = DType::F32;
    else if (name == "BF16") out = DType::BF16;
    else if (name == "F16") out = DType::F16;
    else return false;
    return true;
}

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { // subnormal: renormalise
            int e = -1;
            do { ++e; man <<= 1; } while ((man & 0x400u) == 0);
            bits = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ffu) << 13;
        }
    } else if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    uint16_t sign = uint16_t((bits >> 16) & 0x8000u);
    if (std::isnan(f)) return uint16_t(sign | 0x7e00u);
    float a = std::fabs(f);
    if (a >= 65520.0f) return uint16_t(sign | 0x7c00u);
    if (a < 6.103515625e-05f) { // subnormal range: scale into the 10-bit mantissa, round to even
        float scaled = a * 16777216.0f; // 2^24
        return uint16_t(sign | uint16_t(std::nearbyint(scaled)));
    }
    uint32_t abits = bits & 0x7fffffffu;
    abits += 0xfffu + ((abits >> 13) & 1u); // round to nearest even on the 13 dropped bits
    uint32_t exp = (abits >> 23) - 127 + 15;
    return uint16_t(sign | exp << 10 | ((abits >> 13) & 0x3ffu));
}

void convert_to_f32(DType t, const void *src, float *dst, size_t n) {
    switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
        const auto *s = static_cast<const uint16_t *>(src);
        for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
        return;
    }
    case DType::F16: {
        const auto *s = static_cast<const uint16_t *>(src);
        for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
        return;
    }
    case DType::I8: fail("int8 values convert only with their scales (ops/cpu/linear_i8.h)");
    }
}

void f32_to_bf16_n(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
#ifdef __AVX512BF16__
    for (; i + 16 <= n; i += 16) {
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(src + i));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + i), reinterpret_cast<const __m256i &>(h));
    }
#endif
    for (; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void convert_from_f32(DType t, const float *src, void *dst, size_t n) {
    switch (t) {
    case DType::F32: std::memcpy(dst, src, n * 4); return;
    case DType::BF16: {
        auto *d = static_cast<uint16_t *>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
        return;
    }
    case DType::F16: {
        auto *d = static_cast<uint16_t *>(dst);
        for (size_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
        return;
    }
    case DType::I8: fail("int8 values convert only with their scales (ops/cpu/linear_i8.h)");
    }
}

} // namespace zaya
