// The CUDA backend: the backend table (ops/backend.h) over the ops/cuda kernels, on device memory. Host C++ (no
// CUDA headers); built into zaya_cuda. Matmuls run in fp32 (true fp32, no TF32) or, with MatmulPrecision::BF16,
// on bf16 copies of both operands with fp32 accumulation (autocast's treatment); everything else is fp32.
#include "ops/backend.h"

#include "core/error.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/block.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/lm_head.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/muon.h"
#include "ops/cuda/optim.h"
#include "ops/cuda/ops.h"
#include "ops/cuda/runtime.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace zaya {

static_assert(std::is_same_v<real, float>, "the CUDA backend is fp32 (not part of the ZAYA_DOUBLE build)");

namespace {

using cuda::VarlenBatch;

// The batch as the kernels take it: whole sequences (context parallelism's chunks run on the CPU backend so far).
VarlenBatch varlen(const SeqBatch &b) {
    if (b.prefix) fail("context parallelism runs on the CPU backend only so far (use --device cpu)");
    return VarlenBatch{b.seq_start, b.B, b.N, b.max_len};
}

// A device buffer that grows to the largest size asked for (first steps only), for bf16 operand copies.
struct GrowingBuffer {
    cuda::DeviceArray<uint16_t> data;
    uint16_t *at_least(size_t n) {
        if (data.size() < n) data = {}, data = cuda::DeviceArray<uint16_t>(n); // the old freed first
        return data.data();
    }
};

class CudaBackend final : public Backend {
  public:
    const char *name() const override { return "cuda"; }
    bool host_memory() const override { return false; }
    size_t peak_device_bytes() const override { return cuda::device_memory().peak; }
    RealBuffer alloc(size_t n) const override {
        const size_t bytes = (n * sizeof(real) + 63) / 64 * 64;
        RealBuffer b;
        b.ptr = {static_cast<real *>(bytes ? cuda::device_alloc(bytes) : nullptr), cuda::device_free};
        b.size = n;
        if (bytes) cuda::fill_bytes(b.data(), 0, bytes);
        return b;
    }
    void upload(void *dst, const void *src, size_t bytes) const override {
        if (bytes) cuda::copy_to_device(dst, src, bytes);
    }
    void download(void *dst, const void *src, size_t bytes) const override {
        if (bytes) cuda::copy_to_host(dst, src, bytes);
    }
    void zero(void *dst, size_t bytes) const override {
        if (bytes) cuda::fill_bytes(dst, 0, bytes);
    }
    void copy(void *dst, const void *src, size_t bytes) const override {
        if (bytes && dst != src) cuda::copy_on_device(dst, src, bytes);
    }
    void synchronize() const override { cuda::synchronize(); }
    void set_matmul_precision(cpu::MatmulPrecision p) override { precision_ = p; }
    bool bf16() const { return precision_ == cpu::MatmulPrecision::BF16; }
    void set_weights_unchanged(bool on) override {
        weights_unchanged_ = on;
        if (!on)
            for (auto &entry : weights16_) entry.second.fresh = false;
    }

    // A bf16 copy of the n-element weight at W (its elements in order), or of the CCA conv weight wg packed per
    // head group (pack_conv_weight_bf16). While the weights are unchanged it is made at its first use and kept (one
    // buffer per weight and form, reused by later steps); otherwise it is made again, into `transient`, at every use.
    const uint16_t *weight_bf16(const float *W, size_t n, GrowingBuffer &transient) {
        return kept_bf16(W, n, WeightForm::Plain, transient, [&](uint16_t *d) { cuda::to_bf16(d, W, int64_t(n)); });
    }
    const uint16_t *conv_weight_bf16(const float *wg, const cpu::ConvShape &s) {
        const size_t n = size_t(s.C * s.k1 * (s.C / s.groups));
        return kept_bf16(wg, n, WeightForm::ConvPacked, conv16_,
                         [&](uint16_t *d) { cuda::pack_conv_weight_bf16(d, wg, s); });
    }
    enum class WeightForm { Plain, ConvPacked };
    template <class Make>
    const uint16_t *kept_bf16(const float *W, size_t n, WeightForm form, GrowingBuffer &transient, Make make) {
        if (!weights_unchanged_) {
            uint16_t *d = transient.at_least(n);
            make(d);
            return d;
        }
        WeightCopy &c = weights16_[{W, form}];
        if (c.data.size() != n) c.data = cuda::DeviceArray<uint16_t>(n), c.fresh = false;
        if (!c.fresh) make(c.data.data()), c.fresh = true;
        return c.data.data();
    }
    // Under bf16 matmuls, the CCA conv's grouped stage on tensor cores (head sizes it takes: multiples of 8).
    const uint16_t *conv_bf16(const float *wg, const cpu::ConvShape &s) {
        return bf16() && cuda::conv_on_tensor_cores(s) ? conv_weight_bf16(wg, s) : nullptr;
    }

    // bf16 rows must start 16-byte aligned for cuBLASLt's tensor-core kernels: a matmul whose leading dimensions
    // are not all multiples of 8 (the router's E+1 = 17 classes) runs in fp32 instead — a tiny matrix, no algorithm
    // hunt.
    bool bf16_matmul(int64_t lda, int64_t ldb) const { return bf16() && lda % 8 == 0 && ldb % 8 == 0; }
    // A bf16 copy, in buf, of the rows × cols operand at p with row stride ld: the extent it spans in memory, the
    // last row only as wide as it is (the copy keeps the stride).
    static const uint16_t *bf16_copy(GrowingBuffer &buf, const float *p, int64_t rows, int64_t cols, int64_t ld) {
        const int64_t n = (rows - 1) * ld + cols;
        uint16_t *d = buf.at_least(size_t(n));
        cuda::to_bf16(d, p, n);
        return d;
    }

    // C = op(A)·op(B) (+ beta·C) in the backend's precision; A's rows have stride lda (likewise B).
    void matmul(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B,
                int64_t ldb, float beta, float *C, int64_t ldc) {
        if (!bf16_matmul(lda, ldb)) return cuda::gemm_f32(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
        const uint16_t *a16 = bf16_copy(a16_, A, ta ? K : M, ta ? M : K, lda);
        const uint16_t *b16 = bf16_copy(b16_, B, tb ? N : K, tb ? K : N, ldb);
        cuda::gemm_bf16(ta, tb, M, N, K, 1.0f, a16, lda, b16, ldb, beta, C, ldc);
    }

    void linear_forward(real *y, int64_t ldy, MatmulInput x, const real *W, const real *b, int64_t N, int64_t I,
                        int64_t O) override {
        const LinearOut part{y, ldy, W, b, O};
        linears_forward({&part, 1}, x, N, I);
    }
    void linear_backward(real *dx, real *dW, real *db, const real *dy, int64_t ldy, MatmulInput x, const real *W,
                         int64_t N, int64_t I, int64_t O, bool accumulate_dx) override {
        const LinearGrad part{dy, ldy, W, O, dW, db};
        linears_backward(dx, {&part, 1}, x, N, I, accumulate_dx);
    }
    // Under bf16 matmuls x is converted once for all the parts (not at all when its producer wrote the bf16 copy),
    // and each part's dy once for both of its matmuls (dx and dW): a linear's operands cross memory once each, not
    // once per GEMM that reads them.
    void linears_forward(std::span<const LinearOut> parts, MatmulInput x, int64_t N, int64_t I) override {
        if (N == 0) return;
        const uint16_t *x16 = x.x16; // else converted at its first use
        for (const LinearOut &p : parts) {
            if (bf16_matmul(I, I)) {
                if (!x16) x16 = bf16_copy(x16_, x.x, N, I, I);
                const uint16_t *w16 = weight_bf16(p.W, size_t(p.O * I), b16_);
                cuda::gemm_bf16(false, true, N, p.O, I, 1.0f, x16, I, w16, I, 0.0f, p.y, p.ldy);
            } else {
                cuda::gemm_f32(false, true, N, p.O, I, 1.0f, x.x, I, p.W, I, 0.0f, p.y, p.ldy);
            }
            if (p.b) cuda::add_bias_rows(p.y, p.ldy, p.b, N, p.O);
        }
    }
    void linears_backward(real *dx, std::span<const LinearGrad> parts, MatmulInput x, int64_t N, int64_t I,
                          bool accumulate_dx) override {
        if (N == 0) return;
        const uint16_t *x16 = x.x16;
        for (const LinearGrad &p : parts) {
            const float beta = accumulate_dx ? 1.0f : 0.0f;
            if (bf16_matmul(p.O, I)) {
                // dy's own columns, packed (a part of a wider gradient, as q and k of the conv input's, is read
                // alone, not with the stride's worth of its neighbours).
                uint16_t *dy16 = a16_.at_least(size_t(N * p.O));
                cuda::to_bf16_rows(dy16, p.dy, N, p.O, p.ldy);
                if (dx) {
                    const uint16_t *w16 = weight_bf16(p.W, size_t(p.O * I), b16_);
                    cuda::gemm_bf16(false, false, N, I, p.O, 1.0f, dy16, p.O, w16, I, beta, dx, I);
                }
                if (!x16) x16 = bf16_copy(x16_, x.x, N, I, I);
                cuda::gemm_bf16(true, false, p.O, I, N, 1.0f, dy16, p.O, x16, I, 1.0f, p.dW, I);
            } else {
                if (dx) cuda::gemm_f32(false, false, N, I, p.O, 1.0f, p.dy, p.ldy, p.W, I, beta, dx, I);
                cuda::gemm_f32(true, false, p.O, I, N, 1.0f, p.dy, p.ldy, x.x, I, 1.0f, p.dW, I);
            }
            if (p.db) cuda::column_dot_add(p.db, p.dy, p.ldy, nullptr, 0, N, p.O);
            accumulate_dx = true; // the later parts add to what the first wrote
        }
    }
    void rmsnorm_forward(real *y, uint16_t *y16, real *rstd, const real *x, const real *w, int64_t N, int64_t D,
                         real eps) override {
        cuda::rmsnorm_forward(y, rstd, x, w, N, D, eps, y16);
    }
    void rmsnorm_backward(real *dx, real *dw, const real *dy, const real *x, const real *w, const real *rstd,
                          int64_t N, int64_t D, bool accumulate_dx) override {
        cuda::rmsnorm_backward(dx, dw, dy, x, w, rstd, N, D, accumulate_dx);
    }
    void embedding_forward(real *out, const int32_t *tokens, const real *table, const real *bias, const real *scale,
                           int64_t N, int64_t D) override {
        cuda::embedding_forward(out, tokens, table, bias, scale, N, D);
    }
    void embedding_backward(real *dtable, real *dbias, real *dscale, const real *dout, const int32_t *tokens,
                            const real *table, const real *bias, const real *scale, int64_t N, int64_t D,
                            int32_t skip_token) override {
        cuda::embedding_backward(dtable, dbias, dscale, dout, tokens, table, bias, scale, N, D, skip_token);
    }
    void residual_scale_forward(real *out, const real *x, const real *res, const real *hs_scale, const real *hs_bias,
                                const real *res_scale, const real *res_bias, int64_t N, int64_t D) override {
        cuda::residual_scale_forward(out, x, res, hs_scale, hs_bias, res_scale, res_bias, N, D);
    }
    void residual_scale_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias, real *d_res_scale,
                                 real *d_res_bias, const real *dout, const real *x, const real *res,
                                 const real *hs_scale, const real *hs_bias, const real *res_scale,
                                 const real *res_bias, int64_t N, int64_t D, bool accumulate_dres) override {
        cuda::residual_scale_backward(dx, dres, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias, dout, x, res,
                                      hs_scale, hs_bias, res_scale, res_bias, N, D, accumulate_dres);
    }
    void gelu_forward(real *y, const real *x, int64_t n) override { cuda::gelu_forward(y, x, n); }
    void gelu_backward(real *dx, const real *dy, const real *x, int64_t n) override {
        cuda::gelu_backward(dx, dy, x, n);
    }
    void column_dot_add(real *out, const real *a, int64_t lda, const real *b, int64_t ldb, int64_t N,
                        int64_t D) override {
        cuda::column_dot_add(out, a, lda, b, ldb, N, D);
    }

    void rope_tables(real *cos_t, real *sin_t, const int32_t *pos, int64_t N, int64_t rot, double theta) override {
        if (rot < 2) return;
        auto key = std::make_pair(rot, theta);
        auto it = inv_freq_.find(key);
        if (it == inv_freq_.end()) { // once per (rot, θ): the fp32 bits transformers uses, from the CPU code
            const std::vector<float> f = cpu::rope_inv_freq(rot, theta);
            cuda::DeviceArray<float> d(f.size());
            cuda::copy_to_device(d.data(), f.data(), f.size() * sizeof(float));
            it = inv_freq_.emplace(key, std::move(d)).first;
        }
        cuda::rope_tables(cos_t, sin_t, pos, it->second.data(), N, rot / 2);
    }
    void rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd,
                      int64_t rot) override {
        cuda::rope_forward(x, cos_t, sin_t, N, H, hd, rot);
    }
    void rope_backward(real *dx, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd,
                       int64_t rot) override {
        cuda::rope_backward(dx, cos_t, sin_t, N, H, hd, rot);
    }
    void cca_conv_forward(real *o, real *p, const real *z, const SeqBatch &b, const cpu::ConvShape &s, const real *wd,
                          const real *bd, const real *wg, const real *bg) override {
        if (const uint16_t *wg16 = conv_bf16(wg, s))
            return cuda::cca_conv_forward_bf16(o, p, z, varlen(b), s, wd, bd, wg16, bg);
        cuda::cca_conv_forward(o, p, z, varlen(b), s, wd, bd, wg, bg);
    }
    void cca_conv_backward(real *dz, real *dp, real *dwd, real *dbd, real *dwg, real *dbg, const real *dout,
                           const real *z, const real *p, const SeqBatch &b, const cpu::ConvShape &s, const real *wd,
                           const real *wg) override {
        cuda::cca_conv_backward(dz, dp, dwd, dbd, dwg, dbg, dout, z, p, varlen(b), s, wd, wg, conv_bf16(wg, s));
    }
    void cca_qk_mean_forward(real *q, real *k, const real *o, const real *z, int64_t N, int64_t nq, int64_t nkv,
                             int64_t hd) override {
        cuda::cca_qk_mean_forward(q, k, o, z, N, nq, nkv, hd);
    }
    void cca_qk_mean_backward(real *dconv, real *dz, const real *dq, const real *dk, int64_t N, int64_t nq,
                              int64_t nkv, int64_t hd) override {
        cuda::cca_qk_mean_backward(dconv, dz, dq, dk, N, nq, nkv, hd);
    }
    void cca_qk_norm_forward(real *q, real *k, real *qn, real *kn, const real *temp, int64_t N, int64_t nq,
                             int64_t nkv, int64_t hd) override {
        cuda::cca_qk_norm_forward(q, k, qn, kn, temp, N, nq, nkv, hd);
    }
    void cca_qk_norm_backward(real *dq, real *dk, real *dtemp, const real *q_pre, const real *k_pre, const real *qn,
                              const real *kn, const real *temp, int64_t N, int64_t nq, int64_t nkv,
                              int64_t hd) override {
        cuda::cca_qk_norm_backward(dq, dk, dtemp, q_pre, k_pre, qn, kn, temp, N, nq, nkv, hd);
    }
    void delayed_values_forward(real *v, int64_t ldv, const real *v_del, const real *bias, const SeqBatch &b,
                                int64_t Dv) override {
        const VarlenBatch vb = varlen(b);
        cuda::delayed_values_forward(v, ldv, v_del, bias, vb.seq_start, vb.B, vb.N, Dv);
    }
    void delayed_values_backward(real *d_vdel, real *dbias, const real *dv, int64_t ldv, const SeqBatch &b,
                                 int64_t Dv) override {
        const VarlenBatch vb = varlen(b);
        cuda::delayed_values_backward(d_vdel, dbias, dv, ldv, vb.seq_start, vb.B, vb.N, Dv);
    }
    void attention_forward(real *out, uint16_t *out16, real *lse, const real *q, const real *k, const real *v,
                           const SeqBatch &b, const cpu::AttnShape &s) override {
        // Flash attention on tensor cores under bf16 matmuls (head sizes in steps of 16 up to 128, as every preset
        // has; it writes out16 itself); else true fp32.
        if (bf16() && cuda::attention_on_tensor_cores(s))
            return cuda::attention_forward_bf16(out, lse, q, k, v, varlen(b), s, out16);
        cuda::attention_forward(out, lse, q, k, v, varlen(b), s);
        if (out16) cuda::to_bf16(out16, out, b.N * s.nq * s.hd);
    }
    void attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *out, const real *lse,
                            const real *q, const real *k, const real *v, const SeqBatch &b,
                            const cpu::AttnShape &s) override {
        if (bf16() && cuda::attention_on_tensor_cores(s))
            return cuda::attention_backward_bf16(dq, dk, dv, dout, out, lse, q, k, v, varlen(b), s);
        cuda::attention_backward(dq, dk, dv, dout, out, lse, q, k, v, varlen(b), s);
    }

    void eda_forward(real *rho, const real *h, const real *scale, const real *rho_prev, int64_t N,
                     int64_t R) override {
        cuda::eda_forward(rho, h, scale, rho_prev, N, R);
    }
    void eda_carry_backward(real *d_carry, const real *scale, const real *d_rho, int64_t N, int64_t R) override {
        cuda::eda_carry_backward(d_carry, scale, d_rho, N, R);
    }
    void router_select_forward(real *probs, int32_t *choice, real *p_sel, const real *logits, const real *bias,
                               int64_t N, int64_t K) override {
        cuda::router_select_forward(probs, choice, p_sel, logits, bias, N, K);
    }
    void router_select_backward(real *dlogits, const real *dp_sel, const real *probs, const int32_t *choice,
                                int64_t N, int64_t K) override {
        cuda::router_select_backward(dlogits, dp_sel, probs, choice, N, K);
    }
    void moe_group_tokens(int32_t *order, int64_t *offsets, const int32_t *choice, int64_t N, int64_t E) override {
        cuda::moe_group_tokens(order, offsets, choice, N, E);
    }
    void add_group_sizes(int64_t *sizes, const int64_t *offsets, int64_t groups) override {
        cuda::add_group_sizes(sizes, offsets, groups);
    }
    void moe_experts_forward(real *out, real *xg, real *h, real *a, real *y, const real *x, const int32_t *order,
                             const int64_t *offsets, const real *p_sel, const real *gate_up, const real *down,
                             int64_t N, const cpu::MoeShape &s) override {
        const auto w16 = expert_weights_bf16(gate_up, down, s);
        cuda::moe_experts_forward(out, xg, h, a, y, x, order, offsets, p_sel, gate_up, down, N, s,
                                  w16 ? &*w16 : nullptr);
    }
    void moe_experts_backward(real *dx, real *dp_sel, real *dgate_up, real *ddown, real *dy, real *da, real *dh,
                              real *dxg, const real *dout, const int32_t *order, const int64_t *offsets,
                              const real *p_sel, const real *xg, const real *h, const real *a, const real *y,
                              const real *gate_up, const real *down, int64_t N, const cpu::MoeShape &s) override {
        const auto w16 = expert_weights_bf16(gate_up, down, s);
        cuda::moe_experts_backward(dx, dp_sel, dgate_up, ddown, dy, da, dh, dxg, dout, order, offsets, p_sel, xg, h,
                                   a, y, gate_up, down, N, s, w16 ? &*w16 : nullptr);
    }
    // Under bf16 matmuls, the experts on tensor cores (shapes it takes: D and I multiples of 8; else fp32).
    std::optional<cuda::ExpertWeightsBf16> expert_weights_bf16(const float *gate_up, const float *down,
                                                               const cpu::MoeShape &s) {
        if (!bf16() || s.E == 0 || !cuda::experts_on_tensor_cores(s)) return std::nullopt;
        const size_t n = size_t(s.E * s.D * s.I);
        return cuda::ExpertWeightsBf16{weight_bf16(gate_up, 2 * n, gate_up16_), weight_bf16(down, n, down16_)};
    }

    // The LM head's GEMMs in the backend's precision, as every other matmul (the CPU's do the same); the softmax
    // cross-entropy in fp32. Chunks of at most 256 MiB of logits.
    double lm_head_forward(real *logits, real *losses, const real *x, const real *W, const real *b,
                           const int32_t *targets, int64_t N, int64_t D, int64_t V) override {
        if (logits) {
            matmul(false, true, N, V, D, x, D, W, D, 0.0f, logits, V);
            if (b) cuda::add_bias_rows(logits, V, b, N, V);
        }
        if (!targets) return 0.0;
        return cuda::lm_head_loss(losses, x, W, b, targets, N, D, V, cuda::lm_head_chunk_rows(V), bf16());
    }
    double lm_head_backward(real *dx, real *dW, real *db, real *, const real *x, const real *W, const real *b,
                            const int32_t *targets, int64_t N, int64_t D, int64_t V, real loss_scale,
                            int64_t) override {
        return cuda::lm_head_cross_entropy(dx, dW, db, x, W, b, targets, N, D, V, loss_scale,
                                           cuda::lm_head_chunk_rows(V), bf16());
    }
    bool lm_head_needs_logits() const override { return false; }

    double sum_squares(const real *x, size_t n) override { return cuda::sum_squares(x, int64_t(n)); }
    void sum_squares_partials(const real *base, std::span<const std::pair<size_t, size_t>> pieces,
                              double *partials) override {
        std::vector<int64_t> offsets, lengths;
        for (const auto &[offset, n] : pieces) offsets.push_back(int64_t(offset)), lengths.push_back(int64_t(n));
        cuda::sum_squares_partials(partials, base, offsets.data(), lengths.data(), int64_t(pieces.size()));
    }
    void scale(real *x, size_t n, real c) override { cuda::scale(x, int64_t(n), c); }
    void adamw_update(real *param, const real *grad, real *exp_avg, real *exp_avg_sq, size_t n, double lr,
                      double weight_decay, const AdamWHyper &h, int64_t step) override {
        cuda::adamw_update(param, grad, exp_avg, exp_avg_sq, int64_t(n), lr, weight_decay, h.beta1, h.beta2, h.eps,
                           step);
    }
    // Muon as optim/muon.cpp: momentum and Nesterov (torch's lerp), Newton–Schulz on bf16 GEMMs (ns_precision
    // fp32 is the CPU's only), decoupled decay and the adjusted step. The workspace grows to the largest matrix
    // seen (the first step's).
    void muon_step(real *param, const real *grad, real *momentum, int64_t count, int64_t rows, int64_t cols,
                   double lr, double weight_decay, const MuonHyper &h) override {
        const int64_t n = rows * cols, k = std::min(rows, cols);
        if (!ns_ || size_t(n) > ns_numel_ || k > ns_min_dim_ || count > ns_count_) {
            ns_numel_ = std::max(ns_numel_, size_t(n));
            ns_min_dim_ = std::max(ns_min_dim_, k);
            ns_count_ = std::max(ns_count_, count);
            ns_.reset(), muon_u_ = {}; // the old freed first: growing never holds both
            ns_ = std::make_unique<cuda::NewtonSchulzBf16>(ns_numel_, ns_min_dim_, ns_count_);
            muon_u_ = cuda::DeviceArray<float>(ns_numel_ * size_t(ns_count_));
        }
        cuda::muon_momentum(momentum, muon_u_.data(), grad, count * n, float(h.momentum), h.nesterov);
        const cuda::NewtonSchulzParams p{float(h.ns_coefficients[0]), float(h.ns_coefficients[1]),
                                         float(h.ns_coefficients[2]), h.ns_steps, float(h.eps)};
        ns_->run(muon_u_.data(), rows, cols, p, count);
        cuda::muon_apply(param, muon_u_.data(), count * n, float(1.0 - lr * weight_decay),
                         float(-muon_adjusted_lr(lr, h.lr_adjust, rows, cols)));
    }

    // Fused ops (ops/cuda/residual_norm.cu, cca_fused.cu, router_fused.cu).
    void residual_rmsnorm_forward(real *out, real *y, uint16_t *y16, real *rstd, const real *x, const real *res,
                                  const real *hs_scale, const real *hs_bias, const real *res_scale,
                                  const real *res_bias, const real *w, int64_t N, int64_t D, real eps) override {
        cuda::residual_rmsnorm_forward(out, y, rstd, x, res, hs_scale, hs_bias, res_scale, res_bias, w, N, D, eps,
                                       y16);
    }
    void rmsnorm_residual_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias, real *d_res_scale,
                                   real *d_res_bias, real *dw, real *g, const real *dy, const real *out,
                                   const real *w, const real *rstd, const real *x, const real *res,
                                   const real *hs_scale, const real *hs_bias, const real *res_scale,
                                   const real *res_bias, int64_t N, int64_t D, bool accumulate_g,
                                   bool accumulate_dres) override {
        cuda::rmsnorm_residual_backward(dx, dres, d_hs_scale, d_hs_bias, d_res_scale, d_res_bias, dw, g, dy, out, w,
                                        rstd, x, res, hs_scale, hs_bias, res_scale, res_bias, N, D, accumulate_g,
                                        accumulate_dres);
    }
    void cca_conv_qk_forward(real *o, real *p, real *q, real *k, real *qn, real *kn, const real *z, const SeqBatch &b,
                             const cpu::ConvShape &s, const real *wd, const real *bd, const real *wg, const real *bg,
                             const real *temp, const real *cos_t, const real *sin_t, int64_t nq, int64_t nkv,
                             int64_t rot) override {
        cuda::cca_conv_qk_forward(o, p, q, k, qn, kn, z, varlen(b), s, wd, bd, wg, bg, temp, cos_t, sin_t, nq, nkv,
                                  rot, conv_bf16(wg, s));
    }
    void cca_qk_backward(real *dconv, real *dz, real *dtemp, real *dq, real *dk, real *q_pre, real *k_pre,
                         const real *conv, const real *z, const real *qn, const real *kn, const real *temp,
                         const real *cos_t, const real *sin_t, int64_t N, int64_t nq, int64_t nkv, int64_t hd,
                         int64_t rot) override {
        cuda::cca_qk_backward(dconv, dz, dtemp, dq, dk, q_pre, k_pre, conv, z, qn, kn, temp, cos_t, sin_t, N, nq, nkv,
                              hd, rot);
    }
    void router_mlp_forward(real *r_norm, real *r_rstd, real *h1, real *a1, real *h2, real *a2, real *logits,
                            real *probs, int32_t *choice, real *p_sel, const real *rho, const real *norm_w,
                            const real *fc1, const real *fc1_b, const real *fc2, const real *fc2_b, const real *out,
                            const real *bias, int64_t N, int64_t R, int64_t K, real eps) override {
        // One fp32 kernel; bf16 matmuls (autocast's rounding of the operands) and outsize tiles run the chain.
        if (precision_ == cpu::MatmulPrecision::F32 && cuda::router_mlp_fusable(R, K))
            return cuda::router_mlp_forward(r_norm, r_rstd, h1, a1, h2, a2, logits, probs, choice, p_sel, rho, norm_w,
                                            fc1, fc1_b, fc2, fc2_b, out, bias, N, R, K, eps);
        Backend::router_mlp_forward(r_norm, r_rstd, h1, a1, h2, a2, logits, probs, choice, p_sel, rho, norm_w, fc1,
                                    fc1_b, fc2, fc2_b, out, bias, N, R, K, eps);
    }

  protected:
    // Phase marks as events in the stream's order (Backend::phase).
    int64_t record_mark() override { return timeline_.record(); }
    double mark_seconds(int64_t from, int64_t to) override { return timeline_.seconds(from, to); }
    void clear_marks() override { timeline_.clear(); }

  private:
    cuda::EventTimeline timeline_;
    cpu::MatmulPrecision precision_ = cpu::MatmulPrecision::F32;
    // bf16 operand copies: matmul's A and B (a linear's dy and W), and a linears op's shared x; the experts' weights
    // when they are not kept.
    GrowingBuffer a16_, b16_, x16_, gate_up16_, down16_, conv16_;
    // The weights' bf16 copies kept while the weights are unchanged (kept_bf16), by the weight's address and form.
    struct WeightCopy {
        cuda::DeviceArray<uint16_t> data;
        bool fresh = false; // made since the weights last changed
    };
    std::map<std::pair<const float *, WeightForm>, WeightCopy> weights16_;
    bool weights_unchanged_ = false;
    std::map<std::pair<int64_t, double>, cuda::DeviceArray<float>> inv_freq_;
    std::unique_ptr<cuda::NewtonSchulzBf16> ns_;
    cuda::DeviceArray<float> muon_u_; // the update u, orthogonalised in place
    size_t ns_numel_ = 0;
    int64_t ns_min_dim_ = 0, ns_count_ = 0;
};

} // namespace

bool cuda_backend_built() { return true; }

Backend &cuda_backend() {
    static const bool usable = [] {
        std::string why;
        if (!cuda::device_available(&why)) fail("--device cuda: {}", why);
        return true;
    }();
    static CudaBackend b;
    (void)usable;
    return b;
}

} // namespace zaya
