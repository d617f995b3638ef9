// Text of generated tokens as it is produced: decodes the ids so far and releases only text that cannot change
// or be retracted — bytes of an unfinished UTF-8 character (sentencepiece's byte pieces decode to U+FFFD until
// the character completes) and any tail that could be the start of a stop string are held back.
#pragma once
#include "data/chat_template.h" // chat_prompt, text_prompt: used with the stream by the server and generate
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
    // The text of all ids so far (its last character possibly unfinished).
    std::string text_so_far();

    const Tokenizer &tok_;
    std::vector<std::string> stops_;
    std::vector<int32_t> ids_;
    std::string released_;
    bool stopped_ = false;
    // Decoding every id again for each new one costs the whole length per token (seconds over a long answer, on
    // the engine's thread). Instead settled_ holds the text of ids_[0, read_), settled when it ended on a whole
    // character, and the ids after it are decoded in a window from prefix_ (the step settled before), whose own
    // text context_ is then cut off: what a tokenizer does to a text's first token (a dummy prefix's space
    // dropped) falls on the context, as it did when that was decoded.
    std::string settled_, context_;
    size_t prefix_ = 0, read_ = 0;
};

} // namespace zaya
