#include "infer/reasoning.h"

#include "core/utf8.h"
#include "infer/text_trigger.h"

#include <algorithm>
#include <utility>

namespace zaya {

namespace {

// ASCII whitespace: what templates write around the block ("\n", "\n\n") and what models add there.
bool reasoning_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

size_t leading_space(std::string_view s) {
    size_t k = 0;
    while (k < s.size() && reasoning_space(s[k])) ++k;
    return k;
}

// The first `end` bytes of `s` but the whitespace that ends them.
size_t trimmed_end(std::string_view s, size_t end) {
    while (end > 0 && reasoning_space(s[end - 1])) --end;
    return end;
}

// The longest end of `s` that begins `tag` but is not all of it: what the next piece may make the tag. (The
// earliest place the tag may begin: text before it is no part of any tag to come.)
size_t partial_tag(std::string_view s, std::string_view tag) {
    if (tag.empty()) return 0;
    for (size_t k = std::min(s.size(), tag.size() - 1); k > 0; --k)
        if (s.ends_with(tag.substr(0, k))) return k;
    return 0;
}

// How many of the bytes are whole UTF-8 characters: all but a character begun at their end (a JSON writer refuses
// a piece of one). Invalid bytes count as whole, but for a lead byte at the end, held until the text ends.
size_t whole_length(std::string_view s) {
    size_t k = s.size();
    while (k > 0 && (uint8_t(s[k - 1]) & 0xc0) == 0x80) --k; // back to the last character's lead byte
    return k > 0 && s.size() - (k - 1) < utf8_length(uint8_t(s[k - 1])) ? k - 1 : s.size();
}

} // namespace

std::optional<ReasoningTags> reasoning_tags_of_template(std::string_view source) {
    // The close tag: a template that writes it strips or closes reasoning; one that only mentions "<think>" in a
    // system text need not be a thinking model's.
    if (source.find("</think>") == std::string_view::npos) return std::nullopt;
    return ReasoningTags{};
}

bool prompt_opens_reasoning(std::string_view prompt, const ReasoningTags &tags) {
    const size_t open = prompt.rfind(tags.open);
    if (open == std::string_view::npos) return false;
    const size_t close = prompt.rfind(tags.close);
    return close == std::string_view::npos || open > close; // earlier turns' blocks closed, or thinking turned off
}

ReasoningSplitter::ReasoningSplitter(ReasoningTags tags, bool starts_in_reasoning)
    : tags_(std::move(tags)), starts_in_reasoning_(starts_in_reasoning), reasoned_(starts_in_reasoning) {}

ReasoningPiece ReasoningSplitter::feed(std::string_view text) {
    held_.append(text);
    fed_ += text.size();
    ReasoningPiece out;
    step(out, false);
    return out;
}

ReasoningPiece ReasoningSplitter::finish() {
    ReasoningPiece out;
    step(out, true);
    return out;
}

// Gives out what is decided, through as many phases as the text held decides; `end`: the answer ends there.
void ReasoningSplitter::step(ReasoningPiece &out, bool end) {
    if (phase_ == Phase::Opening && !opening(end)) return;
    if (phase_ == Phase::Block) {
        held_.erase(0, leading_space(held_));
        if (held_.empty()) return;
        phase_ = Phase::Reasoning;
    }
    if (phase_ == Phase::Reasoning && !reasoning(out, end)) return;
    if (phase_ == Phase::AfterClose) {
        held_.erase(0, leading_space(held_));
        if (held_.empty()) return;
        phase_ = Phase::Content;
        content_start_ = fed_ - held_.size();
    }
    const size_t give = end ? held_.size() : whole_length(held_);
    out.content.append(held_, 0, give);
    held_.erase(0, give);
}

// Whether the answer's start is decided: the open tag, after whitespace or not (dropped with it), opens a block;
// other text is the answer's as written, or the block's when the answer starts in one. Undecided while the text is
// whitespace and a part of the tag, unless it ends there.
bool ReasoningSplitter::opening(bool end) {
    size_t space = opening_space_; // (counted once: a long run of whitespace, fed a little at a time, stays linear)
    while (space < held_.size() && reasoning_space(held_[space])) ++space;
    opening_space_ = space;
    const std::string_view rest = std::string_view(held_).substr(space);
    if (rest.starts_with(tags_.open)) {
        held_.erase(0, space + tags_.open.size());
        reasoned_ = true;
        phase_ = Phase::Block;
        return true;
    }
    if (!end && std::string_view(tags_.open).starts_with(rest)) return false;
    phase_ = starts_in_reasoning_ ? Phase::Block : Phase::Content;
    if (phase_ == Phase::Content) content_start_ = 0; // (nothing was dropped: the answer is the content)
    return true;
}

// The block's text up to the close tag (dropped), without the whitespace before it. Until the close is read, all
// but what may end the reasoning there: a part of the close, the whitespace before it, a character begun. True once
// the block ended, at its close or at the answer's end (cut short: all of it is reasoning, a part of the close too).
//
// Each byte is searched once: the close from where the last search stopped (less a tag's length), and the whitespace
// held from an earlier piece (space_begin_, space_end_) is stepped over whole, so that a model writing a long run of
// whitespace, a token at a time, is read in linear time.
bool ReasoningSplitter::reasoning(ReasoningPiece &out, bool end) {
    const size_t reach = tags_.close.empty() ? 0 : tags_.close.size() - 1;
    const size_t close = held_.find(tags_.close, searched_ > reach ? searched_ - reach : 0);
    if (close == std::string::npos && !end) {
        const size_t limit = held_.size() - partial_tag(held_, tags_.close);
        size_t text = limit; // trimmed_end(held_, limit)
        while (text > 0 && reasoning_space(held_[text - 1]))
            text = text == space_end_ && space_begin_ < space_end_ ? space_begin_ : text - 1;
        const size_t give = whole_length(std::string_view(held_).substr(0, text));
        out.reasoning.append(held_, 0, give);
        if (give > 0) held_.erase(0, give);
        space_begin_ = text - give;
        space_end_ = limit - give;
        searched_ = held_.size();
        return false;
    }
    const bool closed = close != std::string::npos;
    out.reasoning.append(held_, 0, trimmed_end(held_, closed ? close : held_.size()));
    held_.erase(0, closed ? close + tags_.close.size() : held_.size());
    phase_ = Phase::AfterClose;
    return true;
}

ContentGate::ContentGate(const ReasoningTags &tags, bool starts_in_reasoning)
    : tags_(std::make_shared<const ReasoningTags>(tags)), starts_in_reasoning_(starts_in_reasoning) {}

void ContentGate::feed(uint8_t b, std::string &content) {
    switch (phase_) {
    case Phase::Content:
        content += char(b);
        return;
    case Phase::Opening: {
        const std::string &open = tags_->open;
        if (open_part_ == 0 && reasoning_space(char(b))) {
            held_ += char(b);
            return;
        }
        if (open_part_ < open.size() && uint8_t(open[open_part_]) == b) {
            held_ += char(b);
            if (++open_part_ < open.size()) return;
            held_.clear(); // the tag and the whitespace before it are dropped
            phase_ = Phase::Block;
            return;
        }
        held_ += char(b); // decided: no open tag here
        const std::string held = std::move(held_);
        held_.clear();
        if (!starts_in_reasoning_) {
            phase_ = Phase::Content;
            content += held;
            return;
        }
        phase_ = Phase::Block; // the held text is the block's
        for (char c : held) feed(uint8_t(c), content);
        return;
    }
    case Phase::Block:
        if (reasoning_space(char(b))) return;
        phase_ = Phase::Reasoning;
        [[fallthrough]];
    case Phase::Reasoning:
        if (!tags_->close.empty() && trigger_step(tags_->close, close_part_, b)) phase_ = Phase::AfterClose;
        return;
    case Phase::AfterClose:
        if (reasoning_space(char(b))) return;
        phase_ = Phase::Content;
        content += char(b);
        return;
    }
}

bool ContentGate::keeps_deciding(uint8_t b) const {
    const std::string &open = tags_->open;
    if (phase_ != Phase::Opening) return false;
    if (open_part_ == 0 && reasoning_space(char(b))) return true;
    return open_part_ < open.size() && uint8_t(open[open_part_]) == b;
}

ReasoningPiece split_reasoning(std::string_view text, const ReasoningTags &tags, bool starts_in_reasoning) {
    ReasoningSplitter splitter(tags, starts_in_reasoning);
    ReasoningPiece out = splitter.feed(text);
    const ReasoningPiece rest = splitter.finish();
    out.reasoning += rest.reasoning;
    out.content += rest.content;
    return out;
}

} // namespace zaya
