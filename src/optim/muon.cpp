#include "optim/muon.h"

#include "core/error.h"
#include "ops/cpu/gemm.h"
#include "optim/sum_squares.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace zaya {

namespace {

// Elementwise loops are memory-bound; below this many elements a thread team costs more than it saves.
constexpr size_t kParallelMin = size_t(1) << 15;

} // namespace

double muon_adjusted_lr(double lr, MuonLrAdjust adjust, int64_t rows, int64_t cols) {
    const double A = double(rows), B = double(cols);
    switch (adjust) {
    case MuonLrAdjust::Original: return lr * std::sqrt(std::max(1.0, A / B));
    case MuonLrAdjust::MatchRmsAdamW: return lr * 0.2 * std::sqrt(std::max(A, B));
    case MuonLrAdjust::SpectralUnclamped: return lr * std::sqrt(A / B);
    }
    return lr;
}

Muon::Muon(const MuonHyper &hyper, size_t max_numel, int64_t max_min_dim)
    : hyper_(hyper), max_numel_(max_numel), max_min_dim_(max_min_dim) {
    if (hyper.ns_steps < 0 || hyper.ns_steps >= 100) fail("muon: ns_steps must be in [0, 100), got {}", hyper.ns_steps);
    if (hyper.momentum < 0) fail("muon: momentum must be >= 0, got {}", hyper.momentum);
    const size_t k2 = size_t(max_min_dim) * size_t(max_min_dim);
    x_ = RealBuffer::zeros(max_numel);
    y_ = RealBuffer::zeros(max_numel);
    gram_ = RealBuffer::zeros(k2);
    poly_ = RealBuffer::zeros(k2);
}

void Muon::check_fits(int64_t rows, int64_t cols) const {
    if (rows <= 0 || cols <= 0 || size_t(rows) * size_t(cols) > max_numel_ || std::min(rows, cols) > max_min_dim_)
        fail("muon: matrix {}x{} does not fit the workspace ({} elements, Gram side {})", rows, cols, max_numel_,
             max_min_dim_);
}

void Muon::newton_schulz(int64_t rows, int64_t cols) {
    const size_t n = size_t(rows) * size_t(cols);
    real *x = x_.data(), *y = y_.data();
    real *A = gram_.data(), *P = poly_.data();

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
    // An odd number of steps leaves the result in y_; keep the contract "result in x_".
    if (x != x_.data()) std::copy(x, x + n, x_.data());
}

void Muon::orthogonalise(const real *in, real *out, int64_t rows, int64_t cols) {
    check_fits(rows, cols);
    const size_t n = size_t(rows) * size_t(cols);
    std::copy(in, in + n, x_.data());
    newton_schulz(rows, cols);
    std::copy(x_.data(), x_.data() + n, out);
}

void Muon::step(real *param, const real *grad, real *momentum, int64_t rows, int64_t cols, double lr,
                double weight_decay) {
    check_fits(rows, cols);
    const size_t n = size_t(rows) * size_t(cols);
    real *u = x_.data();
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
    newton_schulz(rows, cols);
    const real decay = real(1.0 - lr * weight_decay);
    const real alpha = real(-muon_adjusted_lr(lr, hyper_.lr_adjust, rows, cols));
#pragma omp parallel for simd if (n > kParallelMin)
    for (size_t i = 0; i < n; ++i) param[i] = std::fma(alpha, u[i], param[i] * decay);
}

} // namespace zaya
