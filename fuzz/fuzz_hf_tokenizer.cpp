// libFuzzer target: tokenizer.json encoding (data/hf_tokenizer.h) of any bytes, valid UTF-8 or not, with two golden
// tokenizers: the Gemma3-style one (byte fallback) and the Llama 3-style byte-level one (a Split regex searched by
// Oniguruma, then bytes as characters). Every id must be in the vocabulary, and the ids must spell the input back:
// each token's bytes (a special token's own text) concatenated give the input — for the Gemma-style tokenizer with
// each '▁' a space (the piece that stands for a space decodes as one, a literal '▁' included, as in tokenizers and
// sentencepiece). That holds for these tokenizers (no dummy prefix, no normalizer, no token that strips whitespace)
// and catches a byte lost or doubled by the added-token split, the regex split of invalid UTF-8, the byte fallback
// or the merges. The Qwen2-style tokenizer (NFC, which changes the bytes) must encode the input too, and decode it.
#include "data/hf_tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace {

std::string spelled(const zaya::HfTokenizer &tok, const std::string &text) {
    std::string out;
    for (const int32_t id : tok.encode(text)) {
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
        out += tok.is_control(id) ? tok.piece(id) : tok.token_bytes(id);
    }
    return out;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const std::shared_ptr<const zaya::HfTokenizer> gemma =
        zaya::HfTokenizer::load(ZAYA_SOURCE_DIR "/tests/golden/tokenizer/gemma/tokenizer.json");
    static const std::shared_ptr<const zaya::HfTokenizer> byte_level =
        zaya::HfTokenizer::load(ZAYA_SOURCE_DIR "/tests/golden/tokenizer/llama3/tokenizer.json");
    static const std::shared_ptr<const zaya::HfTokenizer> nfc =
        zaya::HfTokenizer::load(ZAYA_SOURCE_DIR "/tests/golden/tokenizer/qwen2/tokenizer.json");
    const std::string text(reinterpret_cast<const char *>(data), size);
    std::string want;
    for (size_t i = 0; i < size; ++i)
        if (text.compare(i, 3, "\xe2\x96\x81") == 0) want += ' ', i += 2;
        else want += text[i];
    if (spelled(*gemma, text) != want) __builtin_trap();
    if (spelled(*byte_level, text) != text) __builtin_trap();
    spelled(*nfc, text);
    nfc->decode(nfc->encode(text));
    return 0;
}
