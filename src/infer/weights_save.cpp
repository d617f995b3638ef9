// InferModel::save: a model's weights written without an fp32 copy of the matrices (benchmark checkpoints of the
// full ZAYA1-8B shape are written this way).
#include "infer/weights.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/config_json.h"

#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace zaya {

namespace fs = std::filesystem;

void InferModel::save(const std::string &dir, size_t max_shard_bytes) const {
    if (weight_dtype == DType::I8)
        fail("int8-quantized weights are not saved (Hugging Face's layout has no place for their scales); save the "
             "bf16 or f32 model and quantize it when loading");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("cannot create directory '{}': {}", dir, ec.message());
    const ParamLayout full = ParamLayout::build(config);
    const int64_t E = config.num_experts;
    // Every tensor as written: matrices raw (experts: the E consecutive matrices as one [E, rows, cols] tensor).
    std::vector<TensorToWrite> tensors;
    for (size_t i = 0; i < full.views.size(); ++i) {
        const ParamView &v = full.views[i];
        if (!is_matrix_param(v.name)) {
            const DType t = v.trainable ? weight_dtype : DType::F32; // balancing biases stay exact
            tensors.push_back({v.name, t, v.shape, small_buf_.data() + small_layout_.views[i].offset, nullptr});
            continue;
        }
        const Mat *m = nullptr;
        int64_t layer = -1;
        if (v.name == "model.embed_tokens.weight") m = &embed;
        else if (v.name == "lm_head.weight") m = &lm_head;
        else {
            std::sscanf(v.name.c_str(), "model.layers.%ld.", &layer);
            const LayerMats &M = layers[size_t(layer)];
            for (auto [suffix, mat] : {std::pair{"q_proj.weight", &M.q_proj}, {"k_proj.weight", &M.k_proj},
                                       {"v_proj_current.weight", &M.v_cur}, {"v_proj_delayed.weight", &M.v_del},
                                       {"o_proj.weight", &M.o_proj}, {"gate.down_proj.weight", &M.router_down},
                                       {"router_mlp.fc1.weight", &M.router_fc1}, {"router_mlp.fc2.weight", &M.router_fc2},
                                       {"out_proj.weight", &M.router_out}, {"experts.gate_up_proj", &M.gate_up[0]},
                                       {"experts.down_proj", &M.down[0]}})
                if (v.name.ends_with(suffix)) m = mat;
            if (v.name.ends_with("experts.gate_up_proj") || v.name.ends_with("experts.down_proj")) {
                const auto &list = v.name.ends_with("gate_up_proj") ? M.gate_up : M.down;
                for (int64_t e = 1; e < E; ++e)
                    if (static_cast<const uint8_t *>(list[size_t(e)].data) !=
                        static_cast<const uint8_t *>(list[0].data) + size_t(e) * list[0].bytes())
                        fail("{}: cannot save '{}': its experts are not stored contiguously", dir, v.name);
            }
        }
        ZAYA_ASSERT(m != nullptr);
        tensors.push_back({v.name, m->dtype, v.shape, nullptr, m->data});
    }
    // Shards in layout order.
    std::vector<std::vector<TensorToWrite>> shards(1);
    size_t in_shard = 0, total = 0;
    for (const TensorToWrite &t : tensors) {
        size_t n = dtype_size(t.dtype);
        for (int64_t d : t.shape) n *= size_t(d);
        if (in_shard > 0 && in_shard + n > max_shard_bytes) {
            shards.emplace_back();
            in_shard = 0;
        }
        shards.back().push_back(t);
        in_shard += n;
        total += n;
    }
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
        const std::string file = shards.size() == 1 ? "model.safetensors"
                                                    : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1,
                                                                  shards.size());
        fmt::print(stderr, "writing {} ({} tensors)\n", (fs::path(dir) / file).string(), shards[s].size());
        safetensors_write((fs::path(dir) / file).string(), shards[s], {{"format", "pt"}});
        for (const TensorToWrite &t : shards[s]) weight_map[t.name] = file;
    }
    if (shards.size() > 1) {
        nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
        write_file_atomic((fs::path(dir) / "model.safetensors.index.json").string(), index.dump(1) + "\n");
    }
    ZayaConfig c = config;
    c.dtype = weight_dtype == DType::F32 ? "float32" : "bfloat16";
    config_save(c, (fs::path(dir) / "config.json").string());
}

} // namespace zaya
