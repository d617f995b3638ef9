// ZAYA1's chat turn format (Gemma3's, whose tokenizer ZAYA1 uses), one definition for the server's and `zaya
// generate --chat`'s prompts and for the chats `zaya prepare` turns into fine-tuning data:
//   <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{assistant}<end_of_turn>\n …
//   <start_of_turn>model\n                                                  (the generation prompt, when asked for)
// A system message is folded into the first user turn, as Gemma3's template does. <start_of_turn> and
// <end_of_turn> are single special tokens where the tokenizer has them, plain text otherwise. An assistant turn's
// header ("model\n") and its content are encoded apart, so a trained answer starts at the token boundary where
// generation starts after the generation prompt.
#pragma once
#include "data/tokenizer.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

// One message of a chat.
struct ChatMessage {
    std::string role; // "system", "user" or "assistant"
    std::string content;
};

// The ids of a chat. `generation_prompt`: end with "<start_of_turn>model\n" for the model to answer. `trained`
// (when given) receives one flag per id: 1 for what the model is to learn to say (each assistant content and the
// <end_of_turn> closing it), 0 for the rest. Throws on an unknown role, a system message after the first, or an
// empty conversation.
std::vector<int32_t> chat_tokens(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id,
                                 bool generation_prompt, std::vector<uint8_t> *trained = nullptr);

// A chat's prompt for generation: chat_tokens with the generation prompt.
std::vector<int32_t> chat_prompt(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id);

// The ids one text prompt is fed as: with `chat`, a user's turn (after `system`, when not empty) and the generation
// prompt; else BOS (when bos_id ≥ 0) and the encoded text.
std::vector<int32_t> text_prompt(const Tokenizer &tok, const std::string &text, bool chat, const std::string &system,
                                 int32_t bos_id);

// The id that ends a turn (<end_of_turn>), −1 if the tokenizer has none.
int32_t end_of_turn_id(const Tokenizer &tok);

// What a chat's answer must stop at besides the stop tokens: the text "<end_of_turn>" where the tokenizer has no
// such token (a tokenizer `zaya prepare` trained), none otherwise.
std::vector<std::string> chat_stop_strings(const Tokenizer &tok);

// The file of a model directory that holds a chat template of the model's own which is not this turn format (one
// that never writes <start_of_turn>): chat_template.jinja, or tokenizer_config.json's chat_template (a text, or a
// list of named ones). zaya runs no Jinja, so such a model's chats are prompted in this format all the same, which
// the caller should say. Empty when the directory has none, or only this format's; an unreadable file counts as none.
std::optional<std::string> foreign_chat_template(const std::string &model_dir);

} // namespace zaya
