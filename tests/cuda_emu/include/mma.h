// CPU stand-in for mma.h (tests/cuda_emu): the WMMA subset the kernels use — 16×16×16 bf16 tiles with fp32
// accumulators. A fragment here holds its whole tile in every lane (the real per-lane split is unspecified, and code
// that only fills, loads, multiplies and stores cannot tell); loads and stores check CUDA's rules (pointer 32-byte
// aligned, ldm a multiple of 16 bytes) and are warp collectives: every lane must take part (a warp barrier), and
// only lane 0 writes a stored tile. mma_sync sums k in order in fp32, which the tensor cores need not do: compare
// with tolerances, as against any GPU.
#pragma once
#include "cuda_bf16.h"
#include "cuda_runtime.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

namespace emu {
void warp_sync();    // a barrier of the calling thread's warp
unsigned lane_id();  // the calling thread's lane in its warp
} // namespace emu

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16x16x16 tiles only");
    static constexpr int num_elements = 256;
    T x[256]; // matrix_a: [m][k]; matrix_b: [k][n]; accumulator: [m][n]
};

namespace detail {
template <class T> void check(const T *p, unsigned ldm) {
    if (reinterpret_cast<uintptr_t>(p) % 32 != 0 || (ldm * sizeof(T)) % 16 != 0) {
        std::fprintf(stderr, "wmma: pointer %p not 32-byte aligned or ldm %u not a multiple of 16 bytes\n",
                     static_cast<const void *>(p), ldm);
        std::abort();
    }
}
template <class Layout> constexpr bool is_row = std::is_same_v<Layout, row_major>;
} // namespace detail

template <class T> void fill_fragment(fragment<accumulator, 16, 16, 16, T> &f, T v) {
    for (T &e : f.x) e = v;
}

// A[m][k] from p: row_major p[m·ldm + k], col_major p[m + k·ldm].
template <class Layout>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, __nv_bfloat16, Layout> &f, const __nv_bfloat16 *p,
                      unsigned ldm) {
    detail::check(p, ldm);
    emu::warp_sync();
    for (int m = 0; m < 16; ++m)
        for (int k = 0; k < 16; ++k) f.x[m * 16 + k] = detail::is_row<Layout> ? p[m * ldm + k] : p[m + k * ldm];
    emu::warp_sync();
}

// B[k][n] from p: row_major p[k·ldm + n], col_major p[k + n·ldm].
template <class Layout>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, __nv_bfloat16, Layout> &f, const __nv_bfloat16 *p,
                      unsigned ldm) {
    detail::check(p, ldm);
    emu::warp_sync();
    for (int k = 0; k < 16; ++k)
        for (int n = 0; n < 16; ++n) f.x[k * 16 + n] = detail::is_row<Layout> ? p[k * ldm + n] : p[k + n * ldm];
    emu::warp_sync();
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm,
                             layout_t layout) {
    detail::check(p, ldm);
    emu::warp_sync();
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) f.x[m * 16 + n] = layout == mem_row_major ? p[m * ldm + n] : p[m + n * ldm];
    emu::warp_sync();
}

// d = a·b + c, fp32 accumulation.
template <class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d, const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
    float out[256];
    for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 16; ++n) {
            float s = c.x[m * 16 + n];
            for (int k = 0; k < 16; ++k) s += __bfloat162float(a.x[m * 16 + k]) * __bfloat162float(b.x[k * 16 + n]);
            out[m * 16 + n] = s;
        }
    for (int i = 0; i < 256; ++i) d.x[i] = out[i];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm,
                              layout_t layout) {
    detail::check(p, ldm);
    emu::warp_sync();
    if (emu::lane_id() == 0)
        for (int m = 0; m < 16; ++m)
            for (int n = 0; n < 16; ++n) (layout == mem_row_major ? p[m * ldm + n] : p[m + n * ldm]) = f.x[m * 16 + n];
    emu::warp_sync();
}

} // namespace nvcuda::wmma
