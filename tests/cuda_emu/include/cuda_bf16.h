// CPU stand-in for cuda_bf16.h (tests/cuda_emu): the conversions the kernels use.
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
    uint16_t bits;
};

// Round to nearest even; NaN stays a (quiet) NaN — as the device intrinsic.
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return {uint16_t(u >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 h) {
    const uint32_t u = uint32_t(h.bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }
