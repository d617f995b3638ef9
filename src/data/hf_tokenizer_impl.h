// The inside of HfTokenizer (data/hf_tokenizer.h), shared by its reader (hf_tokenizer_load.cpp) and its encoder and
// decoder (hf_tokenizer.cpp). Not for other includes.
#pragma once
#include "core/utf8.h"
#include "data/hf_tokenizer.h"
#include "data/onig_regex.h"

#include <array>
#include <cstdint>
#include <memory>
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
    const Utf8Step step = utf8_step(s, i);
    return step.valid ? step.length : 1;
}

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class Prepend { Always, First, Never };

// GPT-2's map of bytes to characters (tokenizers' bytes_char), in which byte-level vocabularies spell their pieces:
// the printable bytes '!'..'~', U+00A1..U+00AC and U+00AE..U+00FF stand for themselves, the 68 others for U+0100 on.
struct ByteLevelMap {
    std::array<std::string, 256> chars; // byte → its character, UTF-8
    std::array<int16_t, 324> bytes;      // code point → its byte, −1 for one that stands for none
    ByteLevelMap() {
        bytes.fill(-1);
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
            const uint32_t cp = self ? b : next++;
            chars[b] = cp < 0x80 ? std::string(1, char(cp))
                                 : std::string{char(0xc0 | (cp >> 6)), char(0x80 | (cp & 0x3f))};
            bytes[cp] = int16_t(b);
        }
    }
};
inline const ByteLevelMap &byte_level_map() {
    static const ByteLevelMap map;
    return map;
}

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
    struct TextOp { // normalizer step: Replace a (or `regex`) → b, Prepend a (to a non-empty piece), or a normal form
        enum Kind { Replace, Prepend, Unicode } kind;
        std::string a, b;
        int utf8proc_options = 0; // Unicode: NFC, NFD, NFKC or NFKD as utf8proc's options
        std::shared_ptr<const OnigRegex> regex;
    };
    struct PreOp {
        // Split on `pattern` (a string, or `regex`); Metaspace with `pattern` as its replacement; ByteLevel: a space
        // before a piece that starts with none (add_prefix_space), GPT-2's pattern (`regex`, when use_regex), then
        // each byte as its character.
        enum Kind { Split, Metaspace, ByteLevel } kind;
        std::string pattern;
        std::shared_ptr<const OnigRegex> regex;
        bool invert = false; // Split: the pieces between matches are the delimiters
        hf_tokenizer_detail::SplitBehavior behavior = hf_tokenizer_detail::SplitBehavior::Isolated;
        hf_tokenizer_detail::Prepend prepend = hf_tokenizer_detail::Prepend::Never;
        bool split = true;             // Metaspace
        bool add_prefix_space = false; // ByteLevel
    };
    struct DecodeOp {
        enum Kind { Replace, ByteFallback, Fuse, Strip, Metaspace, ByteLevel } kind;
        std::string a, b; // Replace a (or `regex`) → b; Strip / Metaspace: the character in a
        std::shared_ptr<const OnigRegex> regex;
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
