// Ten training steps against PyTorch (tools/gen_optim_goldens.py): transformers' ZayaForCausalLM with
// torch.optim.Muon (Newton–Schulz patched to fp32) + torch.optim.AdamW, warmup/cosine lr, clipping at 1.0, and
// the balancing-bias controller. Every step's loss must match to 1e-4 relative, and so must the final weights.
#include "io/model_io.h"
#include "model/backward.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"
#include "test_helpers.h"

#include <cmath>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zaya {
namespace {

TEST(TrainGolden, TenStepsMatchPyTorch) {
    const std::string dir = test::golden_dir("optim");
    const std::string file = dir + "/golden.safetensors";
    std::ifstream in(dir + "/meta.json");
    const nlohmann::json meta = nlohmann::json::parse(in);
    Model m = model_load(dir);
    const ZayaConfig &c = m.config;

    OptimConfig oc;
    oc.lr = meta.at("schedule").at("peak_lr").get<double>();
    oc.weight_decay = 0.1;
    oc.grad_clip = 1.0;
    oc.ns_precision = NsPrecision::F32; // the reference's Newton–Schulz is patched to fp32
    oc.schedule.kind = ScheduleKind::Cosine;
    oc.schedule.warmup_steps = meta.at("schedule").at("warmup_steps").get<int64_t>();
    oc.schedule.total_steps = meta.at("schedule").at("total_steps").get<int64_t>();
    oc.schedule.min_lr_ratio = meta.at("schedule").at("min_lr").get<double>() / oc.lr;
    Optimizer opt(m.layout, c, oc);
    BalancingController balance(m.layout, c);

    const auto batches = test::read_tensor(file, "batches");
    const auto losses = test::read_tensor(file, "losses");
    const auto lrs = test::read_tensor(file, "lr");
    const auto gnorms = test::read_tensor(file, "grad_norm");
    const int64_t steps = meta.at("steps").get<int64_t>(), B = meta.at("batch").get<int64_t>();
    const int64_t T = meta.at("seq_len").get<int64_t>(), K = c.router_classes();

    Activations acts = Activations::plan(c, B * T, B, true);
    GradScratch scratch = GradScratch::plan(c, B * T, B);
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
    double worst_loss = 0, worst_param = 0;
    for (int64_t s = 0; s < steps; ++s) {
        SCOPED_TRACE("step " + std::to_string(s + 1));
        std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B));
        for (int64_t b = 0; b < B; ++b)
            for (int64_t t = 0; t < T; ++t) seqs[size_t(b)].push_back(int32_t(batches[size_t((s * B + b) * T + t)]));
        Batch batch = Batch::from_sequences(seqs);
        std::vector<int32_t> targets = batch.next_token_targets();
        ForwardResult f = model_forward(m, batch, acts, targets.data());
        EXPECT_NEAR(f.loss, losses[size_t(s)], 1e-4 * losses[size_t(s)]);
        worst_loss = std::max(worst_loss, std::fabs(f.loss - losses[size_t(s)]) / losses[size_t(s)]);
        std::vector<int64_t> counts(size_t(c.num_hidden_layers * K), 0);
        for (int64_t l = 0; l < c.num_hidden_layers; ++l)
            for (int64_t n = 0; n < batch.num_tokens(); ++n) ++counts[size_t(l * K + acts.layer(l).choice[n])];
        std::fill(grads.data(), grads.data() + grads.size, real(0));
        model_backward(m, batch, acts, targets.data(), scratch, grads.data());
        const double lr = opt.scheduled_lr();
        EXPECT_NEAR(lr, lrs[size_t(s)], 1e-6 * lrs[size_t(s)]);
        StepStats st = opt.step(m.params.data(), grads.data(), lr);
        EXPECT_NEAR(st.grad_norm, gnorms[size_t(s)], 1e-4 * gnorms[size_t(s)]);
        balance.update(m.params.data(), counts.data());
    }
    // Final weights: fp32 on both sides; the reference's own fp32-vs-fp64 spread is ~1e-5.
    for (const ParamView &v : m.layout.views) {
        auto ref = test::read_tensor(file, "final." + v.name);
        ASSERT_EQ(ref.size(), v.numel) << v.name;
        const float d = test::max_abs_diff(ref.data(), m.params.data() + v.offset, v.numel);
        EXPECT_LE(d, 1e-4f) << v.name;
        worst_param = std::max(worst_param, double(d));
    }
    std::printf("10 steps vs PyTorch: max relative loss difference %.2e, max abs final-weight difference %.2e\n",
                worst_loss, worst_param);
}

} // namespace
} // namespace zaya
