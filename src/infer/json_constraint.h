// JSON mode (OpenAI's `response_format: {"type": "json_object"}`, `zaya generate --json`) and structured outputs
// (`{"type": "json_schema", ...}`, `--json-schema FILE`): each token is drawn only from those whose bytes continue
// the text as a JSON object (infer/json_grammar.h) or as a value of the schema (infer/json_schema.h), so the
// output is one once it ends with finish_reason "stop", and a prefix of one when max_tokens cut it. The model's
// distribution is renormalised over the tokens allowed (their logits unchanged, the others −∞) before the sampling
// controls apply.
//
// Cost per token: the vocabulary is grouped by first byte, and outside strings tested by its second byte too, so a
// state that takes few bytes (after a value: ',', '}', ']', whitespace) reads few tokens; inside a string, tokens of
// plain text (no '"', '\\', control bytes, whole UTF-8 characters) are taken without reading them (a string with a
// maxLength compares their known lengths with its room) and the others are read by the string's lexer alone until
// they close it. In a string with a pattern, plain tokens whose characters all keep the pattern's state where it is
// (in "^https://[^ ]+$", all but a space) are taken unread too: each token's character classes are found once per
// pattern and request.
//
// A lazy constraint (a trigger given: tool calls under tool_choice "auto", infer/tool_calls.h) holds the text to the
// schema only if it begins, after any whitespace, with the trigger (the first bytes of the schema's texts); a text
// that turns away from the trigger before it is complete is free from there on. While undecided, the mask forbids
// only the tokens that complete the trigger with bytes the schema does not take.
#pragma once
#include "infer/json_schema.h"

#include <array>
#include <cstdint>
#include <memory>
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
    // The ids whose bytes begin with byte b.
    const std::vector<int32_t> &starting_with(uint8_t b) const { return by_first_[b]; }

  private:
    void index();
    std::vector<std::string> bytes_;
    std::vector<uint8_t> plain_;         // the flag alone: what most masks read, at half the bytes
    std::vector<uint16_t> plain_chars_;
    std::array<std::vector<int32_t>, 256> by_first_;
};

// A lazy constraint's trigger read byte by byte: whitespace before its first byte, then its bytes exactly.
// `matched` counts its bytes read so far. The engine decides by it (JsonConstraint) and the server's reader of tool
// answers (AnswerStream, infer/tool_calls.h) reads by it, so the two agree on every text.
enum class TriggerStep : uint8_t { Undecided, TurnedAway, Complete };
inline TriggerStep trigger_step(std::string_view trigger, size_t &matched, uint8_t b) {
    if (matched == 0 && json_whitespace(b)) return TriggerStep::Undecided;
    if (b != uint8_t(trigger[matched])) return TriggerStep::TurnedAway;
    return ++matched == trigger.size() ? TriggerStep::Complete : TriggerStep::Undecided;
}

class JsonConstraint {
  public:
    // schema: JsonSchema::any_object() for plain JSON mode.
    // trigger: empty, or lazy (above): then a prefix of the schema's texts, or this fails naming it.
    JsonConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const JsonSchema> schema,
                   std::string trigger = {});

    // Sets logits[V] (V = the table's size) of every token that cannot continue the text to −∞; returns how many
    // can (0 only if the vocabulary cannot spell what JSON needs next). Not needed once free().
    int64_t mask(float *logits);
    // Reads the bytes of a token mask() allowed; fails naming the token otherwise.
    void advance(int32_t token);
    bool complete() const { return state_ == State::Held && grammar_.complete(); } // closed: generation ends
    bool held() const { return state_ == State::Held; } // the schema holds the text (a stop token is a piece of it)
    bool free() const { return state_ == State::Free; } // lazy, and the text turned away from the trigger
    const SchemaGrammar &grammar() const { return grammar_; }

  private:
    enum class State : uint8_t { Deciding, Held, Free };
    // Lazy, undecided: what bytes do after the text so far — keep it a prefix of the trigger (Deciding), turn away
    // from it (Free), or complete it (Held: the schema reads what follows).
    // `matched`: the trigger's bytes written, updated; `rest`: where the bytes after the trigger begin (Held).
    State decide(std::string_view bytes, size_t &matched, size_t &rest) const;
    int64_t mask_deciding(float *logits);

    // Per pattern with a small alphabet: each plain token's character classes (regex.h), 0 for the others.
    const std::vector<uint64_t> &classes_of_tokens(const Regex &pattern);

    std::shared_ptr<const TokenTable> table_;
    SchemaGrammar grammar_;
    std::vector<std::pair<const Regex *, std::vector<uint64_t>>> token_classes_; // the last few patterns' (2 MB each)
    std::vector<uint8_t> allowed_; // [V] scratch of mask()
    std::string trigger_;
    State state_ = State::Held;
    size_t matched_ = 0;           // Deciding: the trigger's bytes written so far
    SchemaGrammar after_trigger_;  // lazy: the grammar once the trigger is read
};

} // namespace zaya
