// Loading and saving a model directory in Hugging Face layout: config.json + model.safetensors
// (or shards listed by model.safetensors.index.json). Native and legacy tensor names are accepted.
#pragma once
#include "core/dtype.h"
#include "model/params.h"

#include <string>

namespace zaya {

// Validates everything before returning: config, every expected tensor present with the shape the config
// implies, no unknown tensors, finite values. Errors name the directory, file and tensor.
Model model_load(const std::string &dir);

// Writes config.json and model.safetensors (weights stored as `dtype`), each atomically.
void model_save(const Model &m, const std::string &dir, DType dtype);

} // namespace zaya
