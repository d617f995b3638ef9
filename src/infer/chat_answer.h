// A chat answer as the server returns it: its reasoning apart (when the model reasons, infer/reasoning.h), then its
// words and tool calls (when the request has tools, infer/tool_calls.h), read whole or as it streams.
#pragma once
#include "infer/openai_api.h"
#include "infer/reasoning.h"
#include "infer/tool_calls.h"

#include <optional>
#include <string>
#include <string_view>

namespace zaya {

// A chat request to a thinking model: its answer's reasoning is split off (ChatAnswerStream, read_chat_answer),
// beginning inside it where the prompt's end opened a block. An answer held to JSON (JSON mode, structured outputs,
// tool_choice "required") is held from the block's end, so the model reasons first, as vLLM holds it: the block the
// prompt opened, or one the model opens at its answer's start (Qwen3-style); an answer that opens none is JSON from
// its first token. Tool calls under "auto" (a lazy trigger) are watched for in the content after the reasoning
// alone, where they are read.
void expect_reasoning(ApiRequest &r, const ReasoningTags &tags, bool starts_in_reasoning);

// A whole answer read: reasoning_content ("" when none), then content and calls as read_tool_answer reads them.
struct ChatAnswer {
    std::string reasoning;
    ToolAnswer answer;
    size_t content_start = 0; // the bytes of the text before its content (its words start there)
};
ChatAnswer read_chat_answer(const ApiRequest &r, const std::string &text, const std::string &finish_reason,
                            const std::string &id_prefix);

// What a piece of a streamed answer adds: reasoning, then words and calls (AnswerPiece).
struct ChatPiece {
    std::string reasoning;
    AnswerPiece answer;
    bool empty() const { return reasoning.empty() && answer.words.empty() && answer.calls.empty(); }
};
// A chat stream chunk's `delta` for a piece: "content" (left out when empty beside reasoning or calls),
// "reasoning_content" and "reasoning" (the same text: vLLM's older and newer names) and "tool_calls" (call_deltas)
// when the piece has them.
nlohmann::json chat_delta(const ChatPiece &piece, const std::string &id_prefix);

class ChatAnswerStream {
  public:
    explicit ChatAnswerStream(const ApiRequest &r);
    ChatPiece feed(std::string_view text);
    ChatPiece finish(); // what was held back, and in a model's own tool format a call cut short
    // The answer's finish reason, given the engine's (before finish(): "tool_calls" for calls whose end was written).
    std::string finish_reason(const std::string &engine_reason) const;
    // The bytes of the text before the words (ReasoningSplitter::content_start: 0 without reasoning), npos while
    // the content has not begun.
    size_t content_start() const { return reasoning_ ? reasoning_->content_start() : 0; }

  private:
    ChatPiece read(ReasoningPiece p, bool end);
    std::optional<ReasoningSplitter> reasoning_; // none: the model's reasoning is not split off
    std::optional<AnswerStream> tools_;          // none: no tools, the words are the text
};

} // namespace zaya
