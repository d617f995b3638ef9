// zaya forward MODEL_DIR --tokens 5,17,3 --out OUT.safetensors — logits and next-token loss of a sequence.
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "core/error.h"
#include "ops/backend.h"
#include "io/safetensors.h"
#include "model/forward.h"

#include <fmt/format.h>
#include <optional>
#include <vector>

namespace zaya::cli {

namespace {

struct ForwardArgs {
    std::string model, tokens, out, device = "cpu";
    uint64_t seed = 1234;
};

void run_forward(const ForwardArgs &a) {
    auto [m, seqs] = load_model_and_tokens(a.model, a.tokens, a.seed);
    Batch batch = Batch::from_sequences(seqs);
    Backend &be = backend_named(a.device);
    std::optional<Model> on_device;
    if (!be.host_memory()) on_device.emplace(model_on(m, be));
    Activations acts = Activations::plan(m.config, batch.num_tokens(), batch.num_sequences(), false, be);
    std::vector<int32_t> targets = batch.next_token_targets();
    ForwardResult r = model_forward(on_device ? *on_device : m, batch, acts, targets.data());

    const int64_t V = m.config.vocab_size;
    std::vector<real> host_logits;
    const real *logits = acts.logits;
    if (!be.host_memory()) {
        host_logits.resize(size_t(batch.num_tokens() * V));
        be.download(host_logits.data(), acts.logits, host_logits.size() * sizeof(real));
        logits = host_logits.data();
    }
    bool equal = true;
    for (const auto &s : seqs) equal &= s.size() == seqs[0].size();
    std::vector<TensorToWrite> out;
    if (seqs.size() == 1) {
        out.push_back({"logits", DType::F32, {int64_t(seqs[0].size()), V}, logits});
    } else if (equal) {
        out.push_back({"logits", DType::F32, {int64_t(seqs.size()), int64_t(seqs[0].size()), V}, logits});
    } else {
        for (size_t s = 0; s < seqs.size(); ++s)
            out.push_back({fmt::format("logits.{}", s), DType::F32, {int64_t(seqs[s].size()), V},
                           logits + batch.seq_start[s] * V});
    }
    safetensors_write(a.out, out, {{"loss", fmt::format("{:.9g}", r.loss)}});
    if (r.loss_tokens > 0) fmt::print("loss {:.6f}\n", r.loss);
    else fmt::print("loss nan (no next-token targets: every sequence has one token)\n");
}

} // namespace

void register_forward(CLI::App &app) {
    auto *cmd = app.add_subcommand("forward", "Run the forward pass; write logits and print the next-token loss");
    auto a = std::make_shared<ForwardArgs>();
    cmd->add_option("model", a->model, "Model directory (config.json + safetensors) or preset name")->required();
    cmd->add_option("--tokens", a->tokens, "Token ids, comma-separated; ';' separates sequences of a batch")
        ->required();
    cmd->add_option("--out", a->out, "Output safetensors file (tensor 'logits', F32 [T, V] or [B, T, V])")
        ->required();
    cmd->add_option("--seed", a->seed, "Seed for a preset's random weights")->capture_default_str();
    cmd->add_option("--device", a->device, "Where the forward pass runs: cpu | cuda")->capture_default_str();
    cmd->callback([a] { run_forward(*a); });
}

} // namespace zaya::cli
