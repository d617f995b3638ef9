#include "cli/model_arg.h"

#include "core/error.h"
#include "io/model_io.h"
#include "model/init.h"

#include <charconv>
#include <filesystem>

namespace zaya::cli {

Model load_or_create_model(const std::string &model_or_preset, uint64_t seed) {
    if (std::filesystem::is_directory(model_or_preset)) return model_load(model_or_preset);
    bool known = false;
    for (const auto &n : config_preset_names()) known |= n == model_or_preset;
    if (!known) {
        std::string names;
        for (const auto &n : config_preset_names()) names += (names.empty() ? "" : ", ") + n;
        fail("'{}' is neither a model directory nor a preset ({})", model_or_preset, names);
    }
    Model m = Model::create(config_preset(model_or_preset));
    model_init_random(m, seed);
    return m;
}

std::vector<std::vector<int32_t>> parse_token_lists(const std::string &text, const std::string &option) {
    std::vector<std::vector<int32_t>> seqs(1);
    size_t i = 0;
    while (i <= text.size()) {
        size_t j = text.find_first_of(",;", i);
        if (j == std::string::npos) j = text.size();
        std::string item = text.substr(i, j - i);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        if (item.empty()) fail("{}: empty entry at character {} of '{}'", option, i, text);
        int64_t v = 0;
        auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (ec != std::errc() || end != item.data() + item.size() || v < 0 || v > INT32_MAX)
            fail("{}: '{}' is not a non-negative token id", option, item);
        seqs.back().push_back(int32_t(v));
        if (j < text.size() && text[j] == ';') seqs.emplace_back();
        i = j + 1;
    }
    return seqs;
}

ModelAndTokens load_model_and_tokens(const std::string &model_or_preset, const std::string &tokens, uint64_t seed) {
    auto seqs = parse_token_lists(tokens); // before loading: a typo in --tokens fails fast
    Model m = load_or_create_model(model_or_preset, seed);
    for (const auto &s : seqs)
        for (int32_t t : s)
            if (t >= m.config.vocab_size)
                fail("--tokens: token id {} is out of range for vocab_size {}", t, m.config.vocab_size);
    return {std::move(m), std::move(seqs)};
}

} // namespace zaya::cli
