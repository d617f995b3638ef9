// zaya init --model PRESET|CONFIG.json --out MODEL_DIR — a freshly initialised model in Hugging Face layout.
#include "cli/commands.h"
#include "core/error.h"
#include "infer/weights.h"
#include "io/config_json.h"
#include "io/model_io.h"
#include "model/init.h"

#include <filesystem>
#include <fmt/format.h>

namespace zaya::cli {

namespace {

struct InitArgs {
    std::string model = "small", out, dtype = "f32";
    uint64_t seed = 1234;
    bool synthetic = false;
    double shard_gb = 4.0;
};

void run_init(const InitArgs &a) {
    ZayaConfig c = a.model.ends_with(".json") ? config_load(a.model) : config_preset(a.model);
    DType dt = a.dtype == "bf16" ? DType::BF16 : DType::F32;
    if (a.synthetic) {
        if (a.shard_gb <= 0) fail("--shard-gb must be positive, got {}", a.shard_gb);
        auto im = InferModel::random(c, dt, a.seed);
        im->save(a.out, size_t(a.shard_gb * 1e9));
        fmt::print("wrote {} ({} parameters, {}, synthetic, seed {}, {:.2f} GB of matrices)\n", a.out,
                   param_counts(c).total, a.dtype, a.seed, double(im->matrix_bytes()) / 1e9);
        return;
    }
    Model m = Model::create(c);
    model_init_random(m, a.seed);
    model_save(m, a.out, dt);
    ParamCounts pc = param_counts(c);
    fmt::print("wrote {} ({} parameters, {}, seed {})\n", a.out, pc.total, a.dtype, a.seed);
}

} // namespace

void register_init(CLI::App &app) {
    auto *cmd = app.add_subcommand("init", "Create a randomly initialised model directory (config.json + safetensors)");
    auto a = std::make_shared<InitArgs>();
    cmd->add_option("--model", a->model, "Preset (tiny, small, base, 1b, zaya1-8b) or a config.json")->capture_default_str();
    cmd->add_option("--out", a->out, "Output model directory")->required();
    cmd->add_option("--dtype", a->dtype, "Stored weight dtype")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
    cmd->add_option("--seed", a->seed, "Initialisation seed")->capture_default_str();
    cmd->add_flag("--synthetic", a->synthetic,
                  "Benchmark weights generated straight in --dtype (matrices uniform with the init's std), no fp32 "
                  "copy: any size, e.g. the full zaya1-8b in bf16");
    cmd->add_option("--shard-gb", a->shard_gb, "--synthetic: largest safetensors shard (GB)")->capture_default_str();
    cmd->callback([a] { run_init(*a); });
}

} // namespace zaya::cli
