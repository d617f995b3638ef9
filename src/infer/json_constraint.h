// JSON mode (OpenAI's `response_format: {"type": "json_object"}`, `zaya generate --json`): each token is drawn only
// from those whose bytes continue the text as a JSON object (infer/json_grammar.h), so the output is a JSON object
// once it ends with finish_reason "stop", and a prefix of one when max_tokens cut it. The model's distribution is
// renormalised over the tokens allowed (their logits unchanged, the others −∞) before the sampling controls apply.
//
// Cost per token: the vocabulary is grouped by first byte, so a state that takes few bytes (after a value: ',',
// '}', ']', whitespace) tests few tokens; inside a string, tokens of plain text (no '"', '\\', control bytes, whole
// UTF-8 characters) are taken without reading them. Only the rest are read byte by byte.
#pragma once
#include "infer/json_grammar.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
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
    // Plain string text: no '"', '\\' or control byte, and whole UTF-8 characters only.
    bool plain(int32_t id) const { return plain_[size_t(id)] != 0; }
    // The ids whose bytes begin with byte b.
    const std::vector<int32_t> &starting_with(uint8_t b) const { return by_first_[b]; }

  private:
    void index();
    std::vector<std::string> bytes_;
    std::vector<uint8_t> plain_;
    std::array<std::vector<int32_t>, 256> by_first_;
};

class JsonConstraint {
  public:
    explicit JsonConstraint(std::shared_ptr<const TokenTable> table) : table_(std::move(table)) {}

    // Sets logits[V] (V = the table's size) of every token that cannot continue the text to −∞; returns how many
    // can (0 only if the vocabulary cannot spell what JSON needs next).
    int64_t mask(float *logits);
    // Reads the bytes of a token mask() allowed; fails naming the token otherwise.
    void advance(int32_t token);
    bool complete() const { return grammar_.complete(); } // the object is closed: generation ends
    const JsonGrammar &grammar() const { return grammar_; }

  private:
    std::shared_ptr<const TokenTable> table_;
    JsonGrammar grammar_;
    std::vector<uint8_t> allowed_; // [V] scratch of mask()
};

} // namespace zaya
