#include "train/start_model.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/tokenizer.h"
#include "io/config_json.h"
#include "io/model_io.h"
#include "model/init.h"
#include "train/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

namespace zaya {

namespace fs = std::filesystem;

Model load_model_or_checkpoint(const std::string &dir, const std::string &who) {
    if (!fs::is_directory(dir)) fail("{}: '{}' is not a directory (a model directory or a checkpoint)", who, dir);
    const fs::path d(dir);
    if (!fs::exists(d / "config.json") && !fs::exists(d / "manifest.json") &&
        (fs::exists(d / "model" / "config.json") || fs::is_directory(d / "checkpoints")))
        fail("{}: '{}' is a run directory: give its trained model ({}) or one of its checkpoints ({})", who, dir,
             (d / "model").string(), (d / "checkpoints" / "step_XXXXXXXX").string());
    return fs::exists(d / "manifest.json") ? checkpoint_load_model(dir) : model_load(dir);
}

std::optional<std::string> checkpoint_tokenizer(const std::string &dir) {
    if (!fs::exists(fs::path(dir) / "manifest.json")) return std::nullopt;
    const nlohmann::json j = checkpoint_manifest(dir);
    const nlohmann::json *data = nullptr;
    if (j.contains("train_config") && j.at("train_config").contains("data")) data = &j.at("train_config").at("data");
    if (!data || !data->is_string() || data->get<std::string>().empty()) return std::nullopt;
    return Tokenizer::find_in(data->get<std::string>());
}

Model load_trained_model(const std::string &dir, const DataManifest &dm, const std::string &tokenizer_path,
                         const std::string &who) {
    Model m = load_model_or_checkpoint(dir, who);
    const fs::path d(dir);
    if (int64_t(dm.vocab_size) > m.config.vocab_size)
        fail("{} {}: the data's tokenizer has {} tokens but the model's vocabulary is {}", who, dir, dm.vocab_size,
             m.config.vocab_size);
    // A run's model/ carries the tokenizer it was trained with; a different one would give its ids new meanings.
    // (A checkpoint has none of its own: its run's data directory is the place to look.)
    const std::optional<std::string> own = Tokenizer::find_in(dir);
    if (own && read_file_bytes(*own) != read_file_bytes(tokenizer_path))
        fail("{} {}: its {} differs from the one the data was prepared with ({}); prepare the data "
             "with `zaya prepare --tokenizer {}`",
             who, dir, fs::path(*own).filename().string(), tokenizer_path, *own);
    return m;
}

namespace {

// A run that started from --init and now resumes: the checkpoint it resumes holds the weights, and its manifest the
// shape, so --init's directory is neither read again (minutes for a large model) nor needed any more (a previous
// phase's run may have been cleaned up). The shape of `--from`, else of the run's newest checkpoint whose manifest
// reads (a run's checkpoints share one); none when there is no such checkpoint.
std::optional<ZayaConfig> resumed_shape(const TrainConfig &tc) {
    if (!tc.resume && tc.resume_from.empty()) return std::nullopt;
    const std::vector<std::string> dirs =
        tc.resume_from.empty() ? checkpoint_list(tc.out) : std::vector<std::string>{tc.resume_from};
    for (const std::string &dir : dirs) {
        try {
            return checkpoint_model_config(dir, checkpoint_manifest(dir));
        } catch (const Error &) {
            // Not readable, or without a model config: resuming will skip it too, and say why.
        }
    }
    return std::nullopt;
}

} // namespace

Model train_start_model(const TrainConfig &tc, const DataManifest &dm, const std::string &tokenizer_path) {
    Model m;
    if (auto shape = tc.init.empty() ? std::nullopt : resumed_shape(tc)) {
        m = Model::create(*shape); // zeros: the checkpoint's weights replace them
    } else if (!tc.init.empty()) {
        m = load_trained_model(tc.init, dm, tokenizer_path, "--init");
        m.config.dtype = "float32"; // the weights are widened on load: training keeps fp32 master weights
    } else {
        ZayaConfig c = tc.model.ends_with(".json") ? config_load(tc.model) : config_preset(tc.model);
        c.vocab_size = int64_t(dm.vocab_size); // the preset's vocabulary follows the tokenizer
        if (dm.bos_id >= 0) c.bos_token_id = dm.bos_id;
        if (dm.eos_id >= 0) c.eos_token_id = dm.eos_id;
        if (dm.pad_id >= 0) c.pad_token_id = dm.pad_id;
        c.validate();
        m = Model::create(c);
        model_init_random(m, tc.seed);
    }
    // Neither changes the parameters' layout: only what the forward pass computes from positions.
    if (tc.rope_theta > 0) m.config.rope_hybrid.rope_theta = tc.rope_theta;
    m.config.max_position_embeddings = std::max(m.config.max_position_embeddings, tc.seq);
    m.config.validate();
    return m;
}

} // namespace zaya
