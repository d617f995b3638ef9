// Text of generated tokens as it is produced: decodes the ids so far and releases only text that cannot change
// or be retracted — bytes of an unfinished UTF-8 character (sentencepiece's byte pieces decode to U+FFFD until
// the character completes) and any tail that could be the start of a stop string are held back.
#pragma once
#include "data/tokenizer.h"

#include <string>
#include <vector>

namespace zaya {

class TextStream {
  public:
    TextStream(const Tokenizer &tok, std::vector<std::string> stop_strings);
    // Adds one token; returns the text that may be released now. When a stop string completes, returns the text
    // before it and stopped() becomes true (later pushes return nothing).
    std::string push(int32_t id);
    // At the end: whatever was held back (nothing after a stop).
    std::string flush();
    bool stopped() const { return stopped_; }
    const std::string &released() const { return released_; }

  private:
    const Tokenizer &tok_;
    std::vector<std::string> stops_;
    std::vector<int32_t> ids_;
    std::string released_;
    bool stopped_ = false;
};

// One message of a chat.
struct ChatMessage {
    std::string role; // "system", "user" or "assistant"
    std::string content;
};

// The ids of a chat in ZAYA1's turn format (Gemma3's, whose tokenizer ZAYA1 uses):
//   <bos><start_of_turn>user\n{system}\n\n{user}<end_of_turn>\n<start_of_turn>model\n{assistant}<end_of_turn>\n …
//   <start_of_turn>model\n
// A system message is folded into the first user turn, as Gemma3's template does. <start_of_turn> and
// <end_of_turn> are single special tokens where the tokenizer has them, plain text otherwise. Throws on an
// unknown role or an empty conversation.
std::vector<int32_t> chat_prompt(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id);

// The id that ends a turn (<end_of_turn>), −1 if the tokenizer has none.
int32_t end_of_turn_id(const Tokenizer &tok);

} // namespace zaya
