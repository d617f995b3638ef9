// OpenAI's Responses API (`POST /v1/responses`), on the chat machinery: a request's `input` (a string, or items:
// messages, `function_call`s and `function_call_output`s), `instructions`, `tools` (function tools, Responses' flat
// form), `tool_choice`, `text.format` and `max_output_tokens` become the chat request they mean (parse_api_request
// validates it; refusals name the Responses field), and the answer — words, or calls read as the chat endpoint reads
// them (infer/tool_calls.h) — comes back as a Response object: `output` items of type `message` (one
// `output_text` part) or `function_call`, `status` "incomplete" with `incomplete_details.reason`
// "max_output_tokens" when cut short, and Responses' usage. A stream sends Responses' typed events
// (`response.created`, `response.output_item.added`, `response.output_text.delta`, ...,
// `response.completed`). Responses are kept in memory (infer/response_store.h) for `previous_response_id` and
// GET / DELETE /v1/responses/{id}; hosted tools (web search, file search, ...), `conversation` and `background` are
// refused.
#pragma once
#include "infer/openai_api.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

// A Responses request as the chat request it means (`chat` true, n 1).
struct ResponsesRequest {
    ApiRequest api;
    // The request's fields the Response object repeats (instructions, max_output_tokens, temperature, top_p, tools,
    // tool_choice, parallel_tool_calls, text) and its previous_response_id.
    nlohmann::json echoed;
    // Chat messages: the previous response's conversation, then this input's turns (not the instructions).
    nlohmann::ordered_json conversation = nlohmann::ordered_json::array();
    bool store = true; // keep the Response (OpenAI's default)
};
// The stored conversation of response `id` (ResponseStore), or nullopt when there is none; empty: nothing stored.
using PreviousConversation = std::function<std::optional<nlohmann::ordered_json>(const std::string &id)>;
// Throws ApiError naming the field (404 for an unknown previous_response_id).
ResponsesRequest parse_responses_request(const std::string &body, int64_t max_context,
                                         const PreviousConversation &previous = {});
// The conversation a Response ends: the request's, then its output as an assistant turn (words, or tool calls).
nlohmann::ordered_json answered_conversation(const ResponsesRequest &q, const nlohmann::json &response);

// The Response object of a finished answer. `id` like "resp_7"; `created` in Unix seconds.
nlohmann::json responses_response(const ApiRequest &r, const nlohmann::json &echoed, const std::string &id,
                                  int64_t created, const std::string &model, const Completion &c);

// A Responses stream's events, in order (each with its "type" and "sequence_number"), for the answer's text as
// it comes: open() first, then feed() with each piece of text, then finish() with the completion.
class ResponsesStream {
  public:
    ResponsesStream(ApiRequest r, nlohmann::json echoed, std::string id, int64_t created, std::string model);
    std::vector<nlohmann::json> open();
    std::vector<nlohmann::json> feed(const std::string &text);
    std::vector<nlohmann::json> finish(const Completion &c);

  private:
    nlohmann::json event(const char *type, nlohmann::json fields);
    void open_message(std::vector<nlohmann::json> &out);
    void add_words(const std::string &words, std::vector<nlohmann::json> &out); // to the message, opened if need be
    void close_item(std::vector<nlohmann::json> &out); // the item under way, done
    nlohmann::json snapshot(const char *status) const; // the Response so far

    ApiRequest r_;
    nlohmann::json echoed_;
    std::string id_, model_;
    int64_t created_ = 0;
    int64_t sequence_ = 0;
    AnswerStream answer_;                             // with tools: words and calls as they come
    nlohmann::json output_ = nlohmann::json::array(); // the items so far (the last one maybe under way)
    bool item_open_ = false;
};

} // namespace zaya
