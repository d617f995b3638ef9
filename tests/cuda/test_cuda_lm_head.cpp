// The chunked CUDA LM head + cross-entropy against a reference built from the CPU ops: logits by a plain double
// loop (this binary carries no BLAS), then cpu::cross_entropy_forward/backward, then dx and dW by plain loops.
#include "cuda_test_util.h"
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
    int64_t N, D, V, chunk_rows;
    float loss_scale;
};

void check_head(const HeadCase &c, uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.N << " D=" << c.D << " V=" << c.V << " chunk=" << c.chunk_rows);
    const int64_t N = c.N, D = c.D, V = c.V;
    auto x = random_vec(size_t(N * D), seed), W = random_vec(size_t(V * D), seed + 1, 0.3);
    auto dW0 = random_vec(size_t(V * D), seed + 2, 0.01); // dW accumulates onto what is there
    std::vector<int32_t> targets(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) targets[size_t(n)] = n % 5 == 3 ? -1 : int32_t((n * 37 + 11) % V);

    std::vector<float> logits(size_t(N * V));
    for (int64_t n = 0; n < N; ++n)
        for (int64_t v = 0; v < V; ++v) {
            double acc = 0;
            for (int64_t d = 0; d < D; ++d) acc += double(x[size_t(n * D + d)]) * double(W[size_t(v * D + d)]);
            logits[size_t(n * V + v)] = float(acc);
        }
    std::vector<float> losses(static_cast<size_t>(N));
    const double loss = cpu::cross_entropy_forward(losses.data(), logits.data(), targets.data(), N, V);
    int64_t count = 0;
    for (int32_t t : targets) count += t >= 0;
    cpu::cross_entropy_backward(logits.data(), targets.data(), N, V, c.loss_scale / float(count)); // logits ← G
    std::vector<float> dx(size_t(N * D)), dW = dW0;
    for (int64_t n = 0; n < N; ++n)
        for (int64_t d = 0; d < D; ++d) {
            double acc = 0;
            for (int64_t v = 0; v < V; ++v) acc += double(logits[size_t(n * V + v)]) * double(W[size_t(v * D + d)]);
            dx[size_t(n * D + d)] = float(acc);
        }
    for (int64_t v = 0; v < V; ++v)
        for (int64_t d = 0; d < D; ++d) {
            double acc = dW0[size_t(v * D + d)];
            for (int64_t n = 0; n < N; ++n) acc += double(logits[size_t(n * V + v)]) * double(x[size_t(n * D + d)]);
            dW[size_t(v * D + d)] = float(acc);
        }

    auto x_d = upload(x), W_d = upload(W), dW_d = upload(dW0), dx_d = poisoned(dx.size());
    auto t_d = upload(targets);
    const double got = cuda::lm_head_cross_entropy(dx_d.data(), dW_d.data(), x_d.data(), W_d.data(), t_d.data(), N, D,
                                                   V, c.loss_scale, c.chunk_rows);
    EXPECT_NEAR(got, loss, kHeadTol * loss);
    EXPECT_LT(rel_err(download(dx_d), dx), kHeadTol);
    EXPECT_LT(rel_err(download(dW_d), dW), kHeadTol);
}

// Chunks of 7 rows over 45 (the last one ragged), an odd vocabulary. (D stays a multiple of 8, as the model's:
// low-alignment GEMM operands are CudaGemm's concern.)
TEST_F(CudaLmHead, RaggedChunks) { check_head({45, 40, 301, 7, 1.0f}, 500); }

TEST_F(CudaLmHead, OneChunkAndLossScale) { check_head({20, 64, 256, 1000, 0.5f}, 600); }

TEST_F(CudaLmHead, AllTargetsIgnored) {
    const int64_t N = 6, D = 8, V = 10;
    auto x_d = upload(random_vec(size_t(N * D), 700)), W_d = upload(random_vec(size_t(V * D), 701));
    const auto dW0 = random_vec(size_t(V * D), 702);
    auto dW_d = upload(dW0), dx_d = poisoned(size_t(N * D));
    auto t_d = upload(std::vector<int32_t>(size_t(N), -1));
    EXPECT_EQ(cuda::lm_head_cross_entropy(dx_d.data(), dW_d.data(), x_d.data(), W_d.data(), t_d.data(), N, D, V, 1.0f,
                                          4),
              0.0);
    EXPECT_EQ(download(dx_d), std::vector<float>(size_t(N * D), 0.0f));
    EXPECT_EQ(download(dW_d), dW0);
}

} // namespace
} // namespace zaya
