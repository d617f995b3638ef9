// Shared CLI helpers: resolving "PRESET or MODEL_DIR" and parsing token lists.
#pragma once
#include "model/params.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zaya::cli {

// A directory with config.json is loaded from disk; otherwise the name must be a preset, which gets random
// weights from `seed`.
Model load_or_create_model(const std::string &model_or_preset, uint64_t seed);

// "5,17,3" → one sequence; "5,17;3,4" → two sequences. Errors name the option and the bad entry.
std::vector<std::vector<int32_t>> parse_token_lists(const std::string &text, const std::string &option = "--tokens");

// The model (as load_or_create_model) and the --tokens argument parsed and checked against its vocabulary.
struct ModelAndTokens {
    Model model;
    std::vector<std::vector<int32_t>> sequences;
};
ModelAndTokens load_model_and_tokens(const std::string &model_or_preset, const std::string &tokens, uint64_t seed);

} // namespace zaya::cli
