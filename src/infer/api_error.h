// A request the OpenAI-compatible server must refuse (infer/openai_api.h, infer/tool_calls.h): HTTP status,
// message, the offending parameter (may be empty), and OpenAI's error type and code.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <utility>

namespace zaya {

struct ApiError {
    ApiError(int status_, std::string message_, std::string param_ = "", std::string type_ = "invalid_request_error",
             std::string code_ = "")
        : status(status_), message(std::move(message_)), param(std::move(param_)), type(std::move(type_)),
          code(std::move(code_)) {}
    int status;
    std::string message, param, type, code;
    nlohmann::json body() const; // {"error": {"message", "type", "param", "code"}}
};

} // namespace zaya
