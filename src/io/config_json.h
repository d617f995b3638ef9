// Reading and writing ZayaConfig as Hugging Face `config.json`: the native 40-layer schema (spec §1.1)
// and the legacy 80-half-layer Megatron-export schema (spec §1.2), which is mapped onto the native one.
#pragma once
#include "model/config.h"

#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

// `source` names the file in error messages. Validates the result.
ZayaConfig config_from_json(const nlohmann::json &j, const std::string &source);
ZayaConfig config_load(const std::string &path);
// Every id `eos_token_id` names in model directory `dir`'s config.json and generation_config.json (an integer, a list
// of them or null; a file or field that is missing names none), in that order, each once: Hugging Face's generate
// stops at any of them (a chat model's list holds its end-of-turn token), where ZayaConfig keeps one.
std::vector<int64_t> eos_token_ids(const std::string &dir);
nlohmann::json config_to_json(const ZayaConfig &c); // native schema
void config_save(const ZayaConfig &c, const std::string &path);

} // namespace zaya
