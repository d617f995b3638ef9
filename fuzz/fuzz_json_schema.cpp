// libFuzzer target: structured outputs (infer/json_schema.h, infer/json_bounds.h). The input is a schema's JSON
// text, a 0x01 byte, then a document. A schema compiles or fails with zaya::Error (nothing else thrown, no crash);
// the document's bytes are fed to its grammar until one is refused. Then the grammar must never be stuck: unless
// the value is complete, some byte continues it (every byte taken leaves a text that a value of the schema
// continues — lengths, bounds, alternatives and all); a complete text must parse; alternatives are read in at most
// kMaxReadings readings. An input of odd length compiles the schema compact (no whitespace between tokens: tool
// calls' form).
#include "core/error.h"
#include "infer/json_schema.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string input(reinterpret_cast<const char *>(data), size);
    const size_t split = input.find('\x01');
    if (split == std::string::npos) return 0;
    const auto schema_json = nlohmann::ordered_json::parse(input.substr(0, split), nullptr, false);
    if (schema_json.is_discarded()) return 0;
    std::shared_ptr<const zaya::JsonSchema> schema;
    try {
        schema = zaya::JsonSchema::compile(schema_json, /*compact=*/size % 2 == 1);
    } catch (const zaya::Error &) {
        return 0;
    }
    zaya::SchemaGrammar g(schema);
    size_t taken = split + 1;
    for (; taken < size; ++taken) {
        zaya::SchemaGrammar next = g;
        if (!next.feed(data[taken])) break;
        if (next.readings() > zaya::SchemaGrammar::kMaxReadings) __builtin_trap(); // alternatives read side by side
        g = std::move(next);
    }
    if (g.complete()) {
        const std::string text = input.substr(split + 1, taken - split - 1);
        try {
            (void)nlohmann::json::parse(text);
        } catch (const nlohmann::json::out_of_range &) { // a number beyond a double: JSON allows it
        } catch (const nlohmann::json::parse_error &) {
            __builtin_trap();
        }
        return 0;
    }
    for (int b = 0; b < 256; ++b)
        if (zaya::SchemaGrammar(g).feed(uint8_t(b))) return 0;
    __builtin_trap(); // stuck: the last byte taken left a text no value of the schema continues
}
