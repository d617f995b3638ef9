// The bf16 copies of matmul inputs (MatmulInput, Activations::plan's bf16_copies) on the CPU backend: the ops that
// produce the linears' inputs (the norms, attention) write copies holding exactly bf16(x); the CPU's GEMMs round
// their operands themselves, so a pass with copies planned gives the bits of one without (the GPU's twin of this
// test, tests/cuda/test_cuda_model.cpp, checks that its linears read them).
#include "core/dtype.h"
#include "model/backward.h"
#include "model/forward.h"
#include "model/init.h"
#include "ops/backend.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace zaya {
namespace {

std::vector<float> floats(const real *p, int64_t n) { return std::vector<float>(p, p + n); }
std::vector<uint16_t> bits(const uint16_t *p, int64_t n) { return std::vector<uint16_t>(p, p + n); }
std::vector<uint16_t> rounded(const std::vector<float> &v) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) b[i] = f32_to_bf16(v[i]);
    return b;
}

TEST(Bf16Copies, WrittenWhereProducedAndChangeNothingOnTheCpu) {
    ZayaConfig c = config_preset("tiny");
    Model m = Model::create(c);
    model_init_random(m, 21);
    const Batch batch = Batch::from_sequences({std::vector<int32_t>{5, 9, 2, 7, 7, 1, 3}, std::vector<int32_t>{4, 8}});
    const std::vector<int32_t> targets = batch.next_token_targets();
    const int64_t N = batch.num_tokens(), B = batch.num_sequences(), D = c.hidden_size;
    Backend &be = cpu_backend();
    std::vector<float> grads[2];
    double loss[2] = {0, 0};
    for (int with = 0; with < 2; ++with) {
        Activations acts = Activations::plan(c, N, B, true, be, with == 1);
        GradScratch scratch = GradScratch::plan(c, N, B, be);
        RealBuffer g = be.alloc(m.layout.total);
        loss[with] = model_forward(m, batch, acts, targets.data()).loss;
        model_backward(m, batch, acts, targets.data(), scratch, g.data());
        grads[with] = floats(g.data(), int64_t(m.layout.total));
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
            const LayerActs &A = acts.layer(l);
            if (with == 0) {
                EXPECT_EQ(A.x_norm1_16, nullptr);
                EXPECT_EQ(A.x_norm2_16, nullptr);
                EXPECT_EQ(A.att16, nullptr);
                continue;
            }
            SCOPED_TRACE(::testing::Message() << "layer " << l);
            EXPECT_EQ(bits(A.x_norm1_16, N * D), rounded(floats(A.x_norm1, N * D)));
            EXPECT_EQ(bits(A.x_norm2_16, N * D), rounded(floats(A.x_norm2, N * D)));
            EXPECT_EQ(bits(A.att16, N * c.q_dim()), rounded(floats(A.att, N * c.q_dim())));
        }
    }
    EXPECT_EQ(loss[0], loss[1]);
    EXPECT_EQ(grads[0], grads[1]);
    EXPECT_GT(Activations::bytes_needed(c, N, B, true, true, true), Activations::bytes_needed(c, N, B, true, true));
}

} // namespace
} // namespace zaya
