#include "io/model_io.h"

#include "core/error.h"
#include "io/config_json.h"
#include "io/legacy_names.h"
#include "io/safetensors.h"

#include <cmath>
#include <filesystem>
#include <set>

namespace zaya {

namespace fs = std::filesystem;

namespace {

std::string shape_str(const std::vector<int64_t> &s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

void read_part(const TensorInfo &t, float *dst) {
    tensor_read_f32(t, dst);
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(dst[i])) fail("{}: tensor '{}' holds a non-finite value at element {}", t.file, t.name, i);
}

} // namespace

std::vector<NativeSources> checkpoint_sources(const ZayaConfig &c) {
    if (c.legacy_layout) return legacy_sources(c);
    std::vector<NativeSources> sources;
    for (const ParamView &v : ParamLayout::build(c).views) sources.push_back({v.name, {{v.name, v.shape, 0}}});
    return sources;
}

const TensorInfo &checkpoint_part(const SafetensorSet &set, const TensorSource &part, const std::string &dir) {
    const TensorInfo *t = set.find(part.stored_name);
    if (!t) fail("{}: missing tensor '{}' (expected shape {})", dir, part.stored_name, shape_str(part.shape));
    if (t->shape != part.shape)
        fail("{}: tensor '{}' has shape {} but the config implies {}", t->file, t->name, shape_str(t->shape),
             shape_str(part.shape));
    return *t;
}

void check_no_unexpected_tensors(const SafetensorSet &set, const std::set<std::string> &used, const std::string &dir) {
    for (const std::string &name : set.names())
        if (!used.count(name))
            fail("{}: unexpected tensor '{}' in '{}' (not part of a ZAYA model with this config)", dir, name,
                 set.find(name)->file);
}

Model model_load(const std::string &dir) {
    if (!fs::is_directory(dir)) fail("model directory '{}' does not exist or is not a directory", dir);
    const std::string config_path = (fs::path(dir) / "config.json").string();
    if (!fs::exists(config_path)) fail("model directory '{}' has no config.json", dir);
    Model m = Model::create(config_load(config_path));
    SafetensorSet set = SafetensorSet::open(dir);

    std::set<std::string> used;
    for (const NativeSources &ns : checkpoint_sources(m.config)) {
        const ParamView *v = m.layout.find(ns.native_name);
        ZAYA_ASSERT(v != nullptr);
        for (const TensorSource &part : ns.parts) {
            read_part(checkpoint_part(set, part, dir), m.params.data() + v->offset + part.offset);
            used.insert(part.stored_name);
        }
    }
    // A tied checkpoint may still carry lm_head.weight; accept it only if it really is the embedding.
    if (m.config.tie_word_embeddings) {
        if (const TensorInfo *t = set.find("lm_head.weight")) {
            const ParamView *e = m.layout.find("model.embed_tokens.weight");
            std::vector<float> tmp(e->numel);
            read_part(checkpoint_part(set, {t->name, e->shape, 0}, dir), tmp.data());
            for (size_t i = 0; i < e->numel; ++i)
                if (tmp[i] != m.params.data()[e->offset + i])
                    fail("{}: 'lm_head.weight' differs from 'model.embed_tokens.weight' but config has "
                         "tie_word_embeddings = true",
                         t->file);
            used.insert("lm_head.weight");
        }
    }
    check_no_unexpected_tensors(set, used, dir);
    return m;
}

void model_save(const Model &m, const std::string &dir, DType dtype) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) fail("cannot create directory '{}': {}", dir, ec.message());
    std::vector<TensorToWrite> tensors;
    for (const ParamView &v : m.layout.views) {
        // Balancing biases are an fp32 buffer in every implementation (spec A.4); keep them exact.
        DType t = v.trainable ? dtype : DType::F32;
        tensors.push_back({v.name, t, v.shape, m.params.data() + v.offset});
    }
    safetensors_write((fs::path(dir) / "model.safetensors").string(), tensors, {{"format", "pt"}});
    ZayaConfig c = m.config;
    c.dtype = dtype == DType::F32 ? "float32" : dtype == DType::BF16 ? "bfloat16" : "float16";
    config_save(c, (fs::path(dir) / "config.json").string());
}

} // namespace zaya
