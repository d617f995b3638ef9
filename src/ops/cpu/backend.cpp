// The CPU backend: the backend table (ops/backend.h) over the ops/cpu functions, on host memory.
#include "ops/backend.h"

#include "core/dtype.h"
#include "core/error.h"
#include "ops/cpu/block.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/linear.h"
#include "ops/cpu/loss.h"
#include "ops/cpu/norm.h"
#include "ops/cpu/reduce.h"
#include "optim/sum_squares.h"

#include <cstring>
#include <limits>

namespace zaya {

namespace {

// y16 = bf16(y), n values, where a caller asked for the copy (Backend's y16 outputs).
void write_bf16(uint16_t *y16, const real *y, int64_t n) {
    if (y16)
        for (int64_t i = 0; i < n; ++i) y16[i] = f32_to_bf16(float(y[i]));
}

class CpuBackend final : public Backend {
  public:
    const char *name() const override { return "cpu"; }
    bool host_memory() const override { return true; }
    RealBuffer alloc(size_t n) const override { return RealBuffer::zeros(n); }
    void upload(void *dst, const void *src, size_t bytes) const override { copy(dst, src, bytes); }
    void download(void *dst, const void *src, size_t bytes) const override { copy(dst, src, bytes); }
    void zero(void *dst, size_t bytes) const override {
        if (bytes) std::memset(dst, 0, bytes);
    }
    void copy(void *dst, const void *src, size_t bytes) const override {
        if (bytes && dst != src) std::memcpy(dst, src, bytes);
    }
    // The CPU's matmul precision is process-wide (cpu::MatmulPrecisionScope): the Trainer scopes it.
    void set_matmul_precision(cpu::MatmulPrecision) override {}

    // A matmul input's bf16 copy is not read here: the GEMMs round their operands themselves (the same bits).
    void linear_forward(real *y, int64_t ldy, MatmulInput x, const real *W, const real *b, int64_t N, int64_t I,
                        int64_t O) override {
        if (ldy == O) return cpu::linear_forward(y, x.x, W, b, N, I, O);
        cpu::gemm(false, true, N, O, I, 1.0f, x.x, I, W, I, 0.0f, y, ldy);
        if (b) cpu::add_bias_rows(y, ldy, b, N, O);
    }
    void linear_backward(real *dx, real *dW, real *db, const real *dy, int64_t ldy, MatmulInput x, const real *W,
                         int64_t N, int64_t I, int64_t O, bool accumulate_dx) override {
        cpu::linear_backward(dx, dW, db, dy, ldy, x.x, W, N, I, O, accumulate_dx);
    }
    void rmsnorm_forward(real *y, uint16_t *y16, real *rstd, const real *x, const real *w, int64_t N, int64_t D,
                         real eps) override {
        cpu::rmsnorm_forward(y, rstd, x, w, N, D, eps);
        write_bf16(y16, y, N * D);
    }
    void rmsnorm_backward(real *dx, real *dw, const real *dy, const real *x, const real *w, const real *rstd,
                          int64_t N, int64_t D, bool accumulate_dx) override {
        cpu::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, D, accumulate_dx);
    }
    void embedding_forward(real *out, const int32_t *tokens, const real *table, const real *bias, const real *scale,
                           int64_t N, int64_t D) override {
        cpu::embedding_forward(out, tokens, table, bias, scale, N, D);
    }
    void embedding_backward(real *dtable, real *dbias, real *dscale, const real *dout, const int32_t *tokens,
                            const real *table, const real *bias, const real *scale, int64_t N, int64_t D,
                            int32_t skip_token) override {
        cpu::embedding_backward(dtable, dbias, dscale, dout, tokens, table, bias, scale, N, D, skip_token);
    }
    void residual_scale_forward(real *out, const real *x, const real *res, const real *hs_scale, const real *hs_bias,
                                const real *res_scale, const real *res_bias, int64_t N, int64_t D) override {
        cpu::residual_scale_forward(out, x, res, hs_scale, hs_bias, res_scale, res_bias, N, D);
    }
    void residual_scale_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias, real *d_res_scale,
                                 real *d_res_bias, const real *dout, const real *x, const real *res,
                                 const real *hs_scale, const real *hs_bias, const real *res_scale,
                                 const real *res_bias, int64_t N, int64_t D, bool accumulate_dres) override {
        cpu::residual_scale_backward(dx, dres, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias, dout, x, res,
                                     hs_scale, hs_bias, res_scale, res_bias, N, D, accumulate_dres);
    }
    void gelu_forward(real *y, const real *x, int64_t n) override { cpu::gelu_forward(y, x, n); }
    void gelu_backward(real *dx, const real *dy, const real *x, int64_t n) override {
        cpu::gelu_backward(dx, dy, x, n);
    }
    void column_dot_add(real *out, const real *a, int64_t lda, const real *b, int64_t ldb, int64_t N,
                        int64_t D) override {
        cpu::column_dot_add(out, a, lda, b, ldb, N, D);
    }

    void rope_tables(real *cos_t, real *sin_t, const int32_t *pos, int64_t N, int64_t rot, double theta) override {
        cpu::rope_tables(cos_t, sin_t, pos, N, rot, theta);
    }
    void rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd,
                      int64_t rot) override {
        cpu::rope_forward(x, cos_t, sin_t, N, H, hd, rot);
    }
    void rope_backward(real *dx, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd,
                       int64_t rot) override {
        cpu::rope_backward(dx, cos_t, sin_t, N, H, hd, rot);
    }
    void cca_conv_forward(real *o, real *p, const real *z, const SeqBatch &b, const cpu::ConvShape &s, const real *wd,
                          const real *bd, const real *wg, const real *bg) override {
        cpu::cca_conv_forward(o, p, z, b.seq_start, b.B, s, wd, bd, wg, bg, b.prefix);
    }
    void cca_conv_backward(real *dz, real *dp, real *dwd, real *dbd, real *dwg, real *dbg, const real *dout,
                           const real *z, const real *p, const SeqBatch &b, const cpu::ConvShape &s, const real *wd,
                           const real *wg) override {
        cpu::cca_conv_backward(dz, dp, dwd, dbd, dwg, dbg, dout, z, p, b.seq_start, b.B, s, wd, wg, b.prefix);
    }
    void cca_qk_mean_forward(real *q, real *k, const real *o, const real *z, int64_t N, int64_t nq, int64_t nkv,
                             int64_t hd) override {
        cpu::cca_qk_mean_forward(q, k, o, z, N, nq, nkv, hd);
    }
    void cca_qk_mean_backward(real *dconv, real *dz, const real *dq, const real *dk, int64_t N, int64_t nq,
                              int64_t nkv, int64_t hd) override {
        cpu::cca_qk_mean_backward(dconv, dz, dq, dk, N, nq, nkv, hd);
    }
    void cca_qk_norm_forward(real *q, real *k, real *qn, real *kn, const real *temp, int64_t N, int64_t nq,
                             int64_t nkv, int64_t hd) override {
        cpu::cca_qk_norm_forward(q, k, qn, kn, temp, N, nq, nkv, hd);
    }
    void cca_qk_norm_backward(real *dq, real *dk, real *dtemp, const real *q_pre, const real *k_pre, const real *qn,
                              const real *kn, const real *temp, int64_t N, int64_t nq, int64_t nkv,
                              int64_t hd) override {
        cpu::cca_qk_norm_backward(dq, dk, dtemp, q_pre, k_pre, qn, kn, temp, N, nq, nkv, hd);
    }
    void delayed_values_forward(real *v, int64_t ldv, const real *v_del, const real *bias, const SeqBatch &b,
                                int64_t Dv) override {
        cpu::delayed_values_forward(v, ldv, v_del, bias, b.seq_start, b.B, Dv, b.prefix);
    }
    void delayed_values_backward(real *d_vdel, real *dbias, const real *dv, int64_t ldv, const SeqBatch &b,
                                 int64_t Dv) override {
        cpu::delayed_values_backward(d_vdel, dbias, dv, ldv, b.seq_start, b.B, Dv, b.prefix);
    }
    void attention_forward(real *out, uint16_t *out16, real *lse, const real *q, const real *k, const real *v,
                           const SeqBatch &b, const cpu::AttnShape &s) override {
        cpu::attention_forward(out, lse, q, k, v, b.seq_start, b.B, s, b.prefix);
        write_bf16(out16, out, b.N * s.nq * s.hd);
    }
    void attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *out, const real *lse,
                            const real *q, const real *k, const real *v, const SeqBatch &b,
                            const cpu::AttnShape &s) override {
        cpu::attention_backward(dq, dk, dv, dout, out, lse, q, k, v, b.seq_start, b.B, s, b.prefix);
    }

    void eda_forward(real *rho, const real *h, const real *scale, const real *rho_prev, int64_t N,
                     int64_t R) override {
        cpu::eda_forward(rho, h, scale, rho_prev, N, R);
    }
    void eda_carry_backward(real *d_carry, const real *scale, const real *d_rho, int64_t N, int64_t R) override {
        cpu::eda_carry_backward(d_carry, scale, d_rho, N, R);
    }
    void router_select_forward(real *probs, int32_t *choice, real *p_sel, const real *logits, const real *bias,
                               int64_t N, int64_t K) override {
        cpu::router_select_forward(probs, choice, p_sel, logits, bias, N, K);
    }
    void router_select_backward(real *dlogits, const real *dp_sel, const real *probs, const int32_t *choice,
                                int64_t N, int64_t K) override {
        cpu::router_select_backward(dlogits, dp_sel, probs, choice, N, K);
    }
    void moe_group_tokens(int32_t *order, int64_t *offsets, const int32_t *choice, int64_t N, int64_t E) override {
        cpu::moe_group_tokens(order, offsets, choice, N, E);
    }
    void add_group_sizes(int64_t *sizes, const int64_t *offsets, int64_t groups) override {
        for (int64_t g = 0; g < groups; ++g) sizes[g] += offsets[g + 1] - offsets[g];
    }
    void moe_experts_forward(real *out, real *xg, real *h, real *a, real *y, const real *x, const int32_t *order,
                             const int64_t *offsets, const real *p_sel, const real *gate_up, const real *down,
                             int64_t N, const cpu::MoeShape &s) override {
        cpu::moe_experts_forward(out, xg, h, a, y, x, order, offsets, p_sel, gate_up, down, N, s);
    }
    void moe_experts_backward(real *dx, real *dp_sel, real *dgate_up, real *ddown, real *dy, real *da, real *dh,
                              real *dxg, const real *dout, const int32_t *order, const int64_t *offsets,
                              const real *p_sel, const real *xg, const real *h, const real *a, const real *y,
                              const real *gate_up, const real *down, int64_t N, const cpu::MoeShape &s) override {
        cpu::moe_experts_backward(dx, dp_sel, dgate_up, ddown, dy, da, dh, dxg, dout, order, offsets, p_sel, xg, h, a,
                                  y, gate_up, down, N, s);
    }

    double lm_head_forward(real *logits, real *losses, const real *x, const real *W, const real *b,
                           const int32_t *targets, int64_t N, int64_t D, int64_t V) override {
        if (!logits) fail("cpu backend: the LM head needs logits storage");
        cpu::linear_forward(logits, x, W, b, N, D, V);
        return targets ? cpu::cross_entropy_forward(losses, logits, targets, N, V) : 0.0;
    }
    double lm_head_backward(real *dx, real *dW, real *db, real *logits, const real *x, const real *W, const real *,
                            const int32_t *targets, int64_t N, int64_t D, int64_t V, real loss_scale,
                            int64_t count) override {
        if (!logits) fail("cpu backend: the LM head backward needs the forward's logits");
        cpu::cross_entropy_backward(logits, targets, N, V, loss_scale / real(count));
        cpu::linear_backward(dx, dW, db, logits, V, x, W, N, D, V, false);
        return std::numeric_limits<double>::quiet_NaN(); // the loss came from the forward's logits
    }
    bool lm_head_needs_logits() const override { return true; }

    double sum_squares(const real *x, size_t n) override { return zaya::sum_squares(x, n); }
    void sum_squares_partials(const real *base, std::span<const std::pair<size_t, size_t>> pieces,
                              double *partials) override {
#pragma omp parallel for schedule(static) if (pieces.size() > 1)
        for (size_t i = 0; i < pieces.size(); ++i)
            partials[i] = sum_squares_partial(base + pieces[i].first, pieces[i].second);
    }
    void scale(real *x, size_t n, real c) override {
#pragma omp parallel for simd if (n > (size_t(1) << 15))
        for (size_t i = 0; i < n; ++i) x[i] *= c;
    }
    void adamw_update(real *param, const real *grad, real *exp_avg, real *exp_avg_sq, size_t n, double lr,
                      double weight_decay, const AdamWHyper &hyper, int64_t step) override {
        zaya::adamw_update(param, grad, exp_avg, exp_avg_sq, n, lr, weight_decay, hyper, step);
    }
    void muon_step(real *, const real *, real *, int64_t, int64_t, int64_t, double, double,
                   const MuonHyper &) override {
        fail("internal error: on the CPU, Muon runs in Optimizer::update (whole matrices per thread)");
    }

    // Fused ops: the chains themselves, so the numbers are those of the unfused ops (the router MLP: the table's
    // default, Backend::router_mlp_forward).
    void residual_rmsnorm_forward(real *out, real *y, uint16_t *y16, real *rstd, const real *x, const real *res,
                                  const real *hs_scale, const real *hs_bias, const real *res_scale,
                                  const real *res_bias, const real *w, int64_t N, int64_t D, real eps) override {
        cpu::residual_scale_forward(out, x, res, hs_scale, hs_bias, res_scale, res_bias, N, D);
        cpu::rmsnorm_forward(y, rstd, out, w, N, D, eps);
        write_bf16(y16, y, N * D);
    }
    void rmsnorm_residual_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias, real *d_res_scale,
                                   real *d_res_bias, real *dw, real *g, const real *dy, const real *out,
                                   const real *w, const real *rstd, const real *x, const real *res,
                                   const real *hs_scale, const real *hs_bias, const real *res_scale,
                                   const real *res_bias, int64_t N, int64_t D, bool accumulate_g,
                                   bool accumulate_dres) override {
        cpu::rmsnorm_backward(g, dw, dy, out, w, rstd, N, D, accumulate_g);
        cpu::residual_scale_backward(dx, dres, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias, g, x, res, hs_scale,
                                     hs_bias, res_scale, res_bias, N, D, accumulate_dres);
    }
    void cca_conv_qk_forward(real *o, real *p, real *q, real *k, real *qn, real *kn, const real *z, const SeqBatch &b,
                             const cpu::ConvShape &s, const real *wd, const real *bd, const real *wg, const real *bg,
                             const real *temp, const real *cos_t, const real *sin_t, int64_t nq, int64_t nkv,
                             int64_t rot) override {
        const int64_t hd = s.C / s.groups;
        cpu::cca_conv_forward(o, p, z, b.seq_start, b.B, s, wd, bd, wg, bg, b.prefix);
        cpu::cca_qk_mean_forward(q, k, o, z, b.N, nq, nkv, hd);
        cpu::cca_qk_norm_forward(q, k, qn, kn, temp, b.N, nq, nkv, hd);
        cpu::rope_forward(q, cos_t, sin_t, b.N, nq, hd, rot);
        cpu::rope_forward(k, cos_t, sin_t, b.N, nkv, hd, rot);
    }
    void cca_qk_backward(real *dconv, real *dz, real *dtemp, real *dq, real *dk, real *q_pre, real *k_pre,
                         const real *conv, const real *z, const real *qn, const real *kn, const real *temp,
                         const real *cos_t, const real *sin_t, int64_t N, int64_t nq, int64_t nkv, int64_t hd,
                         int64_t rot) override {
        cpu::rope_backward(dq, cos_t, sin_t, N, nq, hd, rot);
        cpu::rope_backward(dk, cos_t, sin_t, N, nkv, hd, rot);
        cpu::cca_qk_mean_forward(q_pre, k_pre, conv, z, N, nq, nkv, hd);
        cpu::cca_qk_norm_backward(dq, dk, dtemp, q_pre, k_pre, qn, kn, temp, N, nq, nkv, hd);
        cpu::cca_qk_mean_backward(dconv, dz, dq, dk, N, nq, nkv, hd);
    }
};

} // namespace

Backend &cpu_backend() {
    static CpuBackend b;
    return b;
}

} // namespace zaya
