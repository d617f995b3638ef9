#include "infer/json_constraint.h"

#include "core/error.h"
#include "core/utf8.h"
#include "data/tokenizer.h"
#include "infer/regex.h"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <limits>

namespace zaya {

namespace {

// How many characters bytes hold if they are whole, valid UTF-8 characters with nothing a JSON string must escape
// (a string's lexer takes each and, after each ASCII byte, is still in plain text: no escape begun), else 0.
uint16_t plain_string_chars(std::string_view s) {
    StringLexer lexer;
    for (char c : s)
        if (lexer.feed(uint8_t(c)) != Lexed::Taken || (uint8_t(c) < 0x80 && !lexer.plain())) return 0;
    return lexer.plain() ? uint16_t(std::min<int64_t>(utf8_characters(s), 65535)) : 0;
}

} // namespace

TokenTable::TokenTable(const Tokenizer &tok, int64_t vocab_size) {
    bytes_.resize(size_t(vocab_size));
    const int32_t unk = tok.unk_id(), known = std::min<int32_t>(tok.vocab_size(), int32_t(vocab_size));
    for (int32_t id = 0; id < known; ++id)
        if (id != unk && !tok.is_control(id)) bytes_[size_t(id)] = tok.token_bytes(id);
    index();
}

TokenTable::TokenTable(std::vector<std::string> bytes) : bytes_(std::move(bytes)) { index(); }

void TokenTable::index() {
    plain_.assign(bytes_.size(), 0);
    plain_chars_.assign(bytes_.size(), 0);
    for (size_t id = 0; id < bytes_.size(); ++id) {
        const std::string &b = bytes_[id];
        if (b.empty()) continue;
        plain_chars_[id] = plain_string_chars(b);
        plain_[id] = plain_chars_[id] != 0 && plain_chars_[id] < 65535; // (longer ones are read)
        plain_count_ += plain_[id];
        by_first_[uint8_t(b[0])].push_back(int32_t(id));
        if (!plain_[id]) not_plain_[uint8_t(b[0])].push_back(int32_t(id));
    }
    for (int b = 0; b < 256; ++b) {
        std::vector<int32_t> &ids = sorted_[size_t(b)];
        ids = by_first_[size_t(b)];
        std::stable_sort(ids.begin(), ids.end(),
                         [&](int32_t x, int32_t y) { return bytes_[size_t(x)] < bytes_[size_t(y)]; });
        std::vector<uint16_t> &shared = shared_[size_t(b)];
        shared.assign(ids.size(), 0);
        for (size_t k = 1; k < ids.size(); ++k) {
            const std::string &x = bytes_[size_t(ids[k - 1])], &y = bytes_[size_t(ids[k])];
            size_t n = 0;
            while (n < x.size() && n < y.size() && n < 65535 && x[n] == y[n]) ++n;
            shared[k] = uint16_t(n);
        }
    }
}

namespace {

// Whether bytes can follow g's state: inside a string, read by a copy of its lexer (each reading's) until they close
// it (then by a copy of the whole state), else by a copy of the state.
bool continues(const SchemaGrammar &g, std::string_view bytes) {
    bool whole = false; // some reading must be asked with the whole state
    for (size_t r = 0; r < g.readings() && !whole; ++r) {
        const StringLexer *s = g.string_lexer(r);
        if (!s) {
            whole = true;
            break;
        }
        StringLexer lexer = *s;
        size_t i = 0;
        for (; i < bytes.size(); ++i) {
            const Lexed l = lexer.feed(uint8_t(bytes[i]));
            if (l == Lexed::Refused) break;
            if (l == Lexed::Closed) {
                whole = true;
                break;
            }
        }
        if (i == bytes.size()) return true; // still inside the string
    }
    if (!whole) return false; // every reading's lexer refused them
    SchemaGrammar copy = g;
    return copy.feed(bytes);
}

} // namespace

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const JsonSchema> schema,
                               std::string trigger, bool trigger_in_text, std::optional<ContentGate> gate)
    : table_(std::move(table)), grammar_(schema), trigger_(std::move(trigger)), gate_(std::move(gate)),
      after_trigger_(std::move(schema)) {
    if (trigger_.empty() && gate_) { // held from the content's start: the JSON after a block's close, if one opens
        trigger_ = gate_->tags().close;
        trigger_in_text = false;
        if (!gate_->starts_in_reasoning() && !gate_->tags().open.empty()) opening_ = gate_;
        gate_.reset();
        if (trigger_.empty()) fail("JSON mode: a reasoning block needs its closing tag");
    }
    if (trigger_.empty()) return;
    if (trigger_in_text && !after_trigger_.feed(trigger_))
        fail("JSON mode: the trigger '{}' does not begin the schema's texts", trigger_);
    state_ = opening_ ? State::Opening : State::Watching;
    for (int32_t id = 0; id < int32_t(table_->size()); ++id)
        if (table_->bytes(id).size() >= trigger_.size() && table_->bytes(id).find(trigger_) != std::string::npos)
            whole_.push_back(id);
}

std::optional<std::string> JsonConstraint::watch(std::string_view bytes, std::optional<ContentGate> &gate,
                                                 size_t &matched) const {
    std::string content;
    for (size_t i = 0; i < bytes.size(); ++i) {
        if (!gate) {
            if (trigger_step(trigger_, matched, uint8_t(bytes[i]))) return std::string(bytes.substr(i + 1));
            continue;
        }
        content.clear();
        gate->feed(uint8_t(bytes[i]), content); // (the content's first bytes may have been held before this one)
        if (gate->in_content()) gate.reset();
        for (size_t k = 0; k < content.size(); ++k)
            if (trigger_step(trigger_, matched, uint8_t(content[k])))
                return content.substr(k + 1) + std::string(bytes.substr(i + 1));
    }
    return std::nullopt;
}

// Watching, a token is allowed unless it completes the trigger with bytes the schema does not take. One that does
// holds the trigger whole, or begins with the rest of a prefix of it that the content ends with (the part matched,
// or a shorter prefix that is also its suffix; before the content is decided, of the bytes the gate holds, should
// they be the content's): only those tokens are read.
int64_t JsonConstraint::mask_watching(float *logits) {
    std::vector<int32_t> refused;
    auto read = [&](int32_t id) {
        const std::string_view bytes = table_->bytes(id);
        std::optional<ContentGate> gate = gate_;
        size_t matched = matched_;
        const std::optional<std::string> rest = watch(bytes, gate, matched);
        if (!rest) return;
        SchemaGrammar g = after_trigger_;
        if (!g.feed(*rest)) refused.push_back(id);
    };
    for (int32_t id : whole_) read(id);
    size_t part = matched_;
    if (gate_)
        for (char c : gate_->held())
            if (trigger_step(trigger_, part, uint8_t(c))) part = 0; // (held whole: those tokens are whole_)
    std::bitset<256> first; // the bytes that begin the rest of each such prefix
    const std::string_view t = trigger_;
    for (size_t j = part; j > 0; --j)
        if (t.substr(0, j) == t.substr(part - j, j)) first.set(uint8_t(t[j]));
    for (int b = 0; b < 256; ++b)
        if (first[size_t(b)])
            for (int32_t id : table_->starting_with(uint8_t(b))) read(id);
    std::sort(refused.begin(), refused.end()); // (a token that holds the trigger whole may have been read twice)
    refused.erase(std::unique(refused.begin(), refused.end()), refused.end());
    for (int32_t id : refused) logits[id] = -std::numeric_limits<float>::infinity();
    return table_->size() - int64_t(refused.size());
}

JsonConstraint::Start JsonConstraint::read_opening(std::string_view bytes, ContentGate &opening, size_t &at) {
    std::string content; // (unread: where the answer is the JSON, the caller feeds the grammar what was held)
    for (at = 0; at < bytes.size(); ++at) {
        opening.feed(uint8_t(bytes[at]), content);
        if (opening.in_content()) return Start::Json;
        if (!opening.deciding()) {
            ++at;
            return Start::Block;
        }
    }
    return Start::Undecided;
}

// At the answer's start: the tokens that would make it the JSON (what is held, then the token) as the schema takes
// them, and those that keep it undecided or open the block (whose rest, if it closes the block, the schema takes
// from the byte after the close). Only tokens that begin with whitespace or the tag's next byte can do the latter.
int64_t JsonConstraint::mask_opening(float *logits) {
    std::vector<std::pair<int32_t, float>> kept; // (token, logit) of the tokens that keep the start or open a block
    std::vector<int32_t> ruled;                  // those that open a block and close it with bytes refused
    for (int b = 0; b < 256; ++b) {
        if (!opening_->keeps_deciding(uint8_t(b))) continue;
        for (int32_t id : table_->starting_with(uint8_t(b))) {
            const std::string_view bytes = table_->bytes(id);
            ContentGate opening = *opening_;
            size_t at = 0;
            const Start start = read_opening(bytes, opening, at);
            if (start == Start::Json) continue; // (the JSON's mask decides it)
            bool takes = true;
            if (start == Start::Block) { // the rest read as while watching (no gate: the block is open)
                std::optional<ContentGate> no_gate;
                size_t matched = 0;
                if (const std::optional<std::string> after = watch(bytes.substr(at), no_gate, matched)) {
                    SchemaGrammar g = after_trigger_;
                    takes = g.feed(*after);
                }
            }
            if (takes) kept.emplace_back(id, logits[id]);
            else ruled.push_back(id);
        }
    }
    int64_t n = 0;
    SchemaGrammar json = grammar_;
    if (json.feed(opening_->held())) { // the JSON may begin here (after the whitespace held, if the schema takes it)
        std::swap(grammar_, json);
        n = mask_held(logits);
        std::swap(grammar_, json);
    } else {
        std::fill(logits, logits + table_->size(), -std::numeric_limits<float>::infinity());
    }
    for (const auto &[id, logit] : kept) {
        n += std::isinf(logits[id]) ? 1 : 0;
        logits[id] = logit;
    }
    for (int32_t id : ruled)
        if (!std::isinf(logits[id])) logits[id] = -std::numeric_limits<float>::infinity(), --n;
    return n;
}

int64_t JsonConstraint::mask(float *logits) {
    if (state_ == State::Watching) return mask_watching(logits);
    if (state_ == State::Opening) return mask_opening(logits);
    return mask_held(logits);
}

int64_t JsonConstraint::mask_held(float *logits) {
    const int64_t V = table_->size();
    const bool in_string = grammar_.in_plain_string(); // (every reading)
    const StringLexer *lexer = grammar_.readings() == 1 ? grammar_.string_lexer() : nullptr;
    // A string's maxLength near: plain tokens fit if they have no more characters than it has room for (in some
    // reading).
    uint32_t room = 0;
    for (size_t r = 0; in_string && r < grammar_.readings(); ++r)
        room = std::max(room, grammar_.string_lexer(r)->room());
    const bool bounded = in_string && room < 65535;
    // In a patterned string, between characters: plain tokens that loop on the pattern's state.
    const Regex *pattern = lexer && lexer->matches() && lexer->plain() ? lexer->pattern() : nullptr;
    if (pattern && !pattern->small_alphabet()) pattern = nullptr;
    const std::vector<uint64_t> *classes = pattern ? &classes_of_tokens(*pattern) : nullptr;
    const int32_t state = pattern ? lexer->pattern_state() : 0;
    const uint64_t others = pattern ? ~pattern->loops(state) : 0;
    // Inside a string without a pattern, every plain token whose first byte is taken is taken if it fits the room
    // left: all of them at once (taken back for a first byte refused), and only the others read.
    const bool all_plain = in_string && !classes;
    int64_t n = 0;
    if (all_plain && !bounded) {
        allowed_ = table_->plain_flags();
        n = table_->plain_count();
    } else if (all_plain) {
        allowed_.resize(size_t(V));
        const std::vector<uint8_t> &plain = table_->plain_flags();
        const std::vector<uint16_t> &chars = table_->all_plain_chars();
        for (size_t id = 0; id < size_t(V); ++id) {
            allowed_[id] = uint8_t(plain[id] & (chars[id] <= room));
            n += allowed_[id];
        }
    } else {
        allowed_.assign(size_t(V), 0);
    }
    for (int b = 0; b < 256; ++b) {
        SchemaGrammar first = grammar_;
        if (!first.feed(uint8_t(b))) {
            if (all_plain)
                for (int32_t id : table_->starting_with(uint8_t(b)))
                    if (allowed_[size_t(id)]) allowed_[size_t(id)] = 0, --n;
            continue;
        }
        if (!first.string_lexer()) { // (a byte that ends the string begins no plain token)
            n += walk_sorted(uint8_t(b), std::move(first));
            continue;
        }
        // Inside a string its lexer reads the tokens cheaply (plain text without reading them at all).
        const std::vector<int32_t> &ids =
            all_plain ? table_->not_plain_starting_with(uint8_t(b)) : table_->starting_with(uint8_t(b));
        for (int32_t id : ids) {
            bool ok = in_string && table_->plain(id);
            if (ok && bounded && table_->plain_chars(id) > room) continue; // plain text cannot close the string
            if (classes && (*classes)[size_t(id)] != 0 && ((*classes)[size_t(id)] & others) == 0) {
                // It stays in the pattern's state: allowed if a string of the pattern can still end within the
                // lengths after its characters (then after each of them too).
                if (!pattern->viable(state, lexer->chars() + table_->plain_chars(id))) continue;
                ok = true;
            }
            const std::string_view bytes = ok ? std::string_view() : table_->bytes(id); // only when needed: 8 MB
            if (!ok) ok = bytes.size() == 1 || continues(first, bytes.substr(1));
            if (ok) allowed_[size_t(id)] = 1, ++n;
        }
    }
    for (int64_t id = 0; id < V; ++id)
        if (!allowed_[size_t(id)]) logits[id] = -std::numeric_limits<float>::infinity();
    return n;
}

// The tokens that begin with byte b, which `first` (the state after it, outside a string) took: in the order of
// their bytes, each read from the state after the prefix it shares with the token before (states_[d]: after d + 1
// bytes), so a prefix is fed once for all the tokens that share it; the tokens that share a refused prefix are
// refused unread. Where the state is inside a string, the rest is read by continues() (its lexer: cheap) and the
// walk goes no deeper. Marks the allowed ones in allowed_; returns how many.
int64_t JsonConstraint::walk_sorted(uint8_t b, SchemaGrammar first) {
    const std::vector<int32_t> &ids = table_->sorted(b);
    const std::vector<uint16_t> &shared = table_->shared(b);
    if (states_.empty()) states_.push_back(first);
    else states_[0] = std::move(first);
    int64_t n = 0;
    size_t valid = 1;                 // states_[0 .. valid) hold the current token's first `valid` bytes fed
    size_t refused = SIZE_MAX;        // the byte of the token before that was refused, if one was
    for (size_t k = 0; k < ids.size(); ++k) {
        if (k > 0) {
            if (refused != SIZE_MAX && shared[k] > refused) continue; // the same refused prefix: not even read
            refused = SIZE_MAX;
            valid = std::min<size_t>(valid, shared[k]);
        }
        const std::string_view bytes = table_->bytes(ids[k]);
        bool ok = true;
        for (size_t d = valid; d < bytes.size(); ++d) {
            const SchemaGrammar &before = states_[d - 1];
            if (before.string_lexer()) { // in a string: its lexer reads the rest
                ok = continues(before, bytes.substr(d));
                break;
            }
            SchemaGrammar next = before;
            if (!next.feed(uint8_t(bytes[d]))) {
                ok = false;
                refused = d;
                break;
            }
            if (states_.size() <= d) states_.push_back(std::move(next));
            else states_[d] = std::move(next);
            valid = d + 1;
        }
        if (ok) allowed_[size_t(ids[k])] = 1, ++n;
    }
    return n;
}

const std::vector<uint64_t> &JsonConstraint::classes_of_tokens(const Regex &pattern) {
    for (auto &[p, classes] : token_classes_)
        if (p == &pattern) return classes;
    if (token_classes_.size() == 4) token_classes_.erase(token_classes_.begin()); // the oldest
    token_classes_.emplace_back(&pattern, std::vector<uint64_t>());
    std::vector<uint64_t> &classes = token_classes_.back().second;
    classes.assign(size_t(table_->size()), 0);
    for (int32_t id = 0; id < int32_t(table_->size()); ++id) {
        if (!table_->plain(id)) continue;
        const std::string_view b = table_->bytes(id);
        uint64_t bits = 0;
        for (size_t i = 0; i < b.size();) bits |= pattern.class_bit(utf8_next(b, i)); // plain: valid UTF-8
        classes[size_t(id)] = bits;
    }
    return classes;
}

void JsonConstraint::advance(int32_t token) {
    if (token < 0 || token >= table_->size()) fail("JSON mode: token {} is outside the vocabulary", token);
    const std::string_view bytes = table_->bytes(token);
    if (state_ == State::Opening) {
        ContentGate opening = *opening_;
        size_t at = 0;
        const Start start = read_opening(bytes, opening, at);
        if (start == Start::Undecided) {
            opening_ = std::move(opening);
            return;
        }
        if (start == Start::Block) { // free to the close, the JSON after it
            state_ = State::Watching;
            opening_.reset();
            advance_watching(bytes.substr(at), token);
            return;
        }
        SchemaGrammar g = grammar_;
        if (!g.feed(opening_->held()) || !g.feed(bytes))
            fail("JSON mode: token {} does not begin the JSON text", token);
        grammar_ = std::move(g);
        state_ = State::Held;
        opening_.reset();
        return;
    }
    if (state_ == State::Watching) return advance_watching(bytes, token);
    SchemaGrammar g = grammar_;
    if (bytes.empty() || !g.feed(bytes)) fail("JSON mode: token {} does not continue the JSON text", token);
    grammar_ = std::move(g);
}

void JsonConstraint::advance_watching(std::string_view bytes, int32_t token) {
    {
        std::optional<ContentGate> gate = gate_;
        size_t matched = matched_;
        const std::optional<std::string> rest = watch(bytes, gate, matched);
        if (!rest) {
            gate_ = std::move(gate);
            matched_ = matched;
            return;
        }
        SchemaGrammar g = after_trigger_;
        if (!g.feed(*rest)) fail("JSON mode: token {} does not continue the JSON text", token);
        grammar_ = std::move(g);
        state_ = State::Held;
    }
}

} // namespace zaya
