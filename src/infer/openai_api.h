// The OpenAI-compatible request and response bodies (`/v1/completions`, `/v1/chat/completions`), without HTTP:
// parsing validates every field zaya reads (type and range; the error names the field), unknown fields are
// ignored as OpenAI's own server does, and responses / stream chunks are built as the OpenAI clients expect.
#pragma once
#include "infer/engine.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace zaya {

// A request the server must refuse: HTTP status, message, and the offending parameter (may be empty).
struct ApiError {
    ApiError(int status_, std::string message_, std::string param_ = "", std::string type_ = "invalid_request_error",
             std::string code_ = "")
        : status(status_), message(std::move(message_)), param(std::move(param_)), type(std::move(type_)),
          code(std::move(code_)) {}
    int status;
    std::string message, param, type, code;
    nlohmann::json body() const; // {"error": {"message", "type", "param", "code"}}
};

struct ApiRequest {
    bool chat = false;
    bool stream = false;
    std::string model;
    std::vector<int32_t> prompt_ids;    // completions given token ids
    std::string prompt_text;            // completions given text
    std::vector<ChatMessage> messages;  // chat
    SampleOptions sample;               // max_tokens, temperature, top_p, top_k, min_p, repetition_penalty, seed, stop
};

// Parses a request body. Defaults follow OpenAI: max_tokens 16 for completions, up to the context for chat;
// temperature 1, top_p 1, top_k off. `max_context` bounds max_tokens. Throws ApiError.
ApiRequest parse_api_request(const std::string &body, bool chat, int64_t max_context);

// Response bodies. `id` like "cmpl-7"; `created` in Unix seconds.
nlohmann::json completion_response(const ApiRequest &r, const std::string &id, int64_t created,
                                   const std::string &model, const Completion &c);
// One server-sent-events chunk: a text delta (finish_reason null), or the final chunk (finish_reason set, usage).
nlohmann::json stream_chunk(const ApiRequest &r, const std::string &id, int64_t created, const std::string &model,
                            const std::string &delta, const Completion *final_c);

} // namespace zaya
