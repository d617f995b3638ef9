// A chat's tokens, one definition for the server's and `zaya generate --chat`'s prompts and for the chats
// `zaya prepare` turns into fine-tuning data. Where the tokenizer carries the model's own chat template
// (Tokenizer::chat_template: a Hugging Face model directory's Jinja chat_template, data/hf_chat_template.h), chats
// are written in it, as transformers' apply_chat_template writes them. Else in ZAYA1's built-in turn format
// (Gemma3's, whose tokenizer ZAYA1 uses):
//   <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{assistant}<end_of_turn>\n …
//   <start_of_turn>model\n                                                  (the generation prompt, when asked for)
// A system message is folded into the first user turn, as Gemma3's template does. <start_of_turn> and
// <end_of_turn> are single special tokens where the tokenizer has them, plain text otherwise. An assistant turn's
// header ("model\n") and its content are encoded apart, so a trained answer starts at the token boundary where
// generation starts after the generation prompt.
#pragma once
#include "data/tokenizer.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

// One message of a chat.
struct ChatMessage {
    std::string role; // "system", "user" or "assistant"; "tool" for a tool's result under a model's own template
    std::string content;
    // The rest of an OpenAI message that a model's own chat template reads: an assistant's "reasoning_content";
    // when the tools are written in the model's format (infer/tool_calls.h), an assistant's "tool_calls" (arguments
    // as objects, as vLLM gives templates) and a tool result's "tool_call_id" and "name". Null when none. The
    // built-in format has no use for them (there calls and results are written into `content`).
    nlohmann::ordered_json fields = nullptr;
};

// The ids of a chat. `generation_prompt`: end with the opening of the model's answer ("<start_of_turn>model\n").
// `trained` (when given) receives one flag per id: 1 for what the model is to learn to say (each assistant content
// and the marker closing it), 0 for the rest. `bos_id` (≥ 0) starts the built-in format; a template writes its own.
// Throws on an empty conversation, and in the built-in format on an unknown role or a system message after the
// first; a template's own refusals (raise_exception) are thrown naming its file.
// `variables`: a model template's other variables (data/hf_chat_template.h, e.g. {"enable_thinking": false}); the
// built-in format has none and ignores them, as a template ignores those it does not use.
std::vector<int32_t> chat_tokens(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id,
                                 bool generation_prompt, std::vector<uint8_t> *trained = nullptr,
                                 const nlohmann::ordered_json &variables = nullptr);

// A chat's prompt for generation: chat_tokens with the generation prompt.
std::vector<int32_t> chat_prompt(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id,
                                 const nlohmann::ordered_json &variables = nullptr);

// The ids one text prompt is fed as: with `chat`, a user's turn (after `system`, when not empty) and the generation
// prompt; else BOS (when bos_id ≥ 0) and the encoded text.
std::vector<int32_t> text_prompt(const Tokenizer &tok, const std::string &text, bool chat, const std::string &system,
                                 int32_t bos_id, const nlohmann::ordered_json &variables = nullptr);

// The ids that end the model's answer in a chat: <end_of_turn>, or under the model's own template its eos_token and
// the turn-ending tokens (<|im_end|>, <|eot_id|>, ...) the template writes; those the tokenizer has.
std::vector<int32_t> chat_end_ids(const Tokenizer &tok);

// What a chat's answer must stop at besides the stop tokens: those ends that are no single token of the tokenizer
// (the text "<end_of_turn>" for a tokenizer `zaya prepare` trained), none otherwise.
std::vector<std::string> chat_stop_strings(const Tokenizer &tok);

} // namespace zaya
