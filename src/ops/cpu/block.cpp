#include "ops/cpu/block.h"

#include <algorithm>

namespace zaya::cpu {

void add_bias_rows(real *y, int64_t ldy, const real *b, int64_t N, int64_t O) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
        real *row = y + n * ldy;
#pragma omp simd
        for (int64_t o = 0; o < O; ++o) row[o] += b[o];
    }
}

void delayed_values_forward(real *v, int64_t ldv, const real *v_del, const real *bias, const int64_t *seq_start,
                            int64_t B, int64_t Dv, const SeqPrefix *prefix) {
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < B; ++s)
        for (int64_t n = seq_start[s]; n < seq_start[s + 1]; ++n) {
            real *dst = v + n * ldv;
            if (n > seq_start[s]) std::copy(v_del + (n - 1) * Dv, v_del + n * Dv, dst);
            else if (prefix && prefix->continues(s)) std::copy_n(prefix->v_prev + prefix->halo_entry(s) * Dv, Dv, dst);
            else if (bias) std::copy(bias, bias + Dv, dst);
            else std::fill(dst, dst + Dv, real(0));
        }
}

void delayed_values_backward(real *d_vdel, real *dbias, const real *dv, int64_t ldv, const int64_t *seq_start,
                             int64_t B, int64_t Dv, const SeqPrefix *prefix) {
    real *dv_prev = prefix ? prefix->dv_prev : nullptr;
    for (int64_t s = 0; s < B; ++s) { // in sequence order: dbias sums the first tokens in order
        const bool continues = prefix && prefix->continues(s);
        const int64_t entry = prefix ? prefix->halo_entry(s) : -1;
        if (dv_prev && entry >= 0 && !continues) std::fill_n(dv_prev + entry * Dv, Dv, real(0));
        for (int64_t n = seq_start[s]; n < seq_start[s + 1]; ++n) {
            const real *src = dv + n * ldv;
            if (n > seq_start[s]) std::copy(src, src + Dv, d_vdel + (n - 1) * Dv);
            else if (continues) std::copy(src, src + Dv, dv_prev + entry * Dv);
            else if (dbias)
                for (int64_t i = 0; i < Dv; ++i) dbias[i] += src[i];
            if (n + 1 == seq_start[s + 1]) std::fill(d_vdel + n * Dv, d_vdel + (n + 1) * Dv, real(0));
        }
    }
}

void eda_forward(real *rho, const real *h, const real *scale, const real *rho_prev, int64_t N, int64_t R) {
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < R; ++i) {
            real v = h[n * R + i];
            if (scale && rho_prev) v += scale[i] * rho_prev[n * R + i];
            rho[n * R + i] = v;
        }
}

void eda_carry_backward(real *d_carry, const real *scale, const real *d_rho, int64_t N, int64_t R) {
    if (!scale) {
        std::fill(d_carry, d_carry + N * R, real(0));
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < R; ++i) d_carry[n * R + i] = scale[i] * d_rho[n * R + i];
}

} // namespace zaya::cpu
