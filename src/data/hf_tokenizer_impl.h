// The inside of HfTokenizer (data/hf_tokenizer.h), shared by its reader (hf_tokenizer_load.cpp) and its encoder and
// decoder (hf_tokenizer.cpp). Not for other includes.
#pragma once
#include "core/utf8.h"
#include "data/hf_tokenizer.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zaya {

namespace hf_tokenizer_detail {

struct StringHash {
    using is_transparent = void;
    // Not noexcept: libstdc++ then caches each key's hash, and chains compare hashes before strings.
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using IdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

inline std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    size_t p = 0;
    for (size_t q; !from.empty() && (q = s.find(from, p)) != std::string_view::npos; p = q + from.size())
        out.append(s.substr(p, q - p)).append(to);
    return out.append(s.substr(p));
}

// The length of the character at s[i]: 1 for a byte that starts no valid character (BPE then byte-falls it back).
inline size_t char_len(std::string_view s, size_t i) {
    const size_t len = utf8_length(uint8_t(s[i]));
    if (len == 1 || i + len > s.size() || !is_utf8(s.substr(i, len))) return 1;
    return len;
}

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class Prepend { Always, First, Never };

// Byte-wise trie over the added tokens' contents, for leftmost-longest matching.
class Trie {
  public:
    void insert(std::string_view s, int32_t value) {
        int32_t node = 0;
        for (const char c : s) {
            const uint64_t key = uint64_t(node) << 8 | uint8_t(c);
            auto it = edges_.find(key);
            if (it == edges_.end()) {
                it = edges_.emplace(key, int32_t(values_.size())).first;
                values_.push_back(-1);
            }
            node = it->second;
        }
        if (node > 0 && values_[size_t(node)] < 0) values_[size_t(node)] = value;
    }
    bool empty() const { return edges_.empty(); }
    // The longest content starting at text[pos]: (its length, its value), or (0, −1).
    std::pair<size_t, int32_t> longest(std::string_view text, size_t pos) const {
        std::pair<size_t, int32_t> best{0, -1};
        int32_t node = 0;
        for (size_t i = pos; i < text.size(); ++i) {
            const auto it = edges_.find(uint64_t(node) << 8 | uint8_t(text[i]));
            if (it == edges_.end()) break;
            node = it->second;
            if (values_[size_t(node)] >= 0) best = {i + 1 - pos, values_[size_t(node)]};
        }
        return best;
    }

  private:
    std::unordered_map<uint64_t, int32_t> edges_; // (node << 8 | byte) → child
    std::vector<int32_t> values_{-1};             // node → added token index, −1 if none ends there
};

} // namespace hf_tokenizer_detail

struct HfTokenizer::Impl {
    struct Added {
        int32_t id;
        std::string content;
        bool single_word, lstrip, rstrip, normalized, special;
    };
    struct TextOp { // normalizer step: Replace a → b, or Prepend a (to a non-empty piece)
        bool prepend;
        std::string a, b;
    };
    struct PreOp { // pre-tokenizer step: Split on `pattern`, or Metaspace with `pattern` as its replacement
        bool metaspace;
        std::string pattern;
        hf_tokenizer_detail::SplitBehavior behavior;
        hf_tokenizer_detail::Prepend prepend;
        bool split;
    };
    struct DecodeOp {
        enum Kind { Replace, ByteFallback, Fuse, Strip, Metaspace } kind;
        std::string a, b; // Replace a → b; Strip / Metaspace: the character in a
        size_t start = 0, stop = 0;
        hf_tokenizer_detail::Prepend prepend = hf_tokenizer_detail::Prepend::Never;
    };

    std::string path;
    std::vector<Added> added;
    hf_tokenizer_detail::Trie raw_trie, normalized_trie; // added tokens matched before / after normalisation
    std::vector<TextOp> normalizer;
    std::vector<PreOp> pre_tokenizer;
    std::vector<DecodeOp> decoder;
    bool has_decoder = false;
    hf_tokenizer_detail::IdMap vocab, added_ids;
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges; // (left id, right id) → (rank, merged id)
    std::vector<uint8_t> special;                                      // by id
    std::vector<int32_t> byte_ids;                                     // <0xNN> → id, −1 if absent
    int32_t unk = -1;
    bool fuse_unk = false, byte_fallback = false, ignore_merges = false;

    struct Segment {
        size_t begin, end;
        int32_t added; // index into `added`, −1 for text
    };
    std::vector<Segment> split_added(std::string_view text, const hf_tokenizer_detail::Trie &trie) const;
    std::string normalize(std::string_view s) const;
    std::vector<std::string> pre_tokenize(std::string s, bool at_start) const;
    void bpe(std::string_view word, std::vector<int32_t> &out) const;
};

} // namespace zaya
