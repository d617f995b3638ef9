// libFuzzer target: the input is a chat template's source. Parsing it, and rendering what parses against a fixed,
// realistic chat context (system/user/assistant turns with a tool call, tools, add_generation_prompt, bos and eos),
// may fail only with a zaya::Error: no crash, UB, leak, other exception or timeout (the renderer's step and size
// budgets bound what a template can do).
#include "core/error.h"
#include "data/jinja.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

const nlohmann::ordered_json &context() {
    static const nlohmann::ordered_json ctx = nlohmann::ordered_json::parse(R"({
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What's the weather in Paris? Ünïcödé ☃ 日本"},
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "call_1",
                "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}]},
            {"role": "tool", "content": "{\"temp\": 21.5}", "tool_call_id": "call_1"},
            {"role": "assistant", "content": "<think>Fine.</think>It is 21.5 °C.", "reasoning_content": "Fine."},
            {"role": "user", "content": [{"type": "text", "text": "Thanks!"}, {"type": "image"}]}
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                "days": {"type": "integer", "enum": [1, 2, 3]}}, "required": ["city"]}}}],
        "add_generation_prompt": true,
        "enable_thinking": false,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "documents": null
    })");
    return ctx;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string_view source(reinterpret_cast<const char *>(data), size);
    try {
        const zaya::jinja::Template t(source, "fuzz.jinja");
        std::vector<std::pair<size_t, size_t>> generation;
        const std::string out = t.render(context(), &generation, 1700000000);
        for (const auto &[b, e] : generation)
            if (b > e || e > out.size()) __builtin_trap(); // spans must lie within the output
    } catch (const zaya::Error &) {
    }
    return 0;
}
