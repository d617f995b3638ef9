// `zaya serve`: the OpenAI-compatible HTTP server (cpp-httplib) in front of one Engine.
//   POST /v1/completions, POST /v1/chat/completions, POST /v1/responses (OpenAI's Responses API,
//   infer/responses_api.h; GET and DELETE /v1/responses/{id}, and GET its input_items, for stored ones) — JSON, or
//   server-sent events with "stream": true —
//   GET /v1/models, GET /health, GET /metrics (Prometheus), POST /tokenize and /detokenize (vLLM's).
// Requests run concurrently: each HTTP thread submits to the engine, whose loop batches all running requests'
// decode steps together. Refused requests get a 4xx with an OpenAI-style error body; the server keeps serving.
#pragma once
#include "infer/engine.h"
#include "infer/reasoning.h"
#include "infer/tool_formats.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>

namespace httplib {
class Server;
}

namespace zaya {

class ResponseStore;
struct ResponsesRequest;

struct ServerOptions {
    std::string host = "127.0.0.1"; // loopback unless asked otherwise
    int port = 8080;                 // 0: any free port (bind() says which)
    std::string api_key;             // when set, /v1/* needs "Authorization: Bearer <key>"
    std::string model_name = "zaya";
    size_t max_body_bytes = 1 << 20;
    int http_threads = 64; // concurrent connections served (streams hold one each)
    size_t responses_store_bytes = size_t(64) << 20; // stored Responses (previous_response_id); 0: none kept
    // A chat template's variables for every chat request (--chat-template-kwargs), under a request's own
    // chat_template_kwargs; null for none.
    nlohmann::ordered_json chat_template_kwargs;
    // How the model writes tool calls (infer/tool_formats.h; --tool-call-parser, resolve_tool_format): zaya's JSON
    // object, or the model's own format, which its chat template describes.
    ToolFormat tool_format = ToolFormat::Json;
    // The markers of the model's reasoning, returned apart as reasoning_content (--reasoning-parser,
    // resolve_reasoning); none: answers are returned whole.
    std::optional<ReasoningTags> reasoning;
};

class Server {
  public:
    Server(Engine &engine, ServerOptions opts);
    ~Server();
    int bind();  // binds host:port; returns the port; throws zaya::Error naming host and port
    void run();  // serves until stop()
    void stop();

  private:
    void routes();
    std::string metrics_text() const; // GET /metrics
    // A finished Response kept for previous_response_id and GET /v1/responses/{id} (unless "store": false).
    void keep_response(const ResponsesRequest &q, const std::string &id, const nlohmann::json &response);
    Engine &engine_;
    ServerOptions opts_;
    std::unique_ptr<httplib::Server> http_;
    std::unique_ptr<ResponseStore> stored_;
    std::string fingerprint_; // system_fingerprint of the completions (infer/fingerprint.h)
};

} // namespace zaya
