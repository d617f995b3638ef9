// libFuzzer target: parse_api_request must turn any request body into a request or an ApiError (a 4xx), never
// crash, read out of bounds or throw anything else. The first byte picks /v1/completions or /v1/chat/completions.
#include "infer/openai_api.h"

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
    return 0;
}
