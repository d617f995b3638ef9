#include "infer/openai_api.h"

#include <limits>

namespace zaya {

using nlohmann::json;

json ApiError::body() const {
    return {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

namespace {

[[noreturn]] void bad(const std::string &param, const std::string &message) { throw ApiError(400, message, param); }

double number(const json &j, const char *key, double lo, double hi) {
    const json &v = j.at(key);
    if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi))
        bad(key, std::string("'") + key + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " +
                     v.dump());
    return x;
}

int64_t integer(const json &j, const char *key, int64_t lo, int64_t hi) {
    const json &v = j.at(key);
    if (!v.is_number_integer()) bad(key, std::string("'") + key + "' must be an integer");
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                          ? std::numeric_limits<int64_t>::max()
                          : v.get<int64_t>();
    if (x < lo || x > hi)
        bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "], got " + v.dump());
    return x;
}

bool has(const json &j, const char *key) { return j.contains(key) && !j.at(key).is_null(); }

std::vector<int32_t> token_ids(const json &a, const char *param) {
    std::vector<int32_t> ids;
    for (const json &t : a) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
            bad(param, std::string("'") + param + "' token ids must be non-negative integers");
        ids.push_back(int32_t(t.get<int64_t>()));
    }
    return ids;
}

void parse_prompt(const json &p, ApiRequest &r) {
    if (p.is_string()) {
        r.prompt_text = p.get<std::string>();
        return;
    }
    if (!p.is_array() || p.empty()) bad("prompt", "'prompt' must be a string, an array of token ids, or one of those in an array");
    if (p[0].is_number_integer()) {
        r.prompt_ids = token_ids(p, "prompt");
        return;
    }
    if (p.size() != 1) bad("prompt", "zaya takes one prompt per request (send several requests: they are batched)");
    if (p[0].is_string()) r.prompt_text = p[0].get<std::string>();
    else if (p[0].is_array() && !p[0].empty()) r.prompt_ids = token_ids(p[0], "prompt");
    else bad("prompt", "'prompt' must be a string, an array of token ids, or one of those in an array");
}

void parse_messages(const json &m, ApiRequest &r) {
    if (!m.is_array() || m.empty()) bad("messages", "'messages' must be a non-empty array");
    for (size_t i = 0; i < m.size(); ++i) {
        const json &msg = m[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
            bad(where + ".role", where + " must be an object with a string 'role'");
        const std::string role = msg["role"].get<std::string>();
        if (role != "system" && role != "user" && role != "assistant" && role != "developer")
            bad(where + ".role", "unsupported role '" + role + "' (system, developer, user, assistant)");
        std::string content;
        const json &c = msg.contains("content") ? msg["content"] : json();
        if (c.is_string()) content = c.get<std::string>();
        else if (c.is_array()) { // [{"type": "text", "text": "..."}, ...]
            for (const json &part : c) {
                // (json == "text" compares without converting: a "type" of another JSON type is just not text.)
                if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
                    !part["text"].is_string())
                    bad(where + ".content", "only text content parts are supported");
                content += part["text"].get<std::string>();
            }
        } else bad(where + ".content", where + ".content must be a string or an array of text parts");
        r.messages.push_back({role == "developer" ? "system" : role, content});
    }
    if (r.messages.size() > 1)
        for (size_t i = 1; i < r.messages.size(); ++i)
            if (r.messages[i].role == "system") bad("messages", "a system message may only come first");
}

} // namespace

ApiRequest parse_api_request(const std::string &body, bool chat, int64_t max_context) {
    json j;
    try {
        j = json::parse(body);
    } catch (const json::exception &e) {
        bad("", std::string("request body is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) bad("", "request body must be a JSON object");
    ApiRequest r;
    r.chat = chat;
    if (has(j, "model")) {
        if (!j["model"].is_string()) bad("model", "'model' must be a string");
        r.model = j["model"].get<std::string>();
    }
    if (chat) {
        if (!j.contains("messages")) bad("messages", "'messages' is required");
        parse_messages(j["messages"], r);
    } else {
        if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
        parse_prompt(j["prompt"], r);
    }
    if (has(j, "stream")) {
        if (!j["stream"].is_boolean()) bad("stream", "'stream' must be a boolean");
        r.stream = j["stream"].get<bool>();
    }
    SampleOptions &o = r.sample;
    o.temperature = 1.0; // OpenAI's defaults: plain sampling
    o.top_k = 0;
    o.max_new_tokens = chat ? max_context : 16;
    for (const char *key : {"max_tokens", "max_completion_tokens"})
        if (has(j, key)) o.max_new_tokens = integer(j, key, 0, max_context);
    if (has(j, "temperature")) o.temperature = number(j, "temperature", 0, 2);
    if (has(j, "top_p")) o.top_p = number(j, "top_p", 0, 1);
    if (o.top_p == 0) o.temperature = 0; // the limit of a vanishing nucleus: greedy
    if (o.top_p == 0) o.top_p = 1;
    if (has(j, "top_k")) o.top_k = integer(j, "top_k", 0, std::numeric_limits<int32_t>::max());
    if (has(j, "min_p")) o.min_p = number(j, "min_p", 0, 1);
    if (has(j, "repetition_penalty")) o.repetition_penalty = number(j, "repetition_penalty", 0.01, 100);
    if (has(j, "seed")) o.seed = uint64_t(integer(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    for (const char *key : {"frequency_penalty", "presence_penalty"})
        if (has(j, key) && number(j, key, -2, 2) != 0)
            bad(key, std::string("'") + key + "' is not supported (use repetition_penalty)");
    if (has(j, "n") && integer(j, "n", 1, 1) != 1) bad("n", "'n' must be 1");
    if (has(j, "echo") && (!j["echo"].is_boolean() || j["echo"].get<bool>())) bad("echo", "'echo' is not supported");
    for (const char *key : {"logprobs", "top_logprobs", "tools", "functions", "response_format"})
        if (has(j, key) && !(j[key].is_boolean() && !j[key].get<bool>()))
            bad(key, std::string("'") + key + "' is not supported");
    if (has(j, "stop")) {
        const json &s = j["stop"];
        if (s.is_string()) o.stop_strings = {s.get<std::string>()};
        else if (s.is_array() && s.size() <= 16) {
            for (const json &x : s) {
                if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings");
                o.stop_strings.push_back(x.get<std::string>());
            }
        } else bad("stop", "'stop' must be a string or an array of at most 16 strings");
        for (const std::string &x : o.stop_strings)
            if (x.empty()) bad("stop", "'stop' strings must not be empty");
    }
    if (has(j, "stop_token_ids")) {
        if (!j["stop_token_ids"].is_array()) bad("stop_token_ids", "'stop_token_ids' must be an array of integers");
        o.stop_tokens = token_ids(j["stop_token_ids"], "stop_token_ids");
    }
    if (has(j, "user") && !j["user"].is_string()) bad("user", "'user' must be a string");
    return r;
}

json completion_response(const ApiRequest &r, const std::string &id, int64_t created, const std::string &model,
                         const Completion &c) {
    json choice = {{"index", 0}, {"finish_reason", c.finish_reason}};
    if (r.chat) choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    else {
        choice["text"] = c.text;
        choice["logprobs"] = nullptr;
    }
    choice["token_ids"] = c.tokens; // zaya extension: the generated ids
    const int64_t n = int64_t(c.tokens.size());
    return {{"id", id},
            {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", json::array({choice})},
            {"usage", {{"prompt_tokens", c.prompt_tokens}, {"completion_tokens", n}, {"total_tokens", c.prompt_tokens + n}}}};
}

json stream_chunk(const ApiRequest &r, const std::string &id, int64_t created, const std::string &model,
                  const std::string &delta, const Completion *final_c) {
    json choice = {{"index", 0}, {"finish_reason", final_c ? json(final_c->finish_reason) : json(nullptr)}};
    if (r.chat) choice["delta"] = final_c ? json::object() : json{{"content", delta}};
    else {
        choice["text"] = final_c ? "" : delta;
        choice["logprobs"] = nullptr;
    }
    json chunk = {{"id", id},
                  {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({choice})}};
    if (final_c) {
        const int64_t n = int64_t(final_c->tokens.size());
        chunk["usage"] = {{"prompt_tokens", final_c->prompt_tokens},
                          {"completion_tokens", n},
                          {"total_tokens", final_c->prompt_tokens + n}};
    }
    return chunk;
}

} // namespace zaya
