// zaya init --model PRESET|CONFIG.json --out MODEL_DIR — a freshly initialised model in Hugging Face layout.
#include "cli/commands.h"
#include "core/error.h"
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
};

void run_init(const InitArgs &a) {
    ZayaConfig c = a.model.ends_with(".json") ? config_load(a.model) : config_preset(a.model);
    DType dt = a.dtype == "bf16" ? DType::BF16 : DType::F32;
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
    cmd->add_option("--model", a->model, "Preset (tiny, small, base, zaya1-8b) or a config.json")->capture_default_str();
    cmd->add_option("--out", a->out, "Output model directory")->required();
    cmd->add_option("--dtype", a->dtype, "Stored weight dtype")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
    cmd->add_option("--seed", a->seed, "Initialisation seed")->capture_default_str();
    cmd->callback([a] { run_init(*a); });
}

} // namespace zaya::cli
