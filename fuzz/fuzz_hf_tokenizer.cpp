// libFuzzer target: tokenizer.json encoding (data/hf_tokenizer.h) of any bytes, valid UTF-8 or not, with the
// Gemma3-style golden tokenizer. Every id must be in the vocabulary, and the ids must spell the input back: each
// token's bytes (a special token's own text) concatenated give the input with each '▁' a space (the piece that
// stands for a space decodes as one, a literal '▁' included, as in tokenizers and sentencepiece). That holds for
// this tokenizer (no dummy prefix, no token that strips whitespace) and catches a byte lost or doubled by the
// added-token split, the byte fallback of invalid UTF-8 or the merges.
#include "data/hf_tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const std::shared_ptr<const zaya::HfTokenizer> tok =
        zaya::HfTokenizer::load(ZAYA_SOURCE_DIR "/tests/golden/tokenizer/gemma/tokenizer.json");
    const std::string text(reinterpret_cast<const char *>(data), size);
    std::string want;
    for (size_t i = 0; i < size; ++i)
        if (text.compare(i, 3, "\xe2\x96\x81") == 0) want += ' ', i += 2;
        else want += text[i];
    std::string spelled;
    for (const int32_t id : tok->encode(text)) {
        if (id < 0 || id >= tok->vocab_size()) __builtin_trap();
        spelled += tok->is_control(id) ? tok->piece(id) : tok->token_bytes(id);
    }
    if (spelled != want) __builtin_trap();
    return 0;
}
