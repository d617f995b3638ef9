// The chunked CUDA LM head + cross-entropy against a reference built from the CPU ops: cpu::linear_forward's logits
// (cpu::gemm, which this binary carries as plain loops, then + bias), cpu::cross_entropy_forward/backward, then
// cpu::linear_backward's dx, dW and dbias.
#include "core/dtype.h"
#include "cuda_test_util.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/loss.h"
#include "ops/cuda/lm_head.h"

#include <gtest/gtest.h>

#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaLmHead : public CudaOps {};

// fp32 GEMMs on both sides (no TF32), reductions over D and V of a few hundred terms in different orders.
constexpr double kHeadTol = 1e-4;

struct HeadCase {
    int64_t N, D, V;
    float loss_scale;
    bool bias;
    bool bf16 = false; // the GPU's tensor-core GEMMs; the reference then multiplies bf16-rounded x and W
};

// bf16: the logits are exact products of the same rounded values (only the summation order differs, so the losses
// stay tight); the gradients' GEMMs also round the logit gradient G to bf16 (relative 2⁻⁹ per term).
constexpr double kHeadBf16GradTol = 1e-2;

std::vector<float> bf16_rounded(std::vector<float> v) {
    for (float &f : v) f = bf16_to_f32(f32_to_bf16(f));
    return v;
}

// Random inputs (every fifth row without a target, ids repeating) and the CPU results for them.
struct HeadRef {
    std::vector<float> x, W, b, dW0, db0, losses, dx, dW, db;
    std::vector<int32_t> targets;
    double loss;
};

HeadRef head_reference(const HeadCase &c, uint64_t seed) {
    const int64_t N = c.N, D = c.D, V = c.V;
    HeadRef r;
    r.x = random_vec(size_t(N * D), seed), r.W = random_vec(size_t(V * D), seed + 1, 0.3);
    if (c.bias) r.b = random_vec(size_t(V), seed + 2, 0.5);
    r.dW0 = random_vec(size_t(V * D), seed + 3, 0.01), r.db0 = random_vec(size_t(V), seed + 4, 0.01); // += onto these
    r.targets.resize(size_t(N));
    for (int64_t n = 0; n < N; ++n) r.targets[size_t(n)] = n % 5 == 3 ? -1 : int32_t((n * 37 + 11) % V);

    // The GPU rounds to bf16 only when D and V allow its tensor-core operand alignment (multiples of 8).
    const bool rounded = c.bf16 && D % 8 == 0 && V % 8 == 0;
    const std::vector<float> x = rounded ? bf16_rounded(r.x) : r.x, W = rounded ? bf16_rounded(r.W) : r.W;
    std::vector<float> logits(size_t(N * V));
    cpu::gemm(false, true, N, V, D, 1.0f, x.data(), D, W.data(), D, 0.0f, logits.data(), V);
    if (c.bias)
        for (int64_t n = 0; n < N; ++n)
            for (int64_t v = 0; v < V; ++v) logits[size_t(n * V + v)] += r.b[size_t(v)];
    r.losses.resize(size_t(N));
    r.loss = cpu::cross_entropy_forward(r.losses.data(), logits.data(), r.targets.data(), N, V);
    int64_t count = 0;
    for (int32_t t : r.targets) count += t >= 0;
    cpu::cross_entropy_backward(logits.data(), r.targets.data(), N, V, c.loss_scale / float(count)); // logits ← G
    r.dx.resize(size_t(N * D)), r.dW = r.dW0, r.db = r.db0;
    cpu::gemm(false, false, N, D, V, 1.0f, logits.data(), V, W.data(), D, 0.0f, r.dx.data(), D); // dx = G·W
    cpu::gemm(true, false, V, D, N, 1.0f, logits.data(), V, x.data(), D, 1.0f, r.dW.data(), D);  // dW += Gᵀ·x
    for (int64_t v = 0; v < V; ++v) {
        double acc = r.db0[size_t(v)];
        for (int64_t n = 0; n < N; ++n) acc += logits[size_t(n * V + v)];
        r.db[size_t(v)] = float(acc);
    }
    return r;
}

void check_head(const HeadCase &c, int64_t chunk_rows, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " D=" << c.D << " V=" << c.V << " chunk=" << chunk_rows
                                      << " bias=" << c.bias << " bf16=" << c.bf16);
    const bool rounded = c.bf16 && c.D % 8 == 0 && c.V % 8 == 0;
    const double grad_tol = rounded ? kHeadBf16GradTol : kHeadTol;
    const auto r = head_reference(c, seed);
    auto x_d = upload(r.x), W_d = upload(r.W), dW_d = upload(r.dW0), dx_d = poisoned(r.dx.size());
    auto t_d = upload(r.targets);
    cuda::DeviceArray<float> b_d, db_d; // stay null without a bias
    if (c.bias) b_d = upload(r.b), db_d = upload(r.db0);
    const double got = cuda::lm_head_cross_entropy(dx_d.data(), dW_d.data(), db_d.data(), x_d.data(), W_d.data(),
                                                   b_d.data(), t_d.data(), c.N, c.D, c.V, c.loss_scale, chunk_rows,
                                                   c.bf16);
    EXPECT_NEAR(got, r.loss, kHeadTol * r.loss);
    EXPECT_LT(rel_err(download(dx_d), r.dx), grad_tol);
    EXPECT_LT(rel_err(download(dW_d), r.dW), grad_tol);
    if (c.bias) {
        EXPECT_LT(rel_err(download(db_d), r.db), grad_tol);
    }
}

// The forward-only loss at several chunk sizes (one row, ragged, more than N): per-row losses and the mean.
void check_loss(const HeadCase &c, uint64_t seed) {
    const auto r = head_reference(c, seed);
    auto x_d = upload(r.x), W_d = upload(r.W);
    auto t_d = upload(r.targets);
    cuda::DeviceArray<float> b_d;
    if (c.bias) b_d = upload(r.b);
    for (int64_t chunk : {int64_t(1), int64_t(5), c.N + 5}) {
        SCOPED_TRACE(::testing::Message() << "chunk=" << chunk << " bias=" << c.bias);
        auto losses_d = poisoned(size_t(c.N));
        const double got = cuda::lm_head_loss(losses_d.data(), x_d.data(), W_d.data(), b_d.data(), t_d.data(), c.N,
                                              c.D, c.V, chunk, c.bf16);
        EXPECT_NEAR(got, r.loss, kHeadTol * r.loss);
        EXPECT_LT(rel_err(download(losses_d), r.losses), kHeadTol);
    }
}

// Chunks of 7 rows over 45 (the last one ragged), an odd vocabulary. (D stays a multiple of 8, as the model's:
// low-alignment GEMM operands are CudaGemm's concern.)
TEST_F(CudaLmHead, RaggedChunks) { check_head({45, 40, 301, 1.0f, false}, 7, 500); }

TEST_F(CudaLmHead, OneChunkAndLossScale) { check_head({20, 64, 256, 0.5f, false}, 1000, 600); }

TEST_F(CudaLmHead, BiasAndItsGradient) { check_head({33, 24, 203, 0.7f, true}, 8, 650); }

TEST_F(CudaLmHead, LossOnlyWithAndWithoutBias) {
    check_loss({9, 16, 67, 1.0f, false}, 680);
    check_loss({9, 16, 67, 1.0f, true}, 690);
}

// bf16 GEMMs: ragged chunks with a bias; an unaligned vocabulary falls back to fp32 (checked at fp32 tolerance
// against the unrounded reference); the forward-only loss.
TEST_F(CudaLmHead, Bf16TensorCores) {
    check_head({45, 40, 304, 1.0f, true, true}, 7, 800);
    check_head({20, 64, 301, 0.5f, false, true}, 1000, 810);
    check_loss({9, 16, 64, 1.0f, true, true}, 820);
}

TEST_F(CudaLmHead, AllTargetsIgnored) {
    const int64_t N = 6, D = 8, V = 10;
    auto x_d = upload(random_vec(size_t(N * D), 700)), W_d = upload(random_vec(size_t(V * D), 701));
    auto b_d = upload(random_vec(size_t(V), 703));
    const auto dW0 = random_vec(size_t(V * D), 702), db0 = random_vec(size_t(V), 704);
    auto dW_d = upload(dW0), db_d = upload(db0), dx_d = poisoned(size_t(N * D)), losses_d = poisoned(size_t(N));
    auto t_d = upload(std::vector<int32_t>(size_t(N), -1));
    EXPECT_EQ(cuda::lm_head_cross_entropy(dx_d.data(), dW_d.data(), db_d.data(), x_d.data(), W_d.data(), b_d.data(),
                                          t_d.data(), N, D, V, 1.0f, 4),
              0.0);
    EXPECT_EQ(download(dx_d), std::vector<float>(size_t(N * D), 0.0f));
    EXPECT_EQ(download(dW_d), dW0);
    EXPECT_EQ(download(db_d), db0);
    EXPECT_EQ(cuda::lm_head_loss(losses_d.data(), x_d.data(), W_d.data(), b_d.data(), t_d.data(), N, D, V, 4), 0.0);
    EXPECT_EQ(download(losses_d), std::vector<float>(size_t(N), 0.0f));
}

} // namespace
} // namespace zaya
