// Loading and saving a model directory in Hugging Face layout: config.json + model.safetensors
// (or shards listed by model.safetensors.index.json). Native and legacy tensor names are accepted.
#pragma once
#include "core/dtype.h"
#include "io/legacy_names.h"
#include "io/safetensors.h"
#include "model/params.h"

#include <set>

#include <string>

namespace zaya {

// Validates everything before returning: config, every expected tensor present with the shape the config
// implies, no unknown tensors, finite values. Errors name the directory, file and tensor.
Model model_load(const std::string &dir);

// Where each native parameter of `c` comes from in a checkpoint: itself (native names) or the legacy parts.
std::vector<NativeSources> checkpoint_sources(const ZayaConfig &c);
// The stored tensor of `part`, checked to have the shape the config implies; errors name `dir` and the file.
const TensorInfo &checkpoint_part(const SafetensorSet &set, const TensorSource &part, const std::string &dir);
// Fails naming the first tensor of `set` that is not in `used` (not part of a ZAYA model with this config).
void check_no_unexpected_tensors(const SafetensorSet &set, const std::set<std::string> &used, const std::string &dir);

// Writes config.json and model.safetensors (weights stored as `dtype`), each atomically.
void model_save(const Model &m, const std::string &dir, DType dtype);

} // namespace zaya
