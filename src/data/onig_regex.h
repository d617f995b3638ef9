// A regular expression as the tokenizers library compiles and searches them: Oniguruma (the engine it links), its
// default syntax, UTF-8. A tokenizer.json's Split patterns and the byte-level pre-tokenizer's GPT-2 pattern use
// Unicode classes (\p{L}, \p{N}) and look-ahead (\s+(?!\S)), which std::regex lacks.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya {

class OnigRegex {
  public:
    // Throws naming `where` (e.g. "tok.json: pre_tokenizer.pattern.Regex") when the pattern does not compile.
    OnigRegex(const std::string &pattern, const std::string &where);
    ~OnigRegex();
    OnigRegex(const OnigRegex &) = delete;
    OnigRegex &operator=(const OnigRegex &) = delete;

    // The successive non-overlapping matches in valid UTF-8 `text`, as (begin, end) byte offsets, searched as the
    // onig crate's find_iter does: an empty match right where the previous match ended is skipped (the search moves
    // on one character). Thread-safe.
    std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

  private:
    struct Regex;
    std::unique_ptr<Regex> re_;
};

} // namespace zaya
