#include "data/hf_tokenizer.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/utf8.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <queue>
#include <unordered_map>

namespace zaya {

namespace hf_tokenizer_detail {

using json = nlohmann::json;

struct StringHash {
    using is_transparent = void;
    // Not noexcept: libstdc++ then caches each key's hash, and chains compare hashes before strings.
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using IdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
    std::string out;
    size_t p = 0;
    for (size_t q; !from.empty() && (q = s.find(from, p)) != std::string_view::npos; p = q + from.size())
        out.append(s.substr(p, q - p)).append(to);
    return out.append(s.substr(p));
}

// The length of the character at s[i]: 1 for a byte that starts no valid character (BPE then byte-falls it back).
size_t char_len(std::string_view s, size_t i) {
    const size_t len = utf8_length(uint8_t(s[i]));
    if (len == 1 || i + len > s.size() || !is_utf8(s.substr(i, len))) return 1;
    return len;
}

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

// A letter, digit or '_' for single_word tokens; beyond ASCII every non-space character counts (an approximation of
// Unicode's alphanumeric classes, which zaya carries no tables for).
bool is_word_char(uint32_t c) {
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    return !is_space(c);
}

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
enum class Prepend { Always, First, Never };

// Cuts `s` at each occurrence of `delim`, keeping or attaching the delimiters as `b` says (tokenizers'
// SplitDelimiterBehavior); empty pieces are dropped.
std::vector<std::string> split_on(std::string_view s, std::string_view delim, SplitBehavior b) {
    std::vector<std::pair<std::string_view, bool>> parts; // (text, is a delimiter)
    size_t p = 0;
    for (size_t q; !delim.empty() && (q = s.find(delim, p)) != std::string_view::npos; p = q + delim.size()) {
        if (q > p) parts.emplace_back(s.substr(p, q - p), false);
        parts.emplace_back(s.substr(q, delim.size()), true);
    }
    if (p < s.size()) parts.emplace_back(s.substr(p), false);
    std::vector<std::string> out;
    switch (b) {
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
    return out;
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

namespace hf_tokenizer_detail {

using Impl = HfTokenizer::Impl;

[[noreturn]] void unsupported(const Impl &t, const std::string &field, const std::string &what) {
    fail("{}: {} {} is not supported: zaya reads tokenizer.json files of the SentencePiece BPE kind (Gemma3's, "
         "which ZAYA1 uses, and Llama 2's)",
         t.path, field, what);
}

const json &member(const Impl &t, const json &o, const char *key, const std::string &where) {
    if (!o.is_object() || !o.contains(key)) fail("{}: {} has no \"{}\"", t.path, where, key);
    return o[key];
}

std::string string_of(const Impl &t, const json &o, const char *key, const std::string &where) {
    const json &v = member(t, o, key, where);
    if (!v.is_string()) fail("{}: {}.{} must be a string", t.path, where, key);
    return v.get<std::string>();
}

bool flag(const Impl &t, const json &o, const char *key, const std::string &where, bool dflt) {
    if (!o.contains(key) || o[key].is_null()) return dflt;
    if (!o[key].is_boolean()) fail("{}: {}.{} must be true or false", t.path, where, key);
    return o[key].get<bool>();
}

std::string type_of(const Impl &t, const json &o, const std::string &where) { return string_of(t, o, "type", where); }

std::string pattern_of(const Impl &t, const json &o, const std::string &where) {
    const json &p = member(t, o, "pattern", where);
    if (p.is_object() && p.contains("String") && p["String"].is_string()) return p["String"].get<std::string>();
    if (p.is_object() && p.contains("Regex")) unsupported(t, where + ".pattern", "(a regular expression)");
    fail("{}: {}.pattern must be {{\"String\": ...}}", t.path, where);
}

Prepend prepend_of(const Impl &t, const json &o, const std::string &where) {
    if (o.contains("prepend_scheme")) {
        const std::string s = string_of(t, o, "prepend_scheme", where);
        if (s == "always") return Prepend::Always;
        if (s == "first") return Prepend::First;
        if (s == "never") return Prepend::Never;
        fail("{}: {}.prepend_scheme must be always, first or never, got '{}'", t.path, where, s);
    }
    return flag(t, o, "add_prefix_space", where, true) ? Prepend::Always : Prepend::Never; // older files
}

std::string metaspace_char(const Impl &t, const json &o, const std::string &where) {
    const std::string r = string_of(t, o, "replacement", where);
    if (r.empty() || char_len(r, 0) != r.size()) fail("{}: {}.replacement must be one character", t.path, where);
    return r;
}

template <class F> void each_step(const Impl &t, const json &j, const std::string &where, const char *list, F &&f) {
    if (j.is_null()) return;
    if (type_of(t, j, where) != "Sequence") return f(j, where);
    const json &steps = member(t, j, list, where);
    if (!steps.is_array()) fail("{}: {}.{} must be an array", t.path, where, list);
    for (size_t i = 0; i < steps.size(); ++i)
        each_step(t, steps[i], fmt::format("{}.{}[{}]", where, list, i), list, f);
}

void read_normalizer(Impl &t, const json &j) {
    each_step(t, j, "normalizer", "normalizers", [&](const json &n, const std::string &where) {
        const std::string type = type_of(t, n, where);
        if (type == "Replace")
            t.normalizer.push_back({false, pattern_of(t, n, where), string_of(t, n, "content", where)});
        else if (type == "Prepend") t.normalizer.push_back({true, string_of(t, n, "prepend", where), {}});
        else unsupported(t, where + ".type", "'" + type + "'");
    });
}

void read_pre_tokenizer(Impl &t, const json &j) {
    each_step(t, j, "pre_tokenizer", "pretokenizers", [&](const json &p, const std::string &where) {
        const std::string type = type_of(t, p, where);
        if (type == "Metaspace") {
            t.pre_tokenizer.push_back({true, metaspace_char(t, p, where), SplitBehavior::MergedWithNext,
                                       prepend_of(t, p, where), flag(t, p, "split", where, true)});
        } else if (type == "Split") {
            static const std::pair<const char *, SplitBehavior> kinds[] = {
                {"Removed", SplitBehavior::Removed},
                {"Isolated", SplitBehavior::Isolated},
                {"MergedWithPrevious", SplitBehavior::MergedWithPrevious},
                {"MergedWithNext", SplitBehavior::MergedWithNext},
                {"Contiguous", SplitBehavior::Contiguous}};
            const std::string b = string_of(t, p, "behavior", where);
            const auto k =
                std::find_if(std::begin(kinds), std::end(kinds), [&](const auto &x) { return b == x.first; });
            if (k == std::end(kinds)) fail("{}: {}.behavior '{}' is not a split behaviour", t.path, where, b);
            if (flag(t, p, "invert", where, false)) unsupported(t, where + ".invert", "true");
            t.pre_tokenizer.push_back({false, pattern_of(t, p, where), k->second, Prepend::Never, true});
        } else {
            unsupported(t, where + ".type", "'" + type + "'");
        }
    });
}

void read_decoder(Impl &t, const json &j) {
    t.has_decoder = !j.is_null();
    each_step(t, j, "decoder", "decoders", [&](const json &d, const std::string &where) {
        const std::string type = type_of(t, d, where);
        Impl::DecodeOp op{};
        if (type == "Replace") {
            op = {Impl::DecodeOp::Replace, pattern_of(t, d, where), string_of(t, d, "content", where)};
        } else if (type == "ByteFallback") {
            op.kind = Impl::DecodeOp::ByteFallback;
        } else if (type == "Fuse") {
            op.kind = Impl::DecodeOp::Fuse;
        } else if (type == "Strip") {
            op.kind = Impl::DecodeOp::Strip;
            op.a = string_of(t, d, "content", where);
            if (op.a.empty() || char_len(op.a, 0) != op.a.size())
                fail("{}: {}.content must be one character", t.path, where);
            for (const char *k : {"start", "stop"})
                if (!member(t, d, k, where).is_number_unsigned()) fail("{}: {}.{} must be a count", t.path, where, k);
            op.start = d["start"].get<size_t>(), op.stop = d["stop"].get<size_t>();
        } else if (type == "Metaspace") {
            op.kind = Impl::DecodeOp::Metaspace;
            op.a = metaspace_char(t, d, where);
            op.prepend = prepend_of(t, d, where);
        } else {
            unsupported(t, where + ".type", "'" + type + "'");
        }
        t.decoder.push_back(std::move(op));
    });
}

// `where` names the field in the error (a callable: building the name for each of 262,144 pieces costs time).
template <class Where> int32_t read_id(const Impl &t, const json &v, Where &&where) {
    constexpr int64_t kMaxId = int64_t(1) << 26;
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= kMaxId)
        fail("{}: {} must be a token id in [0, {}), got {}", t.path, where(), kMaxId, v.dump());
    return int32_t(v.get<int64_t>());
}

void read_model(Impl &t, const json &m) {
    if (!m.is_object()) fail("{}: no \"model\" object", t.path);
    const std::string type = m.contains("type") ? type_of(t, m, "model") : "BPE";
    if (type != "BPE") unsupported(t, "model.type", "'" + type + "'");
    if (m.contains("dropout") && !m["dropout"].is_null() && !(m["dropout"].is_number() && m["dropout"] == 0))
        unsupported(t, "model.dropout", m["dropout"].dump());
    for (const char *k : {"continuing_subword_prefix", "end_of_word_suffix"})
        if (m.contains(k) && !m[k].is_null() && m[k] != "") unsupported(t, std::string("model.") + k, m[k].dump());
    t.fuse_unk = flag(t, m, "fuse_unk", "model", false);
    t.byte_fallback = flag(t, m, "byte_fallback", "model", false);
    t.ignore_merges = flag(t, m, "ignore_merges", "model", false);

    const json &vocab = member(t, m, "vocab", "model");
    if (!vocab.is_object()) fail("{}: model.vocab must be an object of piece → id", t.path);
    t.vocab.reserve(vocab.size());
    for (const auto &item : vocab.items())
        t.vocab.emplace(item.key(), read_id(t, item.value(), [&] { return "model.vocab[\"" + item.key() + "\"]"; }));
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
        const std::string u = string_of(t, m, "unk_token", "model");
        const auto it = t.vocab.find(u);
        if (it == t.vocab.end()) fail("{}: model.unk_token '{}' is not in model.vocab", t.path, u);
        t.unk = it->second;
    }
    t.byte_ids.assign(256, -1);
    for (int b = 0; b < 256; ++b)
        if (const auto it = t.vocab.find(fmt::format("<0x{:02X}>", b)); it != t.vocab.end())
            t.byte_ids[size_t(b)] = it->second;

    const json &merges = member(t, m, "merges", "model");
    if (!merges.is_array()) fail("{}: model.merges must be an array", t.path);
    t.merges.reserve(merges.size());
    std::string ab;
    for (size_t r = 0; r < merges.size(); ++r) {
        const json &mg = merges[r];
        std::string_view a, b;
        if (mg.is_string()) { // "a b" (older files)
            const std::string &s = mg.get_ref<const std::string &>();
            const size_t sp = s.find(' ');
            if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
                fail("{}: model.merges[{}] '{}' is not two pieces separated by one space", t.path, r, s);
            a = std::string_view(s).substr(0, sp), b = std::string_view(s).substr(sp + 1);
        } else if (mg.is_array() && mg.size() == 2 && mg[0].is_string() && mg[1].is_string()) {
            a = mg[0].get_ref<const std::string &>(), b = mg[1].get_ref<const std::string &>();
        } else {
            fail("{}: model.merges[{}] must be \"a b\" or [\"a\", \"b\"], got {}", t.path, r, mg.dump());
        }
        ab.assign(a).append(b);
        const auto ia = t.vocab.find(a), ib = t.vocab.find(b), iab = t.vocab.find(ab);
        if (ia == t.vocab.end() || ib == t.vocab.end() || iab == t.vocab.end())
            fail("{}: model.merges[{}] ('{}', '{}'): '{}' is not in model.vocab", t.path, r, a, b,
                 ia == t.vocab.end() ? a : ib == t.vocab.end() ? b : std::string_view(ab));
        t.merges.emplace(uint64_t(uint32_t(ia->second)) << 32 | uint32_t(ib->second),
                         std::pair<int32_t, int32_t>{int32_t(r), iab->second});
    }
}

void read_added(Impl &t, const json &list) {
    if (list.is_null()) return;
    if (!list.is_array()) fail("{}: added_tokens must be an array", t.path);
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string where = fmt::format("added_tokens[{}]", i);
        const json &a = list[i];
        Impl::Added tok{read_id(t, member(t, a, "id", where), [&] { return where + ".id"; }),
                        string_of(t, a, "content", where),
                        flag(t, a, "single_word", where, false), flag(t, a, "lstrip", where, false),
                        flag(t, a, "rstrip", where, false),      flag(t, a, "normalized", where, false),
                        flag(t, a, "special", where, false)};
        if (tok.content.empty()) fail("{}: {}.content is empty", t.path, where);
        t.added_ids[tok.content] = tok.id;
        t.added.push_back(std::move(tok));
    }
}

} // namespace hf_tokenizer_detail

bool HfTokenizer::looks_like_json(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    char c;
    while (in.get(c))
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c == '{';
    return false;
}

HfTokenizer::~HfTokenizer() = default;

std::shared_ptr<const HfTokenizer> HfTokenizer::load(const std::string &path) {
    using namespace hf_tokenizer_detail;
    auto impl = std::make_unique<Impl>();
    Impl &t = *impl;
    t.path = path;
    json j;
    try {
        j = json::parse(read_file_bytes(path));
    } catch (const json::exception &e) {
        fail("{}: not valid JSON: {}", path, e.what());
    }
    if (!j.is_object()) fail("{}: not a tokenizer.json (the top level is no object)", path);
    read_model(t, j.contains("model") ? j["model"] : json());
    read_added(t, j.contains("added_tokens") ? j["added_tokens"] : json());
    read_normalizer(t, j.contains("normalizer") ? j["normalizer"] : json());
    read_pre_tokenizer(t, j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json());
    read_decoder(t, j.contains("decoder") ? j["decoder"] : json());

    std::shared_ptr<HfTokenizer> tok(new HfTokenizer());
    int32_t n = 0;
    for (const auto &[p, id] : t.vocab) n = std::max(n, id + 1);
    for (const auto &a : t.added) n = std::max(n, a.id + 1);
    tok->pieces_.resize(size_t(n));
    t.special.assign(size_t(n), 0);
    for (const auto &[p, id] : t.vocab) tok->pieces_[size_t(id)] = p;
    for (size_t i = 0; i < t.added.size(); ++i) {
        const Impl::Added &a = t.added[i];
        tok->pieces_[size_t(a.id)] = a.content; // an added token's text wins over the model's piece, as in tokenizers
        t.special[size_t(a.id)] = a.special;
        if (a.normalized) t.normalized_trie.insert(t.normalize(a.content), int32_t(i));
        else t.raw_trie.insert(a.content, int32_t(i));
    }
    tok->impl_ = std::move(impl);
    auto first_of = [&](std::initializer_list<std::string_view> names) {
        for (const std::string_view name : names)
            if (const int32_t id = tok->piece_id(name); id >= 0) return id;
        return int32_t(-1);
    };
    tok->bos_ = first_of({"<bos>", "<s>", "<|begin_of_text|>"});
    tok->eos_ = first_of({"<eos>", "</s>", "<|end_of_text|>"});
    tok->pad_ = first_of({"<pad>"});
    tok->unk_ = tok->impl_->unk >= 0 ? tok->impl_->unk : first_of({"<unk>"});
    return tok;
}

std::string HfTokenizer::Impl::normalize(std::string_view s) const {
    std::string out(s);
    using namespace hf_tokenizer_detail;
    for (const TextOp &op : normalizer)
        if (op.prepend) out = out.empty() ? out : op.a + out; // tokenizers prepends to non-empty text only
        else out = replace_all(out, op.a, op.b);
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
            if (op.metaspace) {
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
            for (std::string &q : split_on(p, op.pattern, op.behavior)) next.push_back(std::move(q));
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
    int v = 0;
    for (const char c : p.substr(3, 2)) {
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
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

} // namespace hf_tokenizer_detail

std::string HfTokenizer::decode(const std::vector<int32_t> &ids) const {
    using namespace hf_tokenizer_detail;
    const Impl &t = *impl_;
    std::vector<std::string> tokens;
    for (const int32_t id : ids)
        if (!is_control(id)) tokens.push_back(pieces_[size_t(id)]);
    if (!t.has_decoder) { // tokenizers joins the pieces with spaces
        std::string out;
        for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
        return out;
    }
    for (const Impl::DecodeOp &op : t.decoder) {
        switch (op.kind) {
        case Impl::DecodeOp::Replace:
            for (std::string &s : tokens) s = replace_all(s, op.a, op.b);
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

std::string HfTokenizer::token_bytes(int32_t id) const {
    using namespace hf_tokenizer_detail;
    if (is_control(id)) return {};
    std::string p = pieces_[size_t(id)];
    for (const Impl::DecodeOp &op : impl_->decoder) {
        if (op.kind == Impl::DecodeOp::ByteFallback)
            if (const int b = byte_of(p); b >= 0) return std::string(1, char(b));
        if (op.kind == Impl::DecodeOp::Replace) p = replace_all(p, op.a, op.b);
        if (op.kind == Impl::DecodeOp::Metaspace) p = replace_all(p, op.a, " ");
    }
    return p;
}

bool HfTokenizer::is_control(int32_t id) const { return impl_->special[size_t(id)] || pieces_[size_t(id)].empty(); }

int32_t HfTokenizer::piece_id(std::string_view piece) const {
    if (const auto it = impl_->added_ids.find(piece); it != impl_->added_ids.end()) return it->second;
    if (const auto it = impl_->vocab.find(piece); it != impl_->vocab.end()) return it->second;
    return -1;
}

} // namespace zaya
