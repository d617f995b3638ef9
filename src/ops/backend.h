// The backend table: every op the model's forward and backward passes run, with the semantics (shapes, layouts,
// = or +=) of the CPU ops in ops/cpu, on memory the backend owns. The model code (model/forward.cpp,
// model/backward.cpp) is written once against it; `cpu_backend()` runs the ops/cpu functions on host memory,
// `cuda_backend()` the ops/cuda kernels on device memory (ops/cuda/backend.cpp). Pointers are always in the
// backend's memory; `upload` / `download` cross to and from the host.
#pragma once
#include "core/buffer.h"
#include "ops/cpu/attention.h"
#include "ops/cpu/cca.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/moe.h"
#include "ops/cpu/seq_prefix.h"
#include "optim/adamw.h"
#include "optim/muon.h"

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace zaya {

// A varlen batch as the ops see it: sequence b owns rows [seq_start[b], seq_start[b+1]) of the N rows; seq_start
// (B+1 entries) is in the backend's memory, the sizes on the host (a GPU sizes its grids with them). prefix
// (ops/cpu/seq_prefix.h): null for whole sequences.
struct SeqBatch {
    const int64_t *seq_start;
    int64_t B, N, max_len;
    const SeqPrefix *prefix = nullptr;
};

// Seconds of one named phase of a pass (Backend::phase_report): summed over its `marks` occurrences.
struct PhaseTime {
    std::string name;
    double seconds = 0;
    int64_t marks = 0;
};

// A matmul input x [rows, cols] (fp32) and, where the op that produced it also wrote one, x16 = bf16(x) (raw bits,
// the same layout): a backend running bf16 matmuls reads x16 instead of converting x; null, it converts. Built
// implicitly from a plain pointer (no copy).
struct MatmulInput {
    const real *x;
    const uint16_t *x16 = nullptr;
    MatmulInput(const real *x_) : x(x_) {} // NOLINT(google-explicit-constructor): a plain input converts
    MatmulInput(const real *x_, const uint16_t *x16_) : x(x_), x16(x16_) {}
};

// One of several linear layers that read the same input (Backend::linears_forward / linears_backward): its weight
// W[O, I], bias b[O] (may be null) and output y[:, 0:O] (row stride ldy).
struct LinearOut {
    real *y;
    int64_t ldy;
    const real *W, *b;
    int64_t O;
};
// The backward of one: the output gradient dy[:, 0:O] (row stride ldy), W[O, I], and the gradients dW[O, I], db[O]
// (+=; db may be null).
struct LinearGrad {
    const real *dy;
    int64_t ldy;
    const real *W;
    int64_t O;
    real *dW, *db;
};

class Backend {
  public:
    virtual ~Backend() = default;
    virtual const char *name() const = 0; // "cpu" | "cuda"
    virtual bool host_memory() const = 0; // pointers are host pointers (upload/download are plain copies)
    // The most device memory this process's allocations on the backend held at once so far (0 on the host: the
    // CPU's is the process's peak resident memory).
    virtual size_t peak_device_bytes() const { return 0; }

    // Memory. alloc: n reals, zero-filled, 64-byte aligned, freed with the buffer.
    virtual RealBuffer alloc(size_t n) const = 0;
    virtual void upload(void *dst, const void *src, size_t bytes) const = 0;
    virtual void download(void *dst, const void *src, size_t bytes) const = 0;
    virtual void zero(void *dst, size_t bytes) const = 0;
    virtual void copy(void *dst, const void *src, size_t bytes) const = 0; // within the backend's memory
    virtual void synchronize() const {}
    // The operand precision of the model's matmuls on this backend (cpu: the process-wide cpu::matmul_precision).
    virtual void set_matmul_precision(cpu::MatmulPrecision p) = 0;
    // While on (WeightsUnchanged below: a training step's micro-batches, an evaluation), the weights the ops are
    // given do not change, so a backend may keep what it derives from them from one call to the next (a GPU's bf16
    // copies of the matrices: converted once per step, not once per use). Off drops what was kept. The CPU keeps
    // nothing.
    virtual void set_weights_unchanged(bool) {}

    // Linear layers: y[:, 0:O] (row stride ldy) = x[N,I]·W[O,I]ᵀ + b (b may be null);
    // dx[N,I] = (or +=) dy·W, dW[O,I] += dyᵀ·x, db[O] += Σ_n dy, dy with row stride ldy (dx, db may be null).
    virtual void linear_forward(real *y, int64_t ldy, MatmulInput x, const real *W, const real *b, int64_t N,
                                int64_t I, int64_t O) = 0;
    virtual void linear_backward(real *dx, real *dW, real *db, const real *dy, int64_t ldy, MatmulInput x,
                                 const real *W, int64_t N, int64_t I, int64_t O, bool accumulate_dx) = 0;
    // Several linears that read the same x[N,I] (a block's q, k and value projections): linear_forward for each
    // part in order; linear_backward for each part in order with dx = (or += by accumulate_dx) Σ_p dy_p·W_p. The
    // defaults call linear_forward / linear_backward part by part; a backend that converts matmul operands (bf16
    // on a GPU) converts x once for all the parts instead of once per matmul.
    virtual void linears_forward(std::span<const LinearOut> parts, MatmulInput x, int64_t N, int64_t I);
    virtual void linears_backward(real *dx, std::span<const LinearGrad> parts, MatmulInput x, int64_t N, int64_t I,
                                  bool accumulate_dx);

    // Norms and elementwise (ops/cpu/norm.h, elementwise.h, reduce.h). An output named `y16` (or `out16`) beside
    // an output y may be null; when given, it receives bf16(y) too (raw bits, y's layout): the MatmulInput copy of
    // an activation that feeds matmuls, written where it is produced.
    virtual void rmsnorm_forward(real *y, uint16_t *y16, real *rstd, const real *x, const real *w, int64_t N,
                                 int64_t D, real eps) = 0;
    virtual void rmsnorm_backward(real *dx, real *dw, const real *dy, const real *x, const real *w, const real *rstd,
                                  int64_t N, int64_t D, bool accumulate_dx) = 0;
    virtual void embedding_forward(real *out, const int32_t *tokens, const real *table, const real *bias,
                                   const real *scale, int64_t N, int64_t D) = 0;
    virtual void embedding_backward(real *dtable, real *dbias, real *dscale, const real *dout, const int32_t *tokens,
                                    const real *table, const real *bias, const real *scale, int64_t N, int64_t D,
                                    int32_t skip_token) = 0;
    virtual void residual_scale_forward(real *out, const real *x, const real *res, const real *hs_scale,
                                        const real *hs_bias, const real *res_scale, const real *res_bias, int64_t N,
                                        int64_t D) = 0;
    virtual void residual_scale_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias, real *d_res_scale,
                                         real *d_res_bias, const real *dout, const real *x, const real *res,
                                         const real *hs_scale, const real *hs_bias, const real *res_scale,
                                         const real *res_bias, int64_t N, int64_t D, bool accumulate_dres) = 0;
    virtual void gelu_forward(real *y, const real *x, int64_t n) = 0;
    virtual void gelu_backward(real *dx, const real *dy, const real *x, int64_t n) = 0;
    virtual void column_dot_add(real *out, const real *a, int64_t lda, const real *b, int64_t ldb, int64_t N,
                                int64_t D) = 0;

    // CCA (ops/cpu/cca.h, ops/cpu/block.h). rope_tables takes positions in the backend's memory.
    virtual void rope_tables(real *cos_t, real *sin_t, const int32_t *pos, int64_t N, int64_t rot, double theta) = 0;
    virtual void rope_forward(real *x, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd,
                              int64_t rot) = 0;
    virtual void rope_backward(real *dx, const real *cos_t, const real *sin_t, int64_t N, int64_t H, int64_t hd,
                               int64_t rot) = 0;
    virtual void cca_conv_forward(real *o, real *p, const real *z, const SeqBatch &b, const cpu::ConvShape &s,
                                  const real *wd, const real *bd, const real *wg, const real *bg) = 0;
    virtual void cca_conv_backward(real *dz, real *dp, real *dwd, real *dbd, real *dwg, real *dbg, const real *dout,
                                   const real *z, const real *p, const SeqBatch &b, const cpu::ConvShape &s,
                                   const real *wd, const real *wg) = 0;
    virtual void cca_qk_mean_forward(real *q, real *k, const real *o, const real *z, int64_t N, int64_t nq,
                                     int64_t nkv, int64_t hd) = 0;
    virtual void cca_qk_mean_backward(real *dconv, real *dz, const real *dq, const real *dk, int64_t N, int64_t nq,
                                      int64_t nkv, int64_t hd) = 0;
    virtual void cca_qk_norm_forward(real *q, real *k, real *qn, real *kn, const real *temp, int64_t N, int64_t nq,
                                     int64_t nkv, int64_t hd) = 0;
    virtual void cca_qk_norm_backward(real *dq, real *dk, real *dtemp, const real *q_pre, const real *k_pre,
                                      const real *qn, const real *kn, const real *temp, int64_t N, int64_t nq,
                                      int64_t nkv, int64_t hd) = 0;
    virtual void delayed_values_forward(real *v, int64_t ldv, const real *v_del, const real *bias, const SeqBatch &b,
                                        int64_t Dv) = 0;
    virtual void delayed_values_backward(real *d_vdel, real *dbias, const real *dv, int64_t ldv, const SeqBatch &b,
                                         int64_t Dv) = 0;
    virtual void attention_forward(real *out, uint16_t *out16, real *lse, const real *q, const real *k,
                                   const real *v, const SeqBatch &b, const cpu::AttnShape &s) = 0;
    virtual void attention_backward(real *dq, real *dk, real *dv, const real *dout, const real *out, const real *lse,
                                    const real *q, const real *k, const real *v, const SeqBatch &b,
                                    const cpu::AttnShape &s) = 0;

    // Router and experts (ops/cpu/moe.h, ops/cpu/block.h).
    virtual void eda_forward(real *rho, const real *h, const real *scale, const real *rho_prev, int64_t N,
                             int64_t R) = 0;
    virtual void eda_carry_backward(real *d_carry, const real *scale, const real *d_rho, int64_t N, int64_t R) = 0;
    virtual void router_select_forward(real *probs, int32_t *choice, real *p_sel, const real *logits,
                                       const real *bias, int64_t N, int64_t K) = 0;
    virtual void router_select_backward(real *dlogits, const real *dp_sel, const real *probs, const int32_t *choice,
                                        int64_t N, int64_t K) = 0;
    virtual void moe_group_tokens(int32_t *order, int64_t *offsets, const int32_t *choice, int64_t N, int64_t E) = 0;
    // sizes[g] += offsets[g+1] − offsets[g] for g < groups: a layer's routing counts from its grouping, added where
    // the offsets are (a device keeps a step's counts there and sends them down once).
    virtual void add_group_sizes(int64_t *sizes, const int64_t *offsets, int64_t groups) = 0;
    virtual void moe_experts_forward(real *out, real *xg, real *h, real *a, real *y, const real *x,
                                     const int32_t *order, const int64_t *offsets, const real *p_sel,
                                     const real *gate_up, const real *down, int64_t N, const cpu::MoeShape &s) = 0;
    virtual void moe_experts_backward(real *dx, real *dp_sel, real *dgate_up, real *ddown, real *dy, real *da,
                                      real *dh, real *dxg, const real *dout, const int32_t *order,
                                      const int64_t *offsets, const real *p_sel, const real *xg, const real *h,
                                      const real *a, const real *y, const real *gate_up, const real *down, int64_t N,
                                      const cpu::MoeShape &s) = 0;

    // LM head + cross-entropy. Forward: losses[N] (targets may be null: no loss) and the mean over rows with a
    // target; logits[N,V] = x·Wᵀ + b are stored when `logits` is non-null (the CPU backend always needs them; the
    // CUDA backend then computes the loss chunk by chunk and never holds [N,V]). Backward: dx[N,D] (=), dW, db +=
    // for loss_scale × the mean over the `count` rows with a target; `logits` is what forward stored (the CPU
    // backend overwrites it with its gradient) or null (recomputed chunk by chunk). A backward that recomputes the
    // logits (lm_head_needs_logits() false) returns the mean loss it saw, as lm_head_forward would have: training
    // then skips the forward's head (model_forward's loss_in_backward); one that reads stored logits returns NaN.
    virtual double lm_head_forward(real *logits, real *losses, const real *x, const real *W, const real *b,
                                   const int32_t *targets, int64_t N, int64_t D, int64_t V) = 0;
    virtual double lm_head_backward(real *dx, real *dW, real *db, real *logits, const real *x, const real *W,
                                    const real *b, const int32_t *targets, int64_t N, int64_t D, int64_t V,
                                    real loss_scale, int64_t count) = 0;
    // Whether lm_head_forward needs stored logits to run a later lm_head_backward.
    virtual bool lm_head_needs_logits() const = 0;

    // Optimizer pieces (optim/): Σx² in double (deterministic), x *= c, one AdamW step (optim/adamw.h), and one
    // Muon step on `count` rows × cols matrices stored back to back (optim/muon.h; momentum their buffer; each matrix
    // its own Newton–Schulz, the batch in one pass — a layer's experts). Muon is for device backends: on the CPU,
    // Optimizer::update runs its own Muon, whole matrices per thread.
    virtual double sum_squares(const real *x, size_t n) = 0;
    // partials[i] (host memory) = Σx² over piece i, (offset, n) of `base`, as one chunk (sum_squares_partial: the
    // pieces are sum_squares's chunks or parts of them, optim/grad_norm.h); a device backend launches once and
    // synchronises once for all of them (the gradient norm's ~30k chunks cost one synchronisation).
    virtual void sum_squares_partials(const real *base, std::span<const std::pair<size_t, size_t>> pieces,
                                      double *partials) = 0;
    virtual void scale(real *x, size_t n, real c) = 0;
    virtual void adamw_update(real *param, const real *grad, real *exp_avg, real *exp_avg_sq, size_t n, double lr,
                              double weight_decay, const AdamWHyper &hyper, int64_t step) = 0;
    virtual void muon_step(real *param, const real *grad, real *momentum, int64_t count, int64_t rows, int64_t cols,
                           double lr, double weight_decay, const MuonHyper &hyper) = 0;

    // Fused ops: one op for a chain of the ops above, the same results (the CPU runs the chain itself, so its numbers
    // are bit-identical; a GPU fuses the passes over memory).
    //
    // residual_scale_forward then rmsnorm_forward of its output: out[N,D] = (x + hs_bias) ⊙ hs_scale +
    // (res + res_bias) ⊙ res_scale (=); y[N,D] = w ⊙ out·rstd (=) (and y16 = bf16(y) when given), rstd[N] =
    // 1/√(mean(out²) + eps) (=).
    virtual void residual_rmsnorm_forward(real *out, real *y, uint16_t *y16, real *rstd, const real *x, const real *res,
                                          const real *hs_scale, const real *hs_bias, const real *res_scale,
                                          const real *res_bias, const real *w, int64_t N, int64_t D, real eps) = 0;
    // rmsnorm_backward of dy[N,D] through the norm of `out` (w, rstd) into g[N,D] (= or += by accumulate_g), dw[D]
    // +=; then residual_scale_backward with dout = g: dx[N,D] (=), dres[N,D] (= or += by accumulate_dres), the four
    // parameter grads [D] +=. g is clobbered (its contents afterwards are unspecified); no output aliases an input.
    virtual void rmsnorm_residual_backward(real *dx, real *dres, real *d_hs_scale, real *d_hs_bias,
                                           real *d_res_scale, real *d_res_bias, real *dw, real *g, const real *dy,
                                           const real *out, const real *w, const real *rstd, const real *x,
                                           const real *res, const real *hs_scale, const real *hs_bias,
                                           const real *res_scale, const real *res_bias, int64_t N, int64_t D,
                                           bool accumulate_g, bool accumulate_dres) = 0;
    // cca_conv_forward (o, p), cca_qk_mean_forward, cca_qk_norm_forward (q, k, qn, kn), then rope_forward on q[N,nq,hd]
    // and k[N,nkv,hd] with tables [N, rot/2]: every output written (=), as the chain writes it. The conv groups are
    // the heads (s.groups = nq + nkv, hd = s.C / s.groups).
    virtual void cca_conv_qk_forward(real *o, real *p, real *q, real *k, real *qn, real *kn, const real *z,
                                     const SeqBatch &b, const cpu::ConvShape &s, const real *wd, const real *bd,
                                     const real *wg, const real *bg, const real *temp, const real *cos_t,
                                     const real *sin_t, int64_t nq, int64_t nkv, int64_t rot) = 0;
    // rope_backward on dq[N,nq,hd] and dk[N,nkv,hd], cca_qk_mean_forward(q_pre, k_pre; conv, z) to recompute the
    // pre-norm vectors, cca_qk_norm_backward (dtemp[nkv] +=), cca_qk_mean_backward: dconv[N,C], dz[N,C] (=). dq, dk,
    // q_pre, k_pre are clobbered (scratch).
    virtual void cca_qk_backward(real *dconv, real *dz, real *dtemp, real *dq, real *dk, real *q_pre, real *k_pre,
                                 const real *conv, const real *z, const real *qn, const real *kn, const real *temp,
                                 const real *cos_t, const real *sin_t, int64_t N, int64_t nq, int64_t nkv,
                                 int64_t hd, int64_t rot) = 0;
    // The router MLP after the EDA state: rmsnorm_forward(r_norm, r_rstd; rho[N,R], norm_w); h1[N,R] = r_norm·fc1ᵀ +
    // fc1_b, a1 = gelu(h1), h2 = a1·fc2ᵀ + fc2_b, a2 = gelu(h2), logits[N,K] = a2·outᵀ; router_select_forward(probs,
    // choice, p_sel; logits, bias). Every output written (=), as the chain writes it. The default runs that chain of
    // this backend's ops (the CPU's implementation, and a device's fallback where its fused kernel does not apply).
    virtual void router_mlp_forward(real *r_norm, real *r_rstd, real *h1, real *a1, real *h2, real *a2, real *logits,
                                    real *probs, int32_t *choice, real *p_sel, const real *rho, const real *norm_w,
                                    const real *fc1, const real *fc1_b, const real *fc2, const real *fc2_b,
                                    const real *out, const real *bias, int64_t N, int64_t R, int64_t K, real eps);

    // Phase timing (`zaya bench train --phases`): while on, phase(name) ends the running phase and starts `name`
    // (a string literal); the time between two marks is charged to the first one's name. A device marks its stream,
    // so a phase's time is that of its work on the device, not of the host's launches (the CPU runs its ops as they
    // are called: there the host clock is the work). Off, a mark costs one test. phase_report() ends the running
    // phase, waits for the device, returns the time per name since timing was switched on (or last reported), in
    // order of first appearance, and starts over.
    void set_phase_timing(bool on);
    void phase(const char *name) {
        if (phase_timing_) phase_marks_.emplace_back(name, record_mark());
    }
    std::vector<PhaseTime> phase_report();

  protected:
    // The timeline behind phase(): record_mark() notes "now" in the backend's order of work and returns an id;
    // mark_seconds(a, b) — called only after synchronize() — the seconds between two; clear_marks() forgets them.
    // The defaults use the host clock.
    virtual int64_t record_mark();
    virtual double mark_seconds(int64_t from, int64_t to);
    virtual void clear_marks();

  private:
    bool phase_timing_ = false;
    std::vector<std::pair<const char *, int64_t>> phase_marks_;
    std::vector<double> host_marks_; // seconds on the steady clock
};

// The scope in which the weights given to `backend`'s ops do not change (Backend::set_weights_unchanged).
class WeightsUnchanged {
  public:
    explicit WeightsUnchanged(Backend &backend) : backend_(backend) { backend_.set_weights_unchanged(true); }
    ~WeightsUnchanged() { backend_.set_weights_unchanged(false); }
    WeightsUnchanged(const WeightsUnchanged &) = delete;
    WeightsUnchanged &operator=(const WeightsUnchanged &) = delete;

  private:
    Backend &backend_;
};

Backend &cpu_backend();
// The CUDA backend (one device: the current one); fails, saying why, when zaya was built without CUDA or no
// device is usable.
Backend &cuda_backend();
// "cpu" | "cuda"; fails naming the value otherwise.
Backend &backend_named(const std::string &device);
bool cuda_backend_built();

} // namespace zaya
