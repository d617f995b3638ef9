// A Hugging Face `tokenizer.json` of a BPE model, of either kind in use: SentencePiece-style (BPE over characters
// with byte fallback: Gemma3's, which real ZAYA1 uses, and Llama 2's) or byte-level (each byte a character of
// GPT-2's map: GPT-2's, Llama 3's, Qwen2's). transformers 5 saves a tokenizer as this file alone (no
// tokenizer.model), so a ZAYA1 checkpoint may bring only it.
//
// Encoding follows the `tokenizers` library step by step (checked against it: tests/golden/tokenizer):
//   1. added tokens (special or not) are cut out of the text first, leftmost-longest, with their lstrip / rstrip /
//      single_word rules; those marked `normalized` are matched after step 2 instead;
//   2. normalizer: Replace (a string or a regular expression), Prepend, NFC / NFD / NFKC / NFKD, Sequence of these;
//      applied to each piece between added tokens;
//   3. pre-tokenizer: Split (string or regular expression, any behaviour, invert), Digits, Metaspace, ByteLevel
//      (a prefix space, GPT-2's pattern, bytes as characters), Sequence of these;
//   4. BPE: each word starts as its characters (a character without a piece becomes its <0xNN> byte pieces, or
//      <unk>), then the adjacent pair of lowest merge rank is merged, leftmost first, until no pair has a merge.
// Decoding runs the decoder chain (Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel) with special tokens
// skipped. Anything else (WordPiece, Unigram, other normalizers and pre-tokenizers, subword prefixes, dropout) is
// refused at load, naming the field: the ids would silently differ otherwise. Text that is not valid UTF-8 (which
// `tokenizers` never sees) still encodes: regular expressions and normal forms apply to its valid runs, and its
// other bytes are byte pieces (byte fallback) or byte characters (byte-level).
//
// Special ids: bos is <bos>, <s> or <|begin_of_text|>; eos <eos>, </s>, <|end_of_text|> or <|endoftext|>; pad <pad>;
// unk the BPE model's unk_token, else <unk>: the first of those names the file has, −1 if none (the file names no
// roles).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

class HfTokenizer {
  public:
    // Whether the file at `path` is JSON (its first non-blank byte is '{'): the format check Tokenizer::load makes.
    static bool looks_like_json(const std::string &path);
    static std::shared_ptr<const HfTokenizer> load(const std::string &path);
    ~HfTokenizer();

    std::vector<int32_t> encode(std::string_view text) const; // no bos/eos added
    // ids in [0, vocab_size); special tokens skipped, but those in `shown` (sorted), which are text like any other
    std::string decode(const std::vector<int32_t> &ids, std::span<const int32_t> shown = {}) const;
    // The token's text ("" for an id no token has: the vocabulary may have holes).
    const std::string &piece(int32_t id) const { return pieces_[size_t(id)]; }
    std::string token_bytes(int32_t id, bool shown = false) const; // see Tokenizer::token_bytes; `shown`: as decode
    bool is_control(int32_t id) const;         // a special added token, or a hole
    int32_t piece_id(std::string_view piece) const;
    int32_t vocab_size() const { return int32_t(pieces_.size()); }
    int32_t bos_id() const { return bos_; }
    int32_t eos_id() const { return eos_; }
    int32_t pad_id() const { return pad_; }
    int32_t unk_id() const { return unk_; }
    bool byte_level() const; // a ByteLevel pre-tokenizer or decoder: bytes spelled as GPT-2's characters

    struct Impl;

  private:
    HfTokenizer() = default;
    std::unique_ptr<const Impl> impl_;
    std::vector<std::string> pieces_; // by id
    int32_t bos_ = -1, eos_ = -1, pad_ = -1, unk_ = -1;
};

} // namespace zaya
