// Muon (spec §C.2), step for step as torch.optim.Muon (torch 2.15, torch/optim/_muon.py), for one 2-D matrix W
// (rows m × cols n) with gradient G and momentum buffer B (zero-initialised):
//
//   B ← lerp(B, G, 1−μ) = μ·B + (1−μ)·G      an EMA, not the docstring's "μ·B + G": torch's code uses lerp_.
//                                             The two differ by the factor (1−μ) throughout, which the Frobenius
//                                             normalisation below cancels (except when clamped by eps), but the
//                                             stored buffer is the EMA — checkpoints must hold the EMA.
//   U ← nesterov ? lerp(G, B, μ) = (1−μ)·G + μ·B : B
//   X ← U / max(‖U‖_F, ε)                     ε = 1e-7: a clamp, not "‖U‖ + ε"
//   if m > n: iterate on Xᵀ so the Gram matrix is the smaller (n×n) one
//   k times: A = X·Xᵀ;  P = b·A + c·A·A;  X ← a·X + P·X          (a, b, c) = (3.4445, −4.7750, 2.0315), k = 5
//   W ← W·(1 − lr·λ)                          decoupled weight decay with the *unadjusted* lr
//   W ← W − lr·s(m, n)·X                      s = 0.2·√max(m, n) for "match_rms_adamw" (Moonlight RMS matching)
//
// Precision (`ns_precision`): BF16 (default) is torch's own iteration: X, the norm, A and P are bf16 tensors, each
// product accumulates in fp32 (oneDNN bf16 matmul, ~1.9× the fp32 rate) and is rounded to bf16 where torch's bf16
// result tensor is. F32 runs it all in fp32, matching a reference whose NS is patched to fp32 (the optimizer goldens).
// The update is applied in fp32 either way, as torch does.
// For m > n we iterate X ← a·X + X·Pᵀ with A = Xᵀ·X instead of transposing: it is torch's transposed iteration
// term for term, without two transposes per step.
#pragma once
#include "core/real.h"
#include "model/params.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

// torch.optim.Muon's `adjust_lr_fn` options (None means "original" there; our default is Moonlight's).
enum class MuonLrAdjust : uint8_t { Original, MatchRmsAdamW, SpectralUnclamped };

enum class NsPrecision : uint8_t { BF16, F32 };
NsPrecision ns_precision_from_string(const std::string &s); // "bf16" | "fp32"; fails naming the value
const char *ns_precision_name(NsPrecision p);

struct MuonHyper {
    double momentum = 0.95;
    bool nesterov = true;
    std::array<double, 3> ns_coefficients{3.4445, -4.7750, 2.0315};
    int ns_steps = 5;
    double eps = 1e-7;
    MuonLrAdjust lr_adjust = MuonLrAdjust::MatchRmsAdamW;
    NsPrecision ns_precision = NsPrecision::BF16;
};

// lr·s(rows, cols): original √max(1, rows/cols); match_rms_adamw 0.2·√max(rows, cols); spectral_unclamped √(rows/cols).
// (Inline: the CUDA backend's Muon uses it too, in binaries without this file's oneDNN code.)
inline double muon_adjusted_lr(double lr, MuonLrAdjust adjust, int64_t rows, int64_t cols) {
    const double A = double(rows), B = double(cols);
    switch (adjust) {
    case MuonLrAdjust::Original: return lr * std::sqrt(std::max(1.0, A / B));
    case MuonLrAdjust::MatchRmsAdamW: return lr * 0.2 * std::sqrt(std::max(A, B));
    case MuonLrAdjust::SpectralUnclamped: return lr * std::sqrt(A / B);
    }
    return lr;
}

// Muon's update rule with its scratch space: `workspaces` sets, each sized once for the largest matrix, so that
// that many threads can each orthogonalise a matrix at once (Optimizer does); steps allocate nothing.
class Muon {
  public:
    Muon(const MuonHyper &hyper, size_t max_numel, int64_t max_min_dim, int workspaces = 1);

    // One Muon step on one matrix with workspace `ws`; `momentum` is its rows×cols momentum buffer. Called from
    // inside a parallel region, its GEMMs and loops run on the calling thread only.
    void step(real *param, const real *grad, real *momentum, int64_t rows, int64_t cols, double lr,
              double weight_decay, int ws = 0);

    // Newton–Schulz orthogonalisation of `in` (rows×cols) into `out` (may alias `in`).
    void orthogonalise(const real *in, real *out, int64_t rows, int64_t cols, int ws = 0);

    const MuonHyper &hyper() const { return hyper_; }
    int workspaces() const { return int(ws_.size()); }
    // Bytes of one workspace (the constructor allocates `workspaces` of them).
    static size_t workspace_bytes(NsPrecision p, size_t max_numel, int64_t max_min_dim);

  private:
    struct Workspace {
        RealBuffer x, y, gram, poly;    // fp32 iterate, product, A, P
        std::vector<uint16_t> xb, ab, pb; // bf16 iterate, A, P (BF16 precision only)
    };
    // Normalises and iterates w.x in place (result in w.x).
    void newton_schulz(Workspace &w, int64_t rows, int64_t cols);
    void newton_schulz_bf16(Workspace &w, int64_t rows, int64_t cols);
    Workspace &workspace(int ws);
    void check_fits(int64_t rows, int64_t cols) const;

    MuonHyper hyper_;
    size_t max_numel_;
    int64_t max_min_dim_;
    std::vector<Workspace> ws_;
};

} // namespace zaya
