// Reading a tokenizer.json into HfTokenizer (data/hf_tokenizer.h): every field checked, anything of another kind
// refused naming it.
#include "data/hf_tokenizer.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/hf_tokenizer_impl.h"

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include <algorithm>
#include <fstream>

namespace zaya {

namespace hf_tokenizer_detail {

using json = nlohmann::json;
using Impl = HfTokenizer::Impl;

[[noreturn]] void unsupported(const Impl &t, const std::string &field, const std::string &what) {
    fail("{}: {} {} is not supported: zaya reads BPE tokenizer.json files, of the SentencePiece kind (Gemma3's, which "
         "ZAYA1 uses, and Llama 2's) or byte-level (GPT-2's, Llama 3's, Qwen2's)",
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

// A pattern: a string (returned), or a regular expression (compiled as tokenizers compiles it into `regex`).
std::string pattern_of(const Impl &t, const json &o, const std::string &where,
                       std::shared_ptr<const OnigRegex> &regex) {
    const json &p = member(t, o, "pattern", where);
    if (p.is_object() && p.contains("String") && p["String"].is_string()) return p["String"].get<std::string>();
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string()) {
        regex = std::make_shared<const OnigRegex>(p["Regex"].get<std::string>(), t.path + ": " + where + ".pattern.Regex");
        return {};
    }
    fail("{}: {}.pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", t.path, where);
}

// GPT-2's pattern, which the ByteLevel pre-tokenizer splits with when use_regex is true (its default).
const std::shared_ptr<const OnigRegex> &gpt2_regex() {
    static const auto re = std::make_shared<const OnigRegex>(
        R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", "GPT-2's pattern");
    return re;
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
        static const std::pair<const char *, int> forms[] = {
            {"NFC", UTF8PROC_STABLE | UTF8PROC_COMPOSE},
            {"NFD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE},
            {"NFKC", UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
            {"NFKD", UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT}};
        const auto form =
            std::find_if(std::begin(forms), std::end(forms), [&](const auto &f) { return type == f.first; });
        using Op = Impl::TextOp;
        Op op{};
        if (type == "Replace") {
            op.kind = Op::Replace;
            op.a = pattern_of(t, n, where, op.regex);
            op.b = string_of(t, n, "content", where);
        } else if (type == "Prepend") {
            op.kind = Op::Prepend;
            op.a = string_of(t, n, "prepend", where);
        } else if (form != std::end(forms)) {
            op.kind = Op::Unicode;
            op.utf8proc_options = form->second;
        } else {
            unsupported(t, where + ".type", "'" + type + "'");
        }
        t.normalizer.push_back(std::move(op));
    });
}

void read_pre_tokenizer(Impl &t, const json &j) {
    each_step(t, j, "pre_tokenizer", "pretokenizers", [&](const json &p, const std::string &where) {
        const std::string type = type_of(t, p, where);
        Impl::PreOp op{};
        if (type == "Metaspace") {
            op.kind = Impl::PreOp::Metaspace;
            op.pattern = metaspace_char(t, p, where);
            op.behavior = SplitBehavior::MergedWithNext;
            op.prepend = prepend_of(t, p, where);
            op.split = flag(t, p, "split", where, true);
        } else if (type == "ByteLevel") {
            op.kind = Impl::PreOp::ByteLevel;
            op.add_prefix_space = flag(t, p, "add_prefix_space", where, true);
            if (flag(t, p, "use_regex", where, true)) op.regex = gpt2_regex();
        } else if (type == "Digits") { // digits split off one by one, or as runs
            op.kind = Impl::PreOp::Split;
            op.regex = std::make_shared<const OnigRegex>(R"(\p{N})", "Digits"); // Rust's char::is_numeric
            op.behavior = flag(t, p, "individual_digits", where, false) ? SplitBehavior::Isolated
                                                                          : SplitBehavior::Contiguous;
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
            op.kind = Impl::PreOp::Split;
            op.pattern = pattern_of(t, p, where, op.regex);
            op.behavior = k->second;
            op.invert = flag(t, p, "invert", where, false);
        } else {
            unsupported(t, where + ".type", "'" + type + "'");
        }
        t.pre_tokenizer.push_back(std::move(op));
    });
}

void read_decoder(Impl &t, const json &j) {
    t.has_decoder = !j.is_null();
    each_step(t, j, "decoder", "decoders", [&](const json &d, const std::string &where) {
        const std::string type = type_of(t, d, where);
        Impl::DecodeOp op{};
        if (type == "Replace") {
            op.kind = Impl::DecodeOp::Replace;
            op.a = pattern_of(t, d, where, op.regex);
            op.b = string_of(t, d, "content", where);
        } else if (type == "ByteFallback") {
            op.kind = Impl::DecodeOp::ByteFallback;
        } else if (type == "ByteLevel") {
            op.kind = Impl::DecodeOp::ByteLevel;
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
    tok->eos_ = first_of({"<eos>", "</s>", "<|end_of_text|>", "<|endoftext|>"});
    tok->pad_ = first_of({"<pad>"});
    tok->unk_ = tok->impl_->unk >= 0 ? tok->impl_->unk : first_of({"<unk>"});
    return tok;
}

} // namespace zaya
