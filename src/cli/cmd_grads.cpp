// zaya grads MODEL_DIR --tokens 5,17,3 --out GRADS.safetensors — the gradient of the mean next-token loss.
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "core/error.h"
#include "ops/backend.h"
#include "io/safetensors.h"
#include "model/backward.h"

#include <fmt/format.h>
#include <optional>

namespace zaya::cli {

namespace {

struct GradsArgs {
    std::string model, tokens, out, device = "cpu";
    uint64_t seed = 1234;
};

void run_grads(const GradsArgs &a) {
    auto [m, seqs] = load_model_and_tokens(a.model, a.tokens, a.seed);
    Batch batch = Batch::from_sequences(seqs);
    std::vector<int32_t> targets = batch.next_token_targets();
    Backend &be = backend_named(a.device);
    std::optional<Model> on_device;
    if (!be.host_memory()) on_device.emplace(model_on(m, be));
    const Model &run = on_device ? *on_device : m;
    Activations acts = Activations::plan(m.config, batch.num_tokens(), batch.num_sequences(), true, be);
    ForwardResult r = model_forward(run, batch, acts, targets.data());
    if (r.loss_tokens == 0) fail("--tokens: every sequence has one token, so there is no next-token loss");
    GradScratch scratch = GradScratch::plan(m.config, batch.num_tokens(), batch.num_sequences(), be);
    RealBuffer device_grads = be.alloc(m.layout.total);
    model_backward(run, batch, acts, targets.data(), scratch, device_grads.data());
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
    be.download(grads.data(), device_grads.data(), m.layout.total * sizeof(real));

    std::vector<TensorToWrite> out;
    for (const ParamView &v : m.layout.views)
        if (v.trainable) out.push_back({v.name, DType::F32, v.shape, grads.data() + v.offset});
    safetensors_write(a.out, out, {{"loss", fmt::format("{:.9g}", r.loss)}});
    fmt::print("loss {:.6f}\n", r.loss);
}

} // namespace

void register_grads(CLI::App &app) {
    auto *cmd = app.add_subcommand("grads", "Write the gradient of the mean next-token loss for every parameter");
    auto a = std::make_shared<GradsArgs>();
    cmd->add_option("model", a->model, "Model directory (config.json + safetensors) or preset name")->required();
    cmd->add_option("--tokens", a->tokens, "Token ids, comma-separated; ';' separates sequences of a batch")
        ->required();
    cmd->add_option("--out", a->out, "Output safetensors file: one F32 tensor per trainable parameter, HF names")
        ->required();
    cmd->add_option("--seed", a->seed, "Seed for a preset's random weights")->capture_default_str();
    cmd->add_option("--device", a->device, "Where forward/backward run: cpu | cuda")->capture_default_str();
    cmd->callback([a] { run_grads(*a); });
}

} // namespace zaya::cli
