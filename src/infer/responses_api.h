// OpenAI's Responses API (`POST /v1/responses`), on the chat machinery: a request's `input` (a string, or items:
// messages, `function_call`s and `function_call_output`s), `instructions`, `tools` (function tools, Responses' flat
// form), `tool_choice`, `text.format`, `max_output_tokens` and `top_logprobs` (with `include`
// "message.output_text.logprobs") become the chat request they mean (parse_api_request validates it; refusals name
// the Responses field), and the answer — words and calls read as the chat endpoint reads them
// (infer/tool_calls.h) — comes back as a Response object: `output` items of type `message` (one `output_text` part,
// with its tokens' log-probabilities when included) and/or `function_call`, `status` "incomplete" with
// `incomplete_details.reason` "max_output_tokens" when cut short, and Responses' usage. A stream sends Responses'
// typed events (`response.created`, `response.output_item.added`, `response.output_text.delta`, ...,
// `response.completed`). Responses are kept in memory (infer/response_store.h) for `previous_response_id` and
// GET / DELETE /v1/responses/{id} (and its input_items); `truncation` "auto" drops the oldest turns of a prompt
// longer than the context (drop_turns_to_fit); hosted tools (web search, file search, ...), `conversation` and
// `background` are refused.
#pragma once
#include "infer/chat_answer.h"
#include "infer/openai_api.h"

#include <nlohmann/json.hpp>

#include <functional>
#include <optional>
#include <span>
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
    nlohmann::json input_items = nlohmann::json::array(); // this request's input as Responses' items (no ids)
    // previous_response_id: the items listed before this input's (EarlierResponse::items, with their ids).
    nlohmann::json earlier_items = nlohmann::json::array();
    bool store = true;     // keep the Response (OpenAI's default)
    bool truncate = false; // truncation "auto": a prompt longer than the context drops turns from its beginning
};
// What a stored response passes on to one that continues it (previous_response_id): its conversation (chat
// messages through its answer), and the items a continuation lists before its own input (GET .../input_items: the
// whole conversation it answers): the stored response's listed items, then its output items.
struct EarlierResponse {
    nlohmann::ordered_json conversation;
    nlohmann::json items;
};
EarlierResponse earlier_response(const nlohmann::ordered_json &conversation, const nlohmann::json &listed_items,
                                 const nlohmann::json &response);
// The stored response `id` (ResponseStore) as earlier_response gives it, or nullopt when there is none.
using PreviousResponse = std::function<std::optional<EarlierResponse>(const std::string &id)>;
// Throws ApiError naming the field (404 for an unknown previous_response_id). `tool_format`: parse_api_request's.
ResponsesRequest parse_responses_request(const std::string &body, int64_t max_context,
                                         const PreviousResponse &previous = {},
                                         ToolFormat tool_format = ToolFormat::Json);
// The conversation a Response ends: the request's, then its output as an assistant turn (words, or tool calls).
nlohmann::ordered_json answered_conversation(const ResponsesRequest &q, const nlohmann::json &response);

// The items response `response_id` lists (kept with it): the earlier responses' (request.earlier_items), then its
// input's, each given its id ("msg_7_in0", "fc_7_in1", "fco_7_in2": its kind, the response's number, its place in
// the input).
nlohmann::json listed_input_items(const ResponsesRequest &q, const std::string &response_id);
// GET /v1/responses/{id}/input_items: a page of a stored response's listed items (listed_input_items), OpenAI's list
// object (`data`, `first_id`, `last_id`, `has_more`). `limit` (1–100, default 20), `order` ("desc", the default,
// newest first; or "asc") and `after` (an item id: the page begins after it) as the query gives them, empty when
// absent; throws ApiError naming the parameter.
nlohmann::json input_items_page(const nlohmann::json &items, const std::string &response_id, const std::string &limit,
                                const std::string &order, const std::string &after);

// truncation "auto": drops the fewest of the conversation's oldest turns (after the system turn; never the last one)
// for which `fits` holds of the request, found by bisection (a long conversation is rendered a few times, not once
// per turn); all that may be dropped if none does.
void drop_turns_to_fit(ApiRequest &r, const std::function<bool(const ApiRequest &)> &fits);

// include "message.output_text.logprobs": the chat endpoint's entries of the answer's tokens (token, logprob, bytes,
// top_logprobs), each given out once the words written cover its first byte — the words of an answer end before
// its calls, so the tokens of calls have none.
class WordLogprobs {
  public:
    void add(std::span<const TokenLogprobs> lps, const SpellToken &spell);
    // The entries of the tokens that begin within the text's first `covered` bytes, not given out before.
    nlohmann::json take(size_t covered);

  private:
    std::vector<std::pair<size_t, nlohmann::json>> entries_; // each token's first byte in the text, and its entry
    size_t taken_ = 0, end_ = 0;                              // entries given out; the text's bytes so far
};

// The Response object of a finished answer. `id` like "resp_7"; `created` in Unix seconds.
nlohmann::json responses_response(const ApiRequest &r, const nlohmann::json &echoed, const std::string &id,
                                  int64_t created, const std::string &model, const Completion &c,
                                  const SpellToken &spell);

// A Responses stream's events, in order (each with its "type" and "sequence_number"), for the answer's text as
// it comes: open() first, then feed() with each piece of text (and, when asked for, the log-probabilities of the
// tokens that came with it: a token comes no later than its text), then finish() with the completion. (Tokens
// whose text never comes, a stop string's, have no entry: the Response's words do not hold them.)
class ResponsesStream {
  public:
    ResponsesStream(ApiRequest r, nlohmann::json echoed, std::string id, int64_t created, std::string model,
                    SpellToken spell);
    std::vector<nlohmann::json> open();
    std::vector<nlohmann::json> feed(const std::string &text, std::span<const TokenLogprobs> logprobs = {});
    std::vector<nlohmann::json> finish(const Completion &c);

  private:
    nlohmann::json event(const char *type, nlohmann::json fields);
    void open_message(std::vector<nlohmann::json> &out);
    void add_words(const std::string &words, std::vector<nlohmann::json> &out); // to the message, opened if need be
    void add_calls(const AnswerPiece &piece, std::vector<nlohmann::json> &out);  // each call its item
    void add_reasoning(const std::string &text, std::vector<nlohmann::json> &out); // to the reasoning item
    void close_item(std::vector<nlohmann::json> &out); // the item under way, done
    nlohmann::json snapshot(const char *status) const; // the Response so far

    ApiRequest r_;
    nlohmann::json echoed_;
    std::string id_, model_;
    int64_t created_ = 0;
    int64_t sequence_ = 0;
    SpellToken spell_;
    WordLogprobs logprobs_; // asked for (r_.sample.logprobs ≥ 0): the words' tokens'
    size_t words_ = 0;      // the words' bytes sent
    ChatAnswerStream answer_;                         // reasoning, words and calls as they come
    nlohmann::json output_ = nlohmann::json::array(); // the items so far (the last one maybe under way)
    bool item_open_ = false;
};

} // namespace zaya
