#include "ops/backend.h"

#include "core/error.h"

#include <algorithm>
#include <chrono>

namespace zaya {

void Backend::router_mlp_forward(real *r_norm, real *r_rstd, real *h1, real *a1, real *h2, real *a2, real *logits,
                                 real *probs, int32_t *choice, real *p_sel, const real *rho, const real *norm_w,
                                 const real *fc1, const real *fc1_b, const real *fc2, const real *fc2_b,
                                 const real *out, const real *bias, int64_t N, int64_t R, int64_t K, real eps) {
    rmsnorm_forward(r_norm, nullptr, r_rstd, rho, norm_w, N, R, eps);
    linear_forward(h1, R, r_norm, fc1, fc1_b, N, R, R);
    gelu_forward(a1, h1, N * R);
    linear_forward(h2, R, a1, fc2, fc2_b, N, R, R);
    gelu_forward(a2, h2, N * R);
    linear_forward(logits, K, a2, out, nullptr, N, R, K);
    router_select_forward(probs, choice, p_sel, logits, bias, N, K);
}

void Backend::linears_forward(std::span<const LinearOut> parts, MatmulInput x, int64_t N, int64_t I) {
    for (const LinearOut &p : parts) linear_forward(p.y, p.ldy, x, p.W, p.b, N, I, p.O);
}

void Backend::linears_backward(real *dx, std::span<const LinearGrad> parts, MatmulInput x, int64_t N, int64_t I,
                               bool accumulate_dx) {
    for (const LinearGrad &p : parts) {
        linear_backward(dx, p.dW, p.db, p.dy, p.ldy, x, p.W, N, I, p.O, accumulate_dx);
        accumulate_dx = true; // the later parts add to what the first wrote
    }
}

void Backend::set_phase_timing(bool on) {
    phase_timing_ = on;
    phase_marks_.clear();
    clear_marks();
}

std::vector<PhaseTime> Backend::phase_report() {
    std::vector<PhaseTime> out;
    if (phase_marks_.empty()) return out;
    const int64_t end = record_mark();
    synchronize();
    for (size_t i = 0; i < phase_marks_.size(); ++i) {
        const char *name = phase_marks_[i].first; // (not a structured binding: clang's lambdas cannot capture one)
        const int64_t at = phase_marks_[i].second;
        const int64_t next = i + 1 < phase_marks_.size() ? phase_marks_[i + 1].second : end;
        auto it = std::find_if(out.begin(), out.end(), [&](const PhaseTime &p) { return p.name == name; });
        if (it == out.end()) it = out.insert(out.end(), PhaseTime{name, 0.0, 0});
        it->seconds += mark_seconds(at, next);
        ++it->marks;
    }
    phase_marks_.clear();
    clear_marks();
    return out;
}

int64_t Backend::record_mark() {
    host_marks_.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count());
    return int64_t(host_marks_.size()) - 1;
}

double Backend::mark_seconds(int64_t from, int64_t to) { return host_marks_[size_t(to)] - host_marks_[size_t(from)]; }

void Backend::clear_marks() { host_marks_.clear(); }

Backend &backend_named(const std::string &device) {
    if (device == "cpu") return cpu_backend();
    if (device == "cuda") return cuda_backend();
    fail("device must be 'cpu' or 'cuda', got '{}'", device);
}

} // namespace zaya
