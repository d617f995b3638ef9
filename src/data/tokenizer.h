// Tokenizer: a sentencepiece model (`tokenizer.model`) or a Hugging Face `tokenizer.json` of the same kind
// (data/hf_tokenizer.h), and BPE training of a sentencepiece one.
//
// A given model (e.g. Gemma3's, which real ZAYA1 uses) is only loaded; its special ids are whatever it defines.
// Models trained here fix the special ids to pad = 0, unk = 1, bos = 2, eos = 3, then the 256 byte-fallback
// pieces <0x00>..<0xFF> (ids 4..259), then characters and merges.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace zaya {

class HfTokenizer;
class HfChatTemplate;

class Tokenizer {
  public:
    // A tokenizer.json (any file whose first non-blank byte is '{') or a sentencepiece model; for a directory, the
    // one it holds (find_in), and path() is that file's.
    static Tokenizer load(const std::string &path);
    // A model directory's tokenizer file: its tokenizer.model, else its tokenizer.json, else none; but tokenizer.json
    // when the tokenizer.model beside it spells some of its added tokens otherwise (a post-trained model's
    // repurposed tokens, which transformers reads from tokenizer.json).
    static std::optional<std::string> find_in(const std::string &dir);
    // The name a copy of this tokenizer takes in a model or data directory: tokenizer.model or tokenizer.json.
    const char *file_name() const;
    // What kind it is, for people: "sentencepiece", "SentencePiece-style BPE" or "byte-level BPE" (tokenizer.json).
    const char *kind() const;

    std::vector<int32_t> encode(std::string_view text) const; // no bos/eos added; thread-safe
    // encode(), but a control token's text (<bos>, <|im_end|>) in `text` is that token, as transformers' tokenizers
    // read a rendered chat template. tokenizer.json's encode() does so already; sentencepiece reads such texts as
    // plain text, so here they are cut out first.
    std::vector<int32_t> encode_with_control(std::string_view text) const;
    std::string decode(const std::vector<int32_t> &ids) const;
    std::string piece(int32_t id) const;
    // The bytes token `id` adds to decode()'s text: a byte piece's byte (maybe part of a UTF-8 character), a
    // piece's text with '▁' as a space; nothing for a control token (<bos>, <eos>), which decode() drops.
    std::string token_bytes(int32_t id) const;
    bool is_control(int32_t id) const;
    // Makes special token `piece` (a tokenizer.json's added token marked special, e.g. "<zyphra_tool_call>") text like
    // any other: decode() and token_bytes() give its text, is_control() is false. For the markers that answers are
    // read by (tool calls, reasoning), which transformers would skip as special. False when the tokenizer has no
    // such special token (a sentencepiece model's control pieces stay control).
    bool show_as_text(std::string_view piece);
    // The id of a piece (e.g. "<start_of_turn>"), −1 if the model has no such piece.
    int32_t piece_id(std::string_view piece) const;

    int32_t vocab_size() const;
    // −1 where the model defines no such token.
    int32_t bos_id() const;
    int32_t eos_id() const;
    int32_t pad_id() const;
    int32_t unk_id() const;
    const std::string &path() const { return path_; }

    // The model's own chat template (data/hf_chat_template.h) that load() found beside the tokenizer file
    // (tokenizer_config.json, chat_template.jinja), or set_chat_template() gave; null when none. Throws the error
    // of a template that was there but could not be read or parsed: only chats need it.
    const HfChatTemplate *chat_template() const;
    // Replaces the template (null: ZAYA1's built-in turn format, data/chat_template.h).
    void set_chat_template(std::shared_ptr<const HfChatTemplate> t);

  private:
    static Tokenizer load_file(const std::string &path);

    std::shared_ptr<const sentencepiece::SentencePieceProcessor> sp_; // one of these two
    std::shared_ptr<const HfTokenizer> hf_;
    std::vector<int32_t> shown_; // special tokens decoded as text (show_as_text), sorted
    std::string path_;
    int32_t newline_byte_id_ = -1; // ≥ 0: "\n" always encodes as this byte piece (see load())
    std::shared_ptr<const HfChatTemplate> chat_template_;
    std::string chat_template_error_; // why the template beside the tokenizer file could not be loaded
    // sentencepiece only: its control pieces' texts, longest first, for encode_with_control
    std::shared_ptr<const std::vector<std::pair<std::string, int32_t>>> control_texts_;
};

inline constexpr int32_t kTrainedPadId = 0, kTrainedUnkId = 1, kTrainedBosId = 2, kTrainedEosId = 3;

struct TokenizerTrainOptions {
    // Sentences (lines) sentencepiece loads, at most; beyond it the first ones are kept (no shuffling, which
    // would need sentencepiece's random generator). Callers wanting a spread-out sample pass one.
    uint64_t max_sentences = 2'000'000;
    // Longer lines are skipped by the trainer (they still encode fine afterwards).
    uint64_t max_sentence_bytes = 16384;
    // 1.0: every character seen gets a piece (see below). Lower it (e.g. 0.9995) for small vocabularies on
    // corpora with many rare characters, which then cost byte pieces instead of vocabulary slots.
    double character_coverage = 1.0;
    bool verbose = false; // sentencepiece's own progress log on stderr
};

// Trains a BPE model on the lines of `input_files` and writes it atomically to `model_path`.
//
// Settings, and why:
// - BPE with byte_fallback: any byte sequence encodes (unseen characters become <0xNN> pieces), so no <unk>.
// - character_coverage 1.0 (default): every character seen in training gets a piece, so rare symbols of a small corpus
//   are not split into bytes; vocab_size must leave room for them (sentencepiece says so if it does not).
// - identity normalisation, no dummy prefix, no whitespace collapsing, whitespace-only pieces allowed:
//   decode(encode(text)) == text for any UTF-8 text, and code indentation becomes a few tokens.
//   Newlines are never inside a training line, so "\n" is the byte piece <0x0A>.
// - split_digits: numbers tokenise digit by digit, as in LLaMA/Gemma tokenizers.
// - Deterministic: the input order is fixed, no sampling/shuffling, and num_threads 1; BPE merges break ties
//   deterministically, so the same inputs give a byte-identical model.
void train_tokenizer(const std::vector<std::string> &input_files, int vocab_size, const std::string &model_path,
                     const TokenizerTrainOptions &opts = {});

} // namespace zaya
