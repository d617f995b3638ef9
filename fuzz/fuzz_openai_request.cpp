// libFuzzer target: parse_api_request must turn any request body into a request or an ApiError (a 4xx), never
// crash, read out of bounds or throw anything else. The first byte picks /v1/completions or /v1/chat/completions.
// The body is also read as a model's answer to tools (read_tool_answer, and ContentStream in two pieces): no throw,
// and valid UTF-8 in, valid UTF-8 out (the server's JSON writer throws on anything else).
#include "core/utf8.h"
#include "infer/openai_api.h"
#include "infer/tool_calls.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const bool chat = data[0] & 1;
    const std::string body(reinterpret_cast<const char *>(data) + 1, size - 1);
    try {
        zaya::ApiRequest r = zaya::parse_api_request(body, chat, 4096);
        r.sample.validate(); // whatever was accepted must be a valid sampling request
    } catch (const zaya::ApiError &e) {
        if (e.status < 400 || e.status >= 500) __builtin_trap();
    }
    const zaya::ToolAnswer a = zaya::read_tool_answer(body, "stop", "0_0");
    zaya::ContentStream words;
    const size_t cut = data[0] % (body.size() + 1);
    const std::string streamed = words.feed(std::string_view(body).substr(0, cut)) + words.feed(body.substr(cut));
    if (zaya::is_utf8(body) && (!zaya::is_utf8(a.content) || !zaya::is_utf8(streamed))) __builtin_trap();
    return 0;
}
