// The OpenAI-compatible request and response bodies (`/v1/completions`, `/v1/chat/completions`), without HTTP:
// parsing validates every field zaya reads (type and range; the error names the field), unknown fields are
// ignored as OpenAI's own server does, and responses / stream chunks are built as the OpenAI clients expect.
#pragma once
#include "infer/api_error.h"
#include "infer/engine.h"
#include "infer/reasoning.h"
#include "infer/tool_calls.h"

#include <nlohmann/json.hpp>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zaya {

// One prompt of a completions request: text, or token ids.
struct ApiPrompt {
    std::string text;
    std::vector<int32_t> ids; // non-empty: the prompt was given as ids
};

struct ApiRequest {
    bool chat = false;
    bool stream = false;
    bool echo = false;                 // completions: the prompt (and its log-probabilities) before the completion
    std::string model;
    std::vector<ApiPrompt> prompts;    // completions: one or more, n choices each (one when streaming)
    int64_t n = 1;                     // choices per prompt (the j-th sampled with seed + j)
    std::vector<ChatMessage> messages; // chat: as the model reads them (tool calls and results written out)
    ApiTools tools;                    // chat: tools, tool_choice, parallel_tool_calls (infer/tool_calls.h)
    // chat: vLLM's chat_template_kwargs, the model's chat template's other variables (data/hf_chat_template.h); null
    // when not given
    nlohmann::ordered_json chat_template_kwargs;
    SampleOptions sample; // max_tokens, temperature, top_p, top_k, min_p, the penalties, logit_bias, seed, stop,
                          // logprobs
    // chat: the markers of the model's reasoning, returned apart as reasoning_content (infer/reasoning.h), and
    // whether the prompt left a block of it open; set by the server for a model that reasons (resolve_reasoning)
    std::optional<ReasoningTags> reasoning;
    bool starts_in_reasoning = false;
};

// A chat's "messages" (OpenAI's form: roles system, developer, user, assistant, tool; content a string or text
// parts) as the model reads them, with `tools` in force: an assistant's tool calls written as the object it answers
// with (its words as they are), the results of tools ("tool" messages) one user turn
// each naming its call, the tools' instructions added to the system message (infer/tool_calls.h). The server's
// prompts and `zaya prepare`'s fine-tuning chats both come from here. Throws ApiError naming the field.
std::vector<ChatMessage> chat_messages(const nlohmann::json &messages, const ApiTools &tools);

// A request body parsed: a JSON object nesting no deeper than any request needs (copies and dumps recurse:
// core/json_depth.h). Throws ApiError (400) naming what is wrong. For Json = nlohmann::json and ordered_json.
template <class Json> Json parse_request_body(const std::string &body);
extern template nlohmann::json parse_request_body<nlohmann::json>(const std::string &);
extern template nlohmann::ordered_json parse_request_body<nlohmann::ordered_json>(const std::string &);

// Parses a request body. Defaults follow OpenAI: max_tokens 16 for completions, up to the context for chat;
// temperature 1, top_p 1, top_k off. `max_context` bounds max_tokens. Log-probabilities: completions'
// `logprobs` k (0–20: the chosen token's and the k most likely; with `echo`, the prompt's too), chat's `logprobs`
// true and `top_logprobs` k. `tool_format`: how the model writes tool calls (ApiTools::format; a model's own format
// passes the tools to its chat template among chat_template_kwargs, as "tools"). Throws ApiError.
ApiRequest parse_api_request(const std::string &body, bool chat, int64_t max_context,
                             ToolFormat tool_format = ToolFormat::Json);

// How a token reads in a response's log-probabilities: the bytes it adds to the text (maybe part of a UTF-8
// character) and, where that is nothing (a control token such as <bos>), the name to show instead.
struct TokenSpelling {
    std::string bytes;
    std::string name;
};
using SpellToken = std::function<TokenSpelling(int32_t)>;

// One choice of a response: the completion and, when the request echoes, the prompt's text and ids before it.
struct ApiChoice {
    Completion completion;
    std::string echo_text;
    std::vector<int32_t> prompt;
};

// A choice's `logprobs` for tokens lps — completions: {tokens, token_logprobs, top_logprobs (the k most likely and
// the chosen token), text_offset (characters, counted on from *offset, which advances)}; chat: {content: [{token,
// logprob, bytes, top_logprobs}]}. `unscored` ≥ 0: a first token with no log-probability (an echoed prompt's).
// A token whose bytes are not whole UTF-8 characters is shown as "bytes:\xNN…" (its bytes stay exact in chat's
// `bytes`).
nlohmann::json api_logprobs(bool chat, std::span<const TokenLogprobs> lps, const SpellToken &spell, int64_t *offset,
                            int32_t unscored = -1);

// Response bodies. `id` like "cmpl-7"; `created` in Unix seconds; choices in the order of the request's prompts,
// each prompt's n together.
nlohmann::json completion_response(const ApiRequest &r, const std::string &id, int64_t created,
                                   const std::string &model, const std::vector<ApiChoice> &choices,
                                   const SpellToken &spell);
// The tool call ids of choice `choice` of response `response_id` ("chatcmpl-7", or the Responses API's "resp_7")
// begin "call_7_<choice>_" (read_tool_answer).
std::string tool_call_prefix(const std::string &response_id, size_t choice);
// One server-sent-events chunk: a text delta (finish_reason null), or the final chunk (finish_reason set, usage);
// `logprobs` (api_logprobs of the delta's tokens) or null.
nlohmann::json stream_chunk(const ApiRequest &r, const std::string &id, int64_t created, const std::string &model,
                            const std::string &delta, const Completion *final_c,
                            const nlohmann::json &logprobs = nullptr);

} // namespace zaya
