// A thinking model's answer split into its reasoning and its answer proper, as vLLM's reasoning parsers (qwen3,
// deepseek_r1) do, for the server's `reasoning_content` beside `content`, in whole responses and in streams. The
// reasoning is one block, "<think>...</think>", at the answer's start, or, when the prompt left a block open (Qwen3's
// and DeepSeek-R1's generation prompts end "<think>\n"), from the answer's first byte to the close. The whitespace
// the templates write around the block's text ("<think>\n...\n</think>\n\n") belongs to neither part.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace zaya {

// The reasoning markers a chat template writes, e.g. {"<think>", "</think>"}.
struct ReasoningTags {
    std::string open = "<think>", close = "</think>";
};

// The tags a chat template's text uses for reasoning: {"<think>","</think>"} when it contains "</think>"; none
// otherwise.
std::optional<ReasoningTags> reasoning_tags_of_template(std::string_view source);

// Whether a prompt (the rendered chat, generation prompt included) leaves a reasoning block open: its last `open`
// comes after its last `close` (Qwen3/DeepSeek-R1 generation prompts ending "<think>\n"). The answer then begins
// inside the reasoning.
bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags &tags);

struct ReasoningPiece {
    std::string reasoning, content;
};

// An answer read as it is written: feed pieces, then finish(). The reasoning is the block's text without the
// whitespace that begins and ends it; the content is the text after the close without the whitespace that begins
// it, or, without a block, the whole answer as written. A block opens where the answer starts in one
// (starts_in_reasoning; an open tag the model writes again at its start, after whitespace or not, is dropped) or
// begins with the open tag after whitespace or not (that whitespace dropped); an answer that begins otherwise has
// no reasoning, whatever tags it writes later. A block never closed (cut short) is all reasoning. Only one block is
// read: a tag after it is content. Each piece holds whole UTF-8 characters only, and what is not yet decided is held
// back: a part of the tag looked for (the open tag at the start, the close inside the block), the whitespace that
// ends the reasoning so far, and the whitespace that begins the answer, the block or the content.
class ReasoningSplitter {
  public:
    ReasoningSplitter(ReasoningTags tags, bool starts_in_reasoning);
    ReasoningPiece feed(std::string_view text);
    // The end of the answer: what was held, each part on the side it was on (a part of a tag is text; the
    // whitespace that ends the reasoning is dropped, as the block ended there).
    ReasoningPiece finish();
    bool reasoned() const { return reasoned_; } // any reasoning was read (a block was opened)
    // The bytes of the answer before its content (the block, its tags and the whitespace after it: the content is
    // the rest); std::string::npos until the content begins.
    size_t content_start() const { return content_start_; }

  private:
    enum class Phase : uint8_t {
        Opening,    // the answer's start: whitespace, then the open tag or not
        Block,      // the block's start: whitespace dropped
        Reasoning,  // the block's text, to the close tag
        AfterClose, // the content's start: whitespace dropped
        Content     // the content as written
    };
    void step(ReasoningPiece &out, bool end);
    bool opening(bool end);
    bool reasoning(ReasoningPiece &out, bool end);

    ReasoningTags tags_;
    bool starts_in_reasoning_;
    bool reasoned_;
    Phase phase_ = Phase::Opening;
    std::string held_; // the text not yet given out
    size_t fed_ = 0;   // the bytes fed
    size_t opening_space_ = 0;                 // Opening: the whitespace held_ begins with, counted so far
    size_t searched_ = 0;                      // Reasoning: the bytes of held_ searched for the close
    size_t space_begin_ = 0, space_end_ = 0;   // Reasoning: held_'s whitespace before a part of the close
    size_t content_start_ = std::string::npos;
};

// Where an answer's content begins, found a byte at a time as ReasoningSplitter finds it: the bytes it releases are
// exactly the splitter's content (once the answer's start is decided; nothing while a block is open). For the
// engine, which watches the content alone for a lazy trigger (tool calls under "auto", infer/json_constraint.h), as
// the server's reader reads calls from the content alone: `{"tool_calls":` inside the reasoning is reasoning. A few
// bytes of state (copied per token by the constraint's mask).
class ContentGate {
  public:
    ContentGate(const ReasoningTags &tags, bool starts_in_reasoning);
    // Reads one byte of the answer; appends to `content` the bytes now known to be the content's: this one, or
    // none, or, where this byte decides that the answer has no block, those held at its start too.
    void feed(uint8_t b, std::string &content);
    bool in_content() const { return phase_ == Phase::Content; }
    // At the answer's start, before the open tag or another byte decides whether a block opens.
    bool deciding() const { return phase_ == Phase::Opening; }
    // While deciding: whether byte b keeps the answer undecided or opens the block (whitespace before the tag, the
    // tag's next byte).
    bool keeps_deciding(uint8_t b) const;
    const ReasoningTags &tags() const { return *tags_; }
    bool starts_in_reasoning() const { return starts_in_reasoning_; }
    // The bytes at the answer's start not decided yet (whitespace and a part of the open tag): the content's, should
    // the next byte decide that there is no block.
    const std::string &held() const { return held_; }

  private:
    enum class Phase : uint8_t { Opening, Block, Reasoning, AfterClose, Content }; // as ReasoningSplitter's
    std::shared_ptr<const ReasoningTags> tags_;
    bool starts_in_reasoning_;
    Phase phase_ = Phase::Opening;
    std::string held_;      // Opening: the whitespace and the part of the open tag read so far
    size_t open_part_ = 0;  // Opening: the open tag's bytes held_ ends with
    size_t close_part_ = 0; // Reasoning: the close tag's bytes the block ends with (trigger_step)
};

// A whole answer: the same as feeding `text` in one piece and finish(), merged.
ReasoningPiece split_reasoning(std::string_view text, const ReasoningTags &tags, bool starts_in_reasoning);

} // namespace zaya
