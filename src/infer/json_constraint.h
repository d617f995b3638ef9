// JSON mode (OpenAI's `response_format: {"type": "json_object"}`, `zaya generate --json`) and structured outputs
// (`{"type": "json_schema", ...}`, `--json-schema FILE`): each token is drawn only from those whose bytes continue
// the text as a JSON object (infer/json_grammar.h) or as a value of the schema (infer/json_schema.h), so the
// output is one once it ends with finish_reason "stop", and a prefix of one when max_tokens cut it. The model's
// distribution is renormalised over the tokens allowed (their logits unchanged, the others −∞) before the sampling
// controls apply.
//
// Cost per token: the vocabulary is grouped by first byte; outside strings each group is read in the order of its
// bytes, as a walk of their trie that feeds each shared prefix once and skips every token past a prefix refused
// (after a value, whitespace or a key's quote: not the many " word" tokens; before a value, " t" leads only to
// " true" — each " t…" word is refused at its second or third byte, once for all the tokens that share it). Inside
// a string, tokens of plain text (no '"', '\\', control bytes, whole UTF-8 characters) are taken without reading
// them — without a pattern all at once, a copy of their flags (with a maxLength, one pass comparing their known
// lengths with its room) — and the others are read by the string's lexer alone until they close it. In a string
// with a pattern, plain tokens whose characters all keep the pattern's state where it is (in "^https://[^ ]+$", all
// but a space) are taken unread too: each token's character classes are found once per pattern and request.
//
// A lazy constraint (a trigger given: tool calls under tool_choice "auto", infer/tool_calls.h) leaves the text free
// until the trigger (the first bytes of the schema's texts) appears in it, wherever it begins, and holds the rest to
// the schema from there. While it watches, the mask forbids only the tokens that would complete the trigger with
// bytes the schema does not take: tokens that begin with the rest of a trigger the text has begun, and tokens that
// hold it whole (few or none): so most free steps need no mask at all (masks()).
#pragma once
#include "infer/json_schema.h"
#include "infer/reasoning.h"
#include "infer/text_trigger.h"

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya {

class Tokenizer;

// The bytes of every id of a vocabulary (Tokenizer::token_bytes; none for control and unknown tokens and for ids
// the tokenizer lacks), grouped by first byte. Built once per engine, shared by its requests.
class TokenTable {
  public:
    TokenTable(const Tokenizer &tok, int64_t vocab_size);
    // For tests: the bytes of each id given directly.
    explicit TokenTable(std::vector<std::string> bytes);

    int64_t size() const { return int64_t(bytes_.size()); }
    std::string_view bytes(int32_t id) const { return bytes_[size_t(id)]; }
    // Plain string text: no '"', '\\' or control byte, and whole UTF-8 characters only (fewer than 65535).
    bool plain(int32_t id) const { return plain_[size_t(id)] != 0; }
    // A plain token's characters (0 for the others; at most 65535, for longer ones too).
    uint32_t plain_chars(int32_t id) const { return plain_chars_[size_t(id)]; }
    // The ids whose bytes begin with byte b; those of them that are not plain().
    const std::vector<int32_t> &starting_with(uint8_t b) const { return by_first_[b]; }
    const std::vector<int32_t> &not_plain_starting_with(uint8_t b) const { return not_plain_[b]; }
    // plain() of every id, 1 or 0; plain_chars() of every id; how many are plain.
    const std::vector<uint8_t> &plain_flags() const { return plain_; }
    const std::vector<uint16_t> &all_plain_chars() const { return plain_chars_; }
    int64_t plain_count() const { return plain_count_; }
    // The same in the order of their bytes (a trie's walk): sorted(b)[k], and how many first bytes it shares with
    // the one before it (shared(b)[0] = 0).
    const std::vector<int32_t> &sorted(uint8_t b) const { return sorted_[b]; }
    const std::vector<uint16_t> &shared(uint8_t b) const { return shared_[b]; }

  private:
    void index();
    std::vector<std::string> bytes_;
    std::vector<uint8_t> plain_;         // the flag alone: what most masks read, at half the bytes
    std::vector<uint16_t> plain_chars_;
    int64_t plain_count_ = 0;
    std::array<std::vector<int32_t>, 256> by_first_, not_plain_, sorted_;
    std::array<std::vector<uint16_t>, 256> shared_;
};

class JsonConstraint {
  public:
    // schema: JsonSchema::any_object() for plain JSON mode.
    // trigger: empty, or lazy (above): then a prefix of the schema's texts, or this fails naming it; or, with
    // !trigger_in_text, the text the schema's text follows (a reasoning block's close, where the gate starts inside
    // the block), watched for alike, the grammar then fed from the byte after it.
    // gate: with a lazy trigger, where the answer's content begins (a thinking model's reasoning first,
    // infer/reasoning.h): the trigger is watched for in the content alone, as the server's reader reads calls.
    // Without a trigger, the answer is held from its content's start: at its start a reasoning block may open
    // (whitespace, then the gate's open tag: Qwen3-style models open their own), free to its close, the JSON after
    // it (from the byte after the close, as with !trigger_in_text); or the answer is the JSON from its first byte.
    // Where the gate starts inside the block, the JSON follows its close alike.
    JsonConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const JsonSchema> schema,
                   std::string trigger = {}, bool trigger_in_text = true,
                   std::optional<ContentGate> gate = std::nullopt);

    // Sets logits[V] (V = the table's size) of every token that cannot continue the text to −∞; returns how many
    // can (0 only if the vocabulary cannot spell what JSON needs next). Not needed while !masks().
    int64_t mask(float *logits);
    // Reads the bytes of a token mask() allowed (every token drawn, masked or not); fails naming the token otherwise.
    void advance(int32_t token);
    bool complete() const { return state_ == State::Held && grammar_.complete(); } // closed: generation ends
    bool held() const { return state_ == State::Held; } // the schema holds the text (a stop token is a piece of it)
    // Whether mask() may refuse a token now: held, or lazy with the trigger within a token's reach (begun at the
    // text's end, or held whole by some token). Otherwise every token is allowed and mask() would change nothing.
    bool masks() const {
        return state_ != State::Watching || matched_ > 0 || !whole_.empty() || (gate_ && !gate_->held().empty());
    }
    const SchemaGrammar &grammar() const { return grammar_; }

  private:
    enum class State : uint8_t { Opening, Watching, Held }; // Opening: the answer's start, a block or the JSON
    // A token's bytes read at the answer's start through `opening` (a copy of opening_, advanced): Undecided (all of
    // them still may be either), Block (the open tag ends before byte `at`), or Json (the answer is the JSON: what
    // opening_ held, then the token).
    enum class Start : uint8_t { Undecided, Block, Json };
    static Start read_opening(std::string_view bytes, ContentGate &opening, size_t &at);
    int64_t mask_opening(float *logits);
    int64_t mask_held(float *logits);
    void advance_watching(std::string_view bytes, int32_t token);
    // Reads a token's bytes while watching, from the state given (the gate's, if any, and the trigger's part
    // matched): the bytes after the trigger where they complete it, else nullopt.
    std::optional<std::string> watch(std::string_view bytes, std::optional<ContentGate> &gate, size_t &matched) const;
    int64_t mask_watching(float *logits);
    int64_t walk_sorted(uint8_t b, SchemaGrammar first); // mask(): the tokens after b, outside a string

    // Per pattern with a small alphabet: each plain token's character classes (regex.h), 0 for the others.
    const std::vector<uint64_t> &classes_of_tokens(const Regex &pattern);

    std::shared_ptr<const TokenTable> table_;
    SchemaGrammar grammar_;
    std::vector<std::pair<const Regex *, std::vector<uint64_t>>> token_classes_; // the last few patterns' (2 MB each)
    std::vector<uint8_t> allowed_; // [V] scratch of mask()
    std::vector<SchemaGrammar> states_; // scratch of walk_sorted(): the state after each prefix length
    std::string trigger_;
    State state_ = State::Held;
    size_t matched_ = 0;           // Watching: the trigger's bytes the content ends with (trigger_step)
    std::optional<ContentGate> gate_; // Watching: until the content begins (then none)
    std::optional<ContentGate> opening_; // Opening: the answer's start read (whitespace and a part of the open tag)
    std::vector<int32_t> whole_;   // lazy: the tokens that hold the whole trigger
    SchemaGrammar after_trigger_;  // lazy: the grammar once the trigger is read
};

} // namespace zaya
