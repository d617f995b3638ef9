// Reading and writing ZayaConfig as Hugging Face `config.json`: the native 40-layer schema (spec §1.1)
// and the legacy 80-half-layer Megatron-export schema (spec §1.2), which is mapped onto the native one.
#pragma once
#include "model/config.h"

#include <nlohmann/json_fwd.hpp>
#include <string>

namespace zaya {

// `source` names the file in error messages. Validates the result.
ZayaConfig config_from_json(const nlohmann::json &j, const std::string &source);
ZayaConfig config_load(const std::string &path);
nlohmann::json config_to_json(const ZayaConfig &c); // native schema
void config_save(const ZayaConfig &c, const std::string &path);

} // namespace zaya
