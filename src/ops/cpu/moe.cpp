// The routed SwiGLU experts (moe.h): one GEMM pair per expert over its group of tokens.
#include "core/profile.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/moe.h"

#include <cstring>

namespace zaya::cpu {

void moe_experts_forward(real *out, real *xg, real *h, real *a, real *y, const real *x, const int32_t *order,
                         const int64_t *offsets, const real *p_sel, const real *gate_up, const real *down,
                         int64_t N, const MoeShape &s) {
    ZAYA_PROFILE("experts");
    const int64_t D = s.D, I = s.I, E = s.E;
    // Gather every token's input into expert-grouped order (skip tokens last).
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; ++r) std::memcpy(xg + r * D, x + int64_t(order[r]) * D, size_t(D) * sizeof(real));
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n == 0) continue;
        // h = xg·Gate_Upᵀ [n,2I]; a = silu(gate)⊙up [n,I]; y = a·Downᵀ [n,D]
        gemm(false, true, n, 2 * I, D, 1.0f, xg + r0 * D, D, gate_up + e * 2 * I * D, D, 0.0f, h + r0 * 2 * I, 2 * I);
        swiglu_forward(a + r0 * I, h + r0 * 2 * I, n, I);
        gemm(false, true, n, D, I, 1.0f, a + r0 * I, I, down + e * D * I, I, 0.0f, y + r0 * D, D);
    }
    // Skip-slot tokens: the "expert" is the identity (y = x) under passthrough, else nothing.
    const int64_t s0 = offsets[E], s1 = offsets[E + 1];
    if (s.skip_passthrough) std::memcpy(y + s0 * D, xg + s0 * D, size_t((s1 - s0) * D) * sizeof(real));
    else std::memset(y + s0 * D, 0, size_t((s1 - s0) * D) * sizeof(real));
    // Scatter back, weighted by the unbiased probability of the chosen class.
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
        const int64_t n = order[r];
        const real p = p_sel[n];
        const real *yr = y + r * D;
        real *o = out + n * D;
#pragma omp simd
        for (int64_t i = 0; i < D; ++i) o[i] = p * yr[i];
    }
}

void moe_experts_backward(real *dx, real *dp_sel, real *dgate_up, real *ddown, real *dy, real *da, real *dh,
                          real *dxg, const real *dout, const int32_t *order, const int64_t *offsets,
                          const real *p_sel, const real *xg, const real *h, const real *a, const real *y,
                          const real *gate_up, const real *down, int64_t N, const MoeShape &s) {
    ZAYA_PROFILE("experts_backward");
    const int64_t D = s.D, I = s.I, E = s.E;
    // out[n] = p·y[r]  ⇒  dy[r] = p·dout[n],  dp[n] = dout[n]·y[r]  (y = 0 for skip tokens unless passthrough)
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; ++r) {
        const int64_t n = order[r];
        const real *g = dout + n * D, *yr = y + r * D;
        real *dyr = dy + r * D;
        real dot = 0;
        for (int64_t i = 0; i < D; ++i) dyr[i] = p_sel[n] * g[i], dot += g[i] * yr[i];
        dp_sel[n] = dot;
    }
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = offsets[e], n = offsets[e + 1] - r0;
        if (n == 0) continue;
        const real *Wgu = gate_up + e * 2 * I * D, *Wd = down + e * D * I;
        gemm(false, false, n, I, D, 1.0f, dy + r0 * D, D, Wd, I, 0.0f, da + r0 * I, I);              // da = dy·Down
        gemm(true, false, D, I, n, 1.0f, dy + r0 * D, D, a + r0 * I, I, 1.0f, ddown + e * D * I, I); // dDown += dyᵀa
        swiglu_backward(dh + r0 * 2 * I, da + r0 * I, h + r0 * 2 * I, n, I);
        gemm(false, false, n, D, 2 * I, 1.0f, dh + r0 * 2 * I, 2 * I, Wgu, D, 0.0f, dxg + r0 * D, D); // dxg = dh·GU
        gemm(true, false, 2 * I, D, n, 1.0f, dh + r0 * 2 * I, 2 * I, xg + r0 * D, D, 1.0f, dgate_up + e * 2 * I * D,
             D); // dGU += dhᵀ·xg
    }
    const int64_t s0 = offsets[E], s1 = offsets[E + 1];
    if (s.skip_passthrough) std::memcpy(dxg + s0 * D, dy + s0 * D, size_t((s1 - s0) * D) * sizeof(real));
    else std::memset(dxg + s0 * D, 0, size_t((s1 - s0) * D) * sizeof(real));
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < N; ++r) std::memcpy(dx + int64_t(order[r]) * D, dxg + r * D, size_t(D) * sizeof(real));
}

} // namespace zaya::cpu
