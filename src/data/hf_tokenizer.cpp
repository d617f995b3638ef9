// Encoding and decoding with a tokenizer.json (data/hf_tokenizer.h), step by step as the tokenizers library does.
#include "data/hf_tokenizer.h"

#include "core/error.h"
#include "core/hex.h"
#include "data/hf_tokenizer_impl.h"

#include <utf8proc.h>

#include <algorithm>
#include <cstdlib>
#include <queue>

namespace zaya {

namespace hf_tokenizer_detail {

uint32_t code_point(std::string_view s, size_t i) {
    if (char_len(s, i) == 1) return uint8_t(s[i]);
    return utf8_next(s, i);
}

// The start of the character before byte i (> 0).
size_t prev_char(std::string_view s, size_t i) {
    size_t j = i - 1;
    while (j > 0 && i - j < 4 && (uint8_t(s[j]) & 0xc0) == 0x80) --j;
    return char_len(s, j) == i - j ? j : i - 1;
}

// Unicode White_Space (Rust's char::is_whitespace), which lstrip / rstrip skip.
bool is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
           c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// A word character for single_word tokens: Unicode's \w as Rust's regex crate (which tokenizers matches it with)
// has it: letters, marks, decimal digits, letter numbers (Ⅻ), connector punctuation ('_'), the joiners, and the
// few symbols that are Other_Alphabetic (circled and squared Latin letters). Categories from utf8proc.
bool is_word_char(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    switch (utf8proc_category(utf8proc_int32_t(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
        return true;
    default:
        return c == 0x200c || c == 0x200d || (c >= 0x24b6 && c <= 0x24e9) || (c >= 0x1f130 && c <= 0x1f149) ||
               (c >= 0x1f150 && c <= 0x1f169) || (c >= 0x1f170 && c <= 0x1f189);
    }
}

// Calls f(i, j) for each maximal run s[i, j) of valid UTF-8, in order; the bytes between runs are invalid.
template <class F> void each_valid_run(std::string_view s, F &&f) {
    for (size_t i = 0; i < s.size();) {
        size_t j = i;
        for (Utf8Step c; j < s.size() && (c = utf8_step(s, j)).valid;) j += c.length;
        if (j > i) f(i, j);
        for (Utf8Step c; j < s.size() && !(c = utf8_step(s, j)).valid;) j += c.length;
        i = j;
    }
}

// Where a pattern matches in `s`: each occurrence of `literal`, or, where `regex` is given, its matches (searched in
// each valid UTF-8 run of `s` alone: a tokenizer's text is valid UTF-8, zaya's input need not be).
std::vector<std::pair<size_t, size_t>> matches_of(std::string_view s, std::string_view literal, const OnigRegex *regex) {
    std::vector<std::pair<size_t, size_t>> out;
    if (!regex) {
        for (size_t p = 0, q; !literal.empty() && (q = s.find(literal, p)) != std::string_view::npos;
             p = q + literal.size())
            out.emplace_back(q, q + literal.size());
        return out;
    }
    each_valid_run(s, [&](size_t i, size_t j) {
        for (const auto &[b, e] : regex->find_all(s.substr(i, j - i))) out.emplace_back(i + b, i + e);
    });
    return out;
}

// `s` with each match of `literal` (or of `regex`, where given) replaced by `to`: tokenizers' Replace.
std::string replace_matches(std::string_view s, std::string_view literal, const OnigRegex *regex, std::string_view to) {
    if (!regex) return replace_all(s, literal, to);
    std::string out;
    size_t p = 0;
    for (const auto &[b, e] : matches_of(s, literal, regex)) out.append(s.substr(p, b - p)).append(to), p = e;
    return out.append(s.substr(p));
}

// Cuts `s` at `op`'s matches, keeping or attaching the delimiters as its behaviour says (tokenizers'
// SplitDelimiterBehavior; with `invert`, the text between matches is the delimiter); empty pieces are dropped.
std::vector<std::string> split_on(std::string_view s, const HfTokenizer::Impl::PreOp &op) {
    std::vector<std::pair<std::string_view, bool>> parts; // (text, is a delimiter)
    size_t p = 0;
    for (const auto &[q, e] : matches_of(s, op.pattern, op.regex.get())) {
        if (q > p) parts.emplace_back(s.substr(p, q - p), op.invert);
        parts.emplace_back(s.substr(q, e - q), !op.invert); // an empty match too: it decides what merges
        p = e;
    }
    if (p < s.size()) parts.emplace_back(s.substr(p), op.invert);
    std::vector<std::string> out;
    switch (op.behavior) {
    case SplitBehavior::Removed:
        for (const auto &[t, d] : parts)
            if (!d) out.emplace_back(t);
        break;
    case SplitBehavior::Isolated:
        for (const auto &[t, d] : parts) out.emplace_back(t);
        break;
    case SplitBehavior::Contiguous:
        for (size_t i = 0; i < parts.size(); ++i)
            if (parts[i].second && i > 0 && parts[i - 1].second) out.back() += parts[i].first;
            else out.emplace_back(parts[i].first);
        break;
    case SplitBehavior::MergedWithPrevious: // a delimiter joins the piece before it, unless that is a delimiter
        for (size_t i = 0; i < parts.size(); ++i)
            if (parts[i].second && i > 0 && !parts[i - 1].second) out.back() += parts[i].first;
            else out.emplace_back(parts[i].first);
        break;
    case SplitBehavior::MergedWithNext: // a delimiter starts the piece after it, unless that is a delimiter
        for (size_t i = parts.size(); i-- > 0;)
            if (parts[i].second && i + 1 < parts.size() && !parts[i + 1].second) out.back().insert(0, parts[i].first);
            else out.emplace_back(parts[i].first);
        std::reverse(out.begin(), out.end());
        break;
    }
    std::erase_if(out, [](const std::string &piece) { return piece.empty(); });
    return out;
}

// A Unicode normal form (utf8proc's `options`) of each valid UTF-8 run of `s`; invalid bytes stay as they are.
std::string unicode_normal_form(std::string_view s, int options) {
    std::string out;
    size_t done = 0; // bytes of `s` handled
    each_valid_run(s, [&](size_t i, size_t j) {
        out.append(s.substr(done, i - done)); // invalid bytes before the run
        utf8proc_uint8_t *mapped = nullptr;
        const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t *>(s.data() + i),
                                                utf8proc_ssize_t(j - i), &mapped, utf8proc_option_t(options));
        if (n < 0) fail("Unicode normalisation failed: {}", utf8proc_errmsg(n));
        out.append(reinterpret_cast<const char *>(mapped), size_t(n));
        std::free(mapped);
        done = j;
    });
    return out.append(s.substr(done));
}

} // namespace hf_tokenizer_detail

std::string HfTokenizer::Impl::normalize(std::string_view s) const {
    std::string out(s);
    using namespace hf_tokenizer_detail;
    for (const TextOp &op : normalizer) {
        if (op.kind == TextOp::Prepend) out = out.empty() ? out : op.a + out; // tokenizers: non-empty text only
        else if (op.kind == TextOp::Replace) out = replace_matches(out, op.a, op.regex.get(), op.b);
        else out = unicode_normal_form(out, op.utf8proc_options);
    }
    return out;
}

// tokenizers' AddedVocabulary::find_matches: leftmost-longest matches, then each token's own rules.
std::vector<HfTokenizer::Impl::Segment> HfTokenizer::Impl::split_added(std::string_view text,
                                                                      const hf_tokenizer_detail::Trie &trie) const {
    using namespace hf_tokenizer_detail;
    std::vector<Segment> out;
    size_t done = 0; // text before this is in `out`
    for (size_t i = 0; !trie.empty() && i < text.size();) {
        const auto [len, index] = trie.longest(text, i);
        if (len == 0) {
            ++i;
            continue;
        }
        size_t start = i, stop = i + len;
        i = stop;
        const Added &a = added[size_t(index)];
        if (a.single_word && ((start > 0 && is_word_char(code_point(text, prev_char(text, start)))) ||
                              (stop < text.size() && is_word_char(code_point(text, stop)))))
            continue;
        if (a.lstrip)
            while (start > done && is_space(code_point(text, prev_char(text, start)))) start = prev_char(text, start);
        if (a.rstrip)
            while (stop < text.size() && is_space(code_point(text, stop))) stop += char_len(text, stop);
        if (done < start) out.push_back({done, start, -1});
        out.push_back({start, stop, index});
        done = i = stop;
    }
    if (done < text.size()) out.push_back({done, text.size(), -1});
    return out;
}

std::vector<std::string> HfTokenizer::Impl::pre_tokenize(std::string s, bool at_start) const {
    using namespace hf_tokenizer_detail;
    std::vector<std::string> pieces{std::move(s)};
    for (const PreOp &op : pre_tokenizer) {
        std::vector<std::string> next;
        for (size_t k = 0; k < pieces.size(); ++k) {
            std::string p = std::move(pieces[k]);
            if (op.kind == PreOp::ByteLevel) {
                if (op.add_prefix_space && !p.empty() && p[0] != ' ') p.insert(0, " "); // as tokenizers' prepend
                const ByteLevelMap &map = byte_level_map();
                for (std::string &q : op.regex ? split_on(p, op) : std::vector<std::string>{std::move(p)}) {
                    std::string chars;
                    for (const char c : q) chars += map.chars[uint8_t(c)];
                    next.push_back(std::move(chars));
                }
                continue;
            }
            if (op.kind == PreOp::Metaspace) {
                p = replace_all(p, " ", op.pattern);
                const bool first = at_start && k == 0;
                if ((op.prepend == Prepend::Always || (op.prepend == Prepend::First && first)) &&
                    p.compare(0, op.pattern.size(), op.pattern) != 0)
                    p.insert(0, op.pattern);
                if (!op.split) {
                    next.push_back(std::move(p));
                    continue;
                }
            }
            for (std::string &q : split_on(p, op)) next.push_back(std::move(q));
        }
        pieces = std::move(next);
    }
    return pieces;
}

// One word: its characters (or their byte pieces, or <unk>), then merges by rank — tokenizers' Word::merge_all.
void HfTokenizer::Impl::bpe(std::string_view word, std::vector<int32_t> &out) const {
    using namespace hf_tokenizer_detail;
    if (ignore_merges)
        if (const auto it = vocab.find(word); it != vocab.end()) return out.push_back(it->second);
    struct Symbol {
        int32_t id, prev, next;
        bool alive;
    };
    std::vector<Symbol> sym;
    auto add = [&](int32_t id) { sym.push_back({id, int32_t(sym.size()) - 1, int32_t(sym.size()) + 1, true}); };
    bool last_unk = false;
    for (size_t i = 0; i < word.size();) {
        const size_t len = char_len(word, i);
        const std::string_view c = word.substr(i, len);
        i += len;
        if (const auto it = vocab.find(c); it != vocab.end()) {
            add(it->second), last_unk = false;
            continue;
        }
        if (byte_fallback && std::all_of(c.begin(), c.end(), [&](char b) { return byte_ids[uint8_t(b)] >= 0; })) {
            for (const char b : c) add(byte_ids[uint8_t(b)]);
            last_unk = false;
            continue;
        }
        if (unk < 0) fail("{}: no piece for '{}' and the model has no unk_token", path, std::string(c));
        if (!(fuse_unk && last_unk)) add(unk);
        last_unk = true;
    }
    if (sym.empty()) return;
    sym.back().next = -1;

    struct Merge {
        int32_t rank, pos, id;
        bool operator>(const Merge &o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    std::priority_queue<Merge, std::vector<Merge>, std::greater<>> queue;
    auto push = [&](int32_t pos) {
        if (pos < 0 || sym[size_t(pos)].next < 0) return;
        const auto it = merges.find(uint64_t(uint32_t(sym[size_t(pos)].id)) << 32 |
                                    uint32_t(sym[size_t(sym[size_t(pos)].next)].id));
        if (it != merges.end()) queue.push({it->second.first, pos, it->second.second});
    };
    for (int32_t p = 0; p < int32_t(sym.size()); ++p) push(p);
    while (!queue.empty()) {
        const Merge m = queue.top();
        queue.pop();
        Symbol &left = sym[size_t(m.pos)];
        if (!left.alive || left.next < 0) continue;
        Symbol &right = sym[size_t(left.next)];
        const auto it = merges.find(uint64_t(uint32_t(left.id)) << 32 | uint32_t(right.id));
        if (it == merges.end() || it->second.second != m.id) continue; // stale: a neighbour merged since
        left.id = m.id;
        right.alive = false;
        left.next = right.next;
        if (left.next >= 0) sym[size_t(left.next)].prev = m.pos;
        push(left.prev);
        push(m.pos);
    }
    for (const Symbol &s : sym)
        if (s.alive) out.push_back(s.id);
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text) const {
    const Impl &t = *impl_;
    std::vector<int32_t> out;
    for (const Impl::Segment &seg : t.split_added(text, t.raw_trie)) {
        if (seg.added >= 0) {
            out.push_back(t.added[size_t(seg.added)].id);
            continue;
        }
        const std::string normalized = t.normalize(text.substr(seg.begin, seg.end - seg.begin));
        for (const Impl::Segment &sub : t.split_added(normalized, t.normalized_trie)) {
            if (sub.added >= 0) {
                out.push_back(t.added[size_t(sub.added)].id);
                continue;
            }
            const bool at_start = seg.begin == 0 && sub.begin == 0;
            for (const std::string &word : t.pre_tokenize(normalized.substr(sub.begin, sub.end - sub.begin), at_start))
                t.bpe(word, out);
        }
    }
    return out;
}

namespace hf_tokenizer_detail {

// "<0xNN>" → NN, −1 for any other piece.
int byte_of(std::string_view p) {
    if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
    const int hi = hex_digit(uint8_t(p[3])), lo = hex_digit(uint8_t(p[4]));
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// Runs of byte pieces become their text when it is valid UTF-8, else one U+FFFD per byte (tokenizers' ByteFallback).
std::vector<std::string> byte_fallback(std::vector<std::string> tokens) {
    std::vector<std::string> out;
    std::string bytes;
    size_t nbytes = 0;
    auto flush = [&] {
        if (nbytes == 0) return;
        if (is_utf8(bytes)) out.push_back(bytes);
        else out.insert(out.end(), nbytes, "\xef\xbf\xbd");
        bytes.clear(), nbytes = 0;
    };
    for (std::string &tok : tokens) {
        if (const int b = byte_of(tok); b >= 0) {
            bytes += char(b), ++nbytes;
            continue;
        }
        flush();
        out.push_back(std::move(tok));
    }
    flush();
    return out;
}

// The bytes a byte-level token spells; a token with a character that stands for no byte (an added token's text)
// is its own text, as tokenizers' ByteLevel decoder has it.
std::string byte_level_bytes(std::string_view tok) {
    const ByteLevelMap &map = byte_level_map();
    std::string out;
    for (size_t i = 0; i < tok.size();) {
        const uint32_t c = code_point(tok, i);
        i += char_len(tok, i);
        if (c >= map.bytes.size() || map.bytes[c] < 0) return std::string(tok);
        out += char(map.bytes[c]);
    }
    return out;
}

} // namespace hf_tokenizer_detail

std::string HfTokenizer::decode(const std::vector<int32_t> &ids, std::span<const int32_t> shown) const {
    using namespace hf_tokenizer_detail;
    const Impl &t = *impl_;
    std::vector<std::string> tokens;
    for (const int32_t id : ids)
        if (!is_control(id) || std::binary_search(shown.begin(), shown.end(), id))
            tokens.push_back(pieces_[size_t(id)]);
    if (!t.has_decoder) { // tokenizers joins the pieces with spaces
        std::string out;
        for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
        return out;
    }
    for (const Impl::DecodeOp &op : t.decoder) {
        switch (op.kind) {
        case Impl::DecodeOp::Replace:
            for (std::string &s : tokens) s = replace_matches(s, op.a, op.regex.get(), op.b);
            break;
        case Impl::DecodeOp::ByteFallback:
            tokens = byte_fallback(std::move(tokens));
            break;
        case Impl::DecodeOp::Fuse: {
            std::string all;
            for (const std::string &s : tokens) all += s;
            tokens.assign(1, std::move(all));
            break;
        }
        case Impl::DecodeOp::Strip:
            for (std::string &s : tokens) {
                size_t b = 0, e = s.size();
                for (size_t k = 0; k < op.start && s.compare(b, op.a.size(), op.a) == 0; ++k) b += op.a.size();
                for (size_t k = 0; k < op.stop && e >= b + op.a.size() &&
                                   s.compare(e - op.a.size(), op.a.size(), op.a) == 0;
                     ++k)
                    e -= op.a.size();
                s = s.substr(b, e - b);
            }
            break;
        case Impl::DecodeOp::ByteLevel: {
            std::string bytes;
            for (const std::string &tok : tokens) bytes += byte_level_bytes(tok);
            tokens.assign(1, utf8_lossy(bytes));
            break;
        }
        case Impl::DecodeOp::Metaspace:
            for (size_t i = 0; i < tokens.size(); ++i) {
                tokens[i] = replace_all(tokens[i], op.a, " ");
                if (i == 0 && op.prepend != Prepend::Never && !tokens[i].empty() && tokens[i][0] == ' ')
                    tokens[i].erase(0, 1);
            }
            break;
        }
    }
    std::string out;
    for (const std::string &s : tokens) out += s;
    return out;
}

std::string HfTokenizer::token_bytes(int32_t id, bool shown) const {
    using namespace hf_tokenizer_detail;
    if (is_control(id) && !shown) return {};
    std::string p = pieces_[size_t(id)];
    for (const Impl::DecodeOp &op : impl_->decoder) {
        if (op.kind == Impl::DecodeOp::ByteFallback)
            if (const int b = byte_of(p); b >= 0) return std::string(1, char(b));
        if (op.kind == Impl::DecodeOp::Replace) p = replace_matches(p, op.a, op.regex.get(), op.b);
        if (op.kind == Impl::DecodeOp::Metaspace) p = replace_all(p, op.a, " ");
        if (op.kind == Impl::DecodeOp::ByteLevel) p = byte_level_bytes(p);
    }
    return p;
}

bool HfTokenizer::byte_level() const {
    const Impl &t = *impl_;
    return std::any_of(t.pre_tokenizer.begin(), t.pre_tokenizer.end(),
                       [](const Impl::PreOp &op) { return op.kind == Impl::PreOp::ByteLevel; }) ||
           std::any_of(t.decoder.begin(), t.decoder.end(),
                       [](const Impl::DecodeOp &op) { return op.kind == Impl::DecodeOp::ByteLevel; });
}

bool HfTokenizer::is_control(int32_t id) const { return impl_->special[size_t(id)] || pieces_[size_t(id)].empty(); }

int32_t HfTokenizer::piece_id(std::string_view piece) const {
    if (const auto it = impl_->added_ids.find(piece); it != impl_->added_ids.end()) return it->second;
    if (const auto it = impl_->vocab.find(piece); it != impl_->vocab.end()) return it->second;
    return -1;
}

} // namespace zaya