// zaya export CHECKPOINT_DIR --out MODEL_DIR [--dtype bf16|f32] — a training checkpoint as a Hugging Face model.
#include "cli/commands.h"
#include "core/error.h"
#include "data/hf_chat_template.h"
#include "io/model_io.h"
#include "train/checkpoint.h"
#include "train/start_model.h"

#include <filesystem>
#include <fmt/format.h>

namespace zaya::cli {

namespace fs = std::filesystem;

void register_export(CLI::App &app) {
    auto *cmd = app.add_subcommand(
        "export", "Write a training checkpoint as a Hugging Face model directory (config.json + model.safetensors)");
    auto ckpt = std::make_shared<std::string>();
    auto out = std::make_shared<std::string>();
    auto dtype = std::make_shared<std::string>("f32");
    cmd->add_option("checkpoint", *ckpt, "Checkpoint directory (RUN_DIR/checkpoints/step_XXXXXXXX), or a run "
                                         "directory for its latest checkpoint")
        ->required();
    cmd->add_option("--out", *out, "Output model directory")->required();
    cmd->add_option("--dtype", *dtype, "Weight dtype: f32 | bf16 (balancing biases stay f32)")->capture_default_str();
    cmd->callback([ckpt, out, dtype] {
        DType dt;
        if (*dtype == "f32") dt = DType::F32;
        else if (*dtype == "bf16") dt = DType::BF16;
        else fail("export: --dtype must be f32 or bf16, got '{}'", *dtype);
        std::string dir = *ckpt;
        if (!fs::exists(fs::path(dir) / "manifest.json") && fs::is_directory(fs::path(dir) / "checkpoints")) {
            auto latest = checkpoint_latest(dir);
            if (!latest) fail("export: '{}' has no 'checkpoints/latest' pointer", dir);
            dir = *latest;
        }
        Model m = checkpoint_load_model(dir);
        model_save(m, *out, dt);
        // The tokenizer the run was trained with, when its data directory is still there.
        const auto manifest = checkpoint_manifest(dir);
        std::string note;
        if (const std::optional<std::string> tok = checkpoint_tokenizer(dir)) {
            std::error_code ec;
            const std::string name = fs::path(*tok).filename().string();
            if (fs::copy_file(*tok, fs::path(*out) / name, fs::copy_options::overwrite_existing, ec)) {
                note = " + " + name;
                HfChatTemplate::copy_files(fs::path(*tok).parent_path().string(), *out);
                if (fs::exists(fs::path(*out) / "chat_template.jinja")) note += " + chat_template.jinja";
            }
        }
        fmt::print("exported {} (step {}) to {} ({}{})\n", dir, manifest.value("step", int64_t(-1)), *out, *dtype, note);
    });
}

} // namespace zaya::cli
