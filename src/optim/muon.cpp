#include "optim/muon.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"
#include "ops/cpu/gemm.h"
#include "optim/sum_squares.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace zaya {

namespace {

// Above this Gram side the symmetric products below compute only the block upper triangle (3 of 4 blocks for
// 256) and mirror it: 25 % fewer FLOPs in two of each step's three GEMMs, at blocks still large enough for
// oneDNN to run near its peak.
constexpr int64_t kSymBlock = 128;

// G[k,k] = Xᵀ·X (tall: X is len×k) or X·Xᵀ (X is k×len), X bf16 with row stride ld; symmetric, so only blocks
// (bi ≤ bj) are computed and the rest mirrored.
void symmetric_gram_bf16(float *G, const uint16_t *X, int64_t k, int64_t len, int64_t ld, bool tall) {
    if (k < 2 * kSymBlock) {
        if (tall) cpu::gemm_bf16(true, false, k, k, len, 1.0f, X, ld, X, ld, 0.0f, G, k);
        else cpu::gemm_bf16(false, true, k, k, len, 1.0f, X, ld, X, ld, 0.0f, G, k);
        return;
    }
    for (int64_t i0 = 0; i0 < k; i0 += kSymBlock)
        for (int64_t j0 = i0; j0 < k; j0 += kSymBlock) {
            const int64_t mi = std::min(kSymBlock, k - i0), mj = std::min(kSymBlock, k - j0);
            float *C = G + i0 * k + j0;
            if (tall) cpu::gemm_bf16(true, false, mi, mj, len, 1.0f, X + i0, ld, X + j0, ld, 0.0f, C, k);
            else cpu::gemm_bf16(false, true, mi, mj, len, 1.0f, X + i0 * ld, ld, X + j0 * ld, ld, 0.0f, C, k);
            if (j0 != i0)
                for (int64_t i = 0; i < mi; ++i)
                    for (int64_t j = 0; j < mj; ++j) G[(j0 + j) * k + i0 + i] = C[i * k + j];
        }
}

} // namespace

NsPrecision ns_precision_from_string(const std::string &s) {
    if (s == "bf16") return NsPrecision::BF16;
    if (s == "fp32") return NsPrecision::F32;
    fail("muon: Newton-Schulz precision must be 'bf16' or 'fp32', got '{}'", s);
}

const char *ns_precision_name(NsPrecision p) { return p == NsPrecision::BF16 ? "bf16" : "fp32"; }

Muon::Muon(const MuonHyper &hyper, size_t max_numel, int64_t max_min_dim, int workspaces)
    : hyper_(hyper), max_numel_(max_numel), max_min_dim_(max_min_dim) {
    if (hyper.ns_steps < 0 || hyper.ns_steps >= 100) fail("muon: ns_steps must be in [0, 100), got {}", hyper.ns_steps);
    if (hyper.momentum < 0) fail("muon: momentum must be >= 0, got {}", hyper.momentum);
    if (workspaces < 0) fail("muon: workspaces must be >= 0, got {}", workspaces); // 0: hyper-parameters only
    const size_t k2 = size_t(max_min_dim) * size_t(max_min_dim);
    const bool bf16 = hyper.ns_precision == NsPrecision::BF16;
    ws_.resize(size_t(workspaces));
    for (Workspace &w : ws_) {
        w.x = RealBuffer::zeros(max_numel);
        w.y = RealBuffer::zeros(max_numel);
        w.gram = RealBuffer::zeros(k2);
        w.poly = RealBuffer::zeros(bf16 ? 0 : k2);
        if (bf16) w.xb.resize(max_numel), w.ab.resize(k2), w.pb.resize(k2);
    }
}

size_t Muon::workspace_bytes(NsPrecision p, size_t max_numel, int64_t max_min_dim) {
    const size_t k2 = size_t(max_min_dim) * size_t(max_min_dim);
    if (p == NsPrecision::BF16) return (2 * max_numel + k2) * sizeof(real) + (max_numel + 2 * k2) * sizeof(uint16_t);
    return (2 * max_numel + 2 * k2) * sizeof(real);
}

Muon::Workspace &Muon::workspace(int ws) {
    if (ws < 0 || ws >= int(ws_.size())) fail("muon: workspace {} out of range (have {})", ws, ws_.size());
    return ws_[size_t(ws)];
}

void Muon::check_fits(int64_t rows, int64_t cols) const {
    if (rows <= 0 || cols <= 0 || size_t(rows) * size_t(cols) > max_numel_ || std::min(rows, cols) > max_min_dim_)
        fail("muon: matrix {}x{} does not fit the workspace ({} elements, Gram side {})", rows, cols, max_numel_,
             max_min_dim_);
}

void Muon::newton_schulz(Workspace &w, int64_t rows, int64_t cols) {
    if (hyper_.ns_precision == NsPrecision::BF16) return newton_schulz_bf16(w, rows, cols);
    const size_t n = size_t(rows) * size_t(cols);
    real *x = w.x.data(), *y = w.y.data();
    real *A = w.gram.data(), *P = w.poly.data();

    // X /= max(‖X‖_F, eps): torch's `div_(norm().clamp(min=eps))` — a division, as torch does.
    const real norm = std::max(real(std::sqrt(sum_squares(x, n))), real(hyper_.eps));
#pragma omp parallel for simd if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) x[i] /= norm;

    const real a = real(hyper_.ns_coefficients[0]), b = real(hyper_.ns_coefficients[1]);
    const real c = real(hyper_.ns_coefficients[2]);
    const bool tall = rows > cols;     // torch transposes; we multiply from the right instead
    const int64_t k = tall ? cols : rows; // Gram side
    const size_t kk = size_t(k) * size_t(k);
    for (int s = 0; s < hyper_.ns_steps; ++s) {
        // A = X·Xᵀ (wide) or Xᵀ·X (tall).
        if (tall) cpu::gemm(true, false, k, k, rows, real(1), x, cols, x, cols, real(0), A, k);
        else cpu::gemm(false, true, k, k, cols, real(1), x, cols, x, cols, real(0), A, k);
        // P = b·A + c·A·A  (torch.addmm(A, A, A, beta=b, alpha=c)): one GEMM, A·A computed once.
        std::copy(A, A + kk, P);
        cpu::gemm(false, false, k, k, k, c, A, k, A, k, b, P, k);
        // X ← a·X + P·X (wide) or a·X + X·Pᵀ (tall: the transpose of torch's a·Xᵀ + P·Xᵀ).
        std::copy(x, x + n, y);
        if (tall) cpu::gemm(false, true, rows, cols, cols, real(1), x, cols, P, cols, a, y, cols);
        else cpu::gemm(false, false, rows, cols, rows, real(1), P, rows, x, cols, a, y, cols);
        std::swap(x, y);
    }
    // An odd number of steps leaves the result in w.y; keep the contract "result in w.x".
    if (x != w.x.data()) std::copy(x, x + n, w.x.data());
}

// torch's bf16 iteration, rounding where torch's bf16 tensors do:
//   X = bf16(U);  X = bf16(X / max(bf16(‖X‖), bf16(ε)))
//   k times: A = bf16(X·Xᵀ);  P = bf16(c·A·A + b·A);  X = bf16(P·X + a·X)
// Products accumulate in fp32 (oneDNN); the combine-and-round passes are fused with reading the fp32 product.
void Muon::newton_schulz_bf16(Workspace &w, int64_t rows, int64_t cols) {
    const size_t n = size_t(rows) * size_t(cols);
    float *x = w.x.data(), *y = w.y.data(), *G = w.gram.data();
    uint16_t *xb = w.xb.data(), *Ab = w.ab.data(), *Pb = w.pb.data();
    const bool par = n > kParallelMin;
#pragma omp parallel for simd if (par)
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    const float norm = std::max(bf16_to_f32(f32_to_bf16(float(std::sqrt(sum_squares(x, n))))),
                                bf16_to_f32(f32_to_bf16(float(hyper_.eps))));
#pragma omp parallel for simd if (par)
    for (size_t i = 0; i < n; ++i) xb[i] = f32_to_bf16(x[i] / norm);

    const float a = float(hyper_.ns_coefficients[0]), b = float(hyper_.ns_coefficients[1]);
    const float c = float(hyper_.ns_coefficients[2]);
    const bool tall = rows > cols;
    const int64_t k = tall ? cols : rows;
    const size_t kk = size_t(k) * size_t(k);
    for (int s = 0; s < hyper_.ns_steps; ++s) {
        symmetric_gram_bf16(G, xb, k, tall ? rows : cols, cols, tall);
        for (size_t i = 0; i < kk; ++i) Ab[i] = f32_to_bf16(G[i]);
        symmetric_gram_bf16(G, Ab, k, k, k, false); // A·A = A·Aᵀ: A is symmetric
        for (size_t i = 0; i < kk; ++i) Pb[i] = f32_to_bf16(c * G[i] + b * bf16_to_f32(Ab[i]));
        if (tall) cpu::gemm_bf16(false, true, rows, cols, cols, 1.0f, xb, cols, Pb, cols, 0.0f, y, cols);
        else cpu::gemm_bf16(false, false, rows, cols, rows, 1.0f, Pb, rows, xb, cols, 0.0f, y, cols);
#pragma omp parallel for simd if (par)
        for (size_t i = 0; i < n; ++i) xb[i] = f32_to_bf16(y[i] + a * bf16_to_f32(xb[i]));
    }
#pragma omp parallel for simd if (par)
    for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(xb[i]);
}

void Muon::orthogonalise(const real *in, real *out, int64_t rows, int64_t cols, int ws) {
    check_fits(rows, cols);
    Workspace &w = workspace(ws);
    const size_t n = size_t(rows) * size_t(cols);
    std::copy(in, in + n, w.x.data());
    newton_schulz(w, rows, cols);
    std::copy(w.x.data(), w.x.data() + n, out);
}

void Muon::step(real *param, const real *grad, real *momentum, int64_t rows, int64_t cols, double lr,
                double weight_decay, int ws) {
    check_fits(rows, cols);
    Workspace &w = workspace(ws);
    const size_t n = size_t(rows) * size_t(cols);
    real *u = w.x.data();
    // torch's CPU lerp: start + w·(end − start) for |w| < 0.5, else end + (w − 1)·(end − start), both as FMAs.
    const real w_buf = real(1.0 - hyper_.momentum), mu = real(hyper_.momentum);
    const bool buf_small = std::fabs(w_buf) < real(0.5), nest_small = std::fabs(mu) < real(0.5);
    const bool nesterov = hyper_.nesterov;
#pragma omp parallel for simd if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) {
        const real g = grad[i], m0 = momentum[i];
        const real m = buf_small ? std::fma(w_buf, g - m0, m0) : std::fma(w_buf - real(1), g - m0, g);
        momentum[i] = m;
        // update = grad.lerp(buf, momentum)
        u[i] = !nesterov ? m : nest_small ? std::fma(mu, m - g, g) : std::fma(mu - real(1), m - g, m);
    }
    newton_schulz(w, rows, cols);
    const real decay = real(1.0 - lr * weight_decay);
    const real alpha = real(-muon_adjusted_lr(lr, hyper_.lr_adjust, rows, cols));
#pragma omp parallel for simd if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) param[i] = std::fma(alpha, u[i], param[i] * decay);
}

} // namespace zaya
