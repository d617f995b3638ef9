#include "data/eval_items.h"

#include "core/atomic_file.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

#include <sstream>

namespace zaya {

namespace {

// Each non-blank line of a JSONL file as an object, with `field(key)` that fails naming the file, line and key;
// fails if there is none.
template <class F> void each_object(const std::string &path, const char *shape, F &&f) {
    std::istringstream in(read_file_bytes(path));
    std::string line;
    int64_t objects = 0;
    for (int64_t n = 1; std::getline(in, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception &e) {
            fail("{}:{}: not a JSON object: {}", path, n, e.what());
        }
        auto field = [&](const char *key) -> const nlohmann::json & {
            if (!j.is_object() || !j.contains(key)) fail("{}:{}: no '{}' (each line: {})", path, n, key, shape);
            return j.at(key);
        };
        f(n, field);
        ++objects;
    }
    if (objects == 0) fail("{}: no items (one JSON object per line)", path);
}

} // namespace

std::vector<GenerationItem> load_generation_items(const std::string &path) {
    std::vector<GenerationItem> items;
    each_object(path, "{\"prompt\": str, \"answer\": str}", [&](int64_t n, const auto &field) {
        const nlohmann::json &prompt = field("prompt"), &answer = field("answer");
        if (!prompt.is_string() || prompt.get<std::string>().empty())
            fail("{}:{}: 'prompt' must be a non-empty string", path, n);
        if (!answer.is_string() && !answer.is_number()) fail("{}:{}: 'answer' must be a string or a number", path, n);
        items.push_back({prompt.get<std::string>(), answer.is_string() ? answer.get<std::string>() : answer.dump()});
    });
    return items;
}

std::vector<ChoiceItem> load_choice_items(const std::string &path) {
    std::vector<ChoiceItem> items;
    each_object(path, "{\"context\": str, \"choices\": [str, …], \"answer\": int}", [&](int64_t n,
                                                                                           const auto &field) {
        ChoiceItem it;
        const nlohmann::json &context = field("context"), &choices = field("choices"), &answer = field("answer");
        if (!context.is_string()) fail("{}:{}: 'context' must be a string", path, n);
        it.context = context.get<std::string>();
        if (!choices.is_array() || choices.size() < 2)
            fail("{}:{}: 'choices' must be an array of at least 2 strings", path, n);
        for (const nlohmann::json &c : choices) {
            if (!c.is_string() || c.get<std::string>().empty())
                fail("{}:{}: 'choices' must hold non-empty strings, got {}", path, n, c.dump());
            it.choices.push_back(c.get<std::string>());
        }
        if (!answer.is_number_integer() || answer.get<int64_t>() < 0 ||
            answer.get<int64_t>() >= int64_t(it.choices.size()))
            fail("{}:{}: 'answer' must be an index into its {} choices, got {}", path, n, it.choices.size(),
                 answer.dump());
        it.answer = answer.get<int64_t>();
        items.push_back(std::move(it));
    });
    return items;
}

} // namespace zaya
