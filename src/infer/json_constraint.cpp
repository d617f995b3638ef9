#include "infer/json_constraint.h"

#include "core/error.h"
#include "core/utf8.h"
#include "data/tokenizer.h"
#include "infer/regex.h"

#include <algorithm>
#include <bitset>
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
        by_first_[uint8_t(b[0])].push_back(int32_t(id));
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
                               std::string trigger)
    : table_(std::move(table)), grammar_(schema), trigger_(std::move(trigger)), after_trigger_(std::move(schema)) {
    if (trigger_.empty()) return;
    if (!after_trigger_.feed(trigger_)) fail("JSON mode: the trigger '{}' does not begin the schema's texts", trigger_);
    state_ = State::Watching;
    for (int32_t id = 0; id < int32_t(table_->size()); ++id)
        if (table_->bytes(id).size() >= trigger_.size() && table_->bytes(id).find(trigger_) != std::string::npos)
            whole_.push_back(id);
}

size_t JsonConstraint::completes(std::string_view bytes) const {
    size_t matched = matched_;
    for (size_t i = 0; i < bytes.size(); ++i)
        if (trigger_step(trigger_, matched, uint8_t(bytes[i]))) return i + 1;
    return 0;
}

// Watching, a token is allowed unless it completes the trigger with bytes the schema does not take. One that does
// holds the trigger whole, or begins with the rest of a prefix of it that the text ends with (the part matched, or
// a shorter prefix that is also its suffix): only those tokens are read.
int64_t JsonConstraint::mask_watching(float *logits) {
    std::vector<int32_t> refused;
    auto read = [&](int32_t id) {
        const std::string_view bytes = table_->bytes(id);
        const size_t rest = completes(bytes);
        if (rest == 0) return;
        SchemaGrammar g = after_trigger_;
        if (!g.feed(bytes.substr(rest))) refused.push_back(id);
    };
    for (int32_t id : whole_) read(id);
    std::bitset<256> first; // the bytes that begin the rest of each such prefix
    const std::string_view t = trigger_;
    for (size_t j = matched_; j > 0; --j)
        if (t.substr(0, j) == t.substr(matched_ - j, j)) first.set(uint8_t(t[j]));
    for (int b = 0; b < 256; ++b)
        if (first[size_t(b)])
            for (int32_t id : table_->starting_with(uint8_t(b))) read(id);
    std::sort(refused.begin(), refused.end()); // (a token that holds the trigger whole may have been read twice)
    refused.erase(std::unique(refused.begin(), refused.end()), refused.end());
    for (int32_t id : refused) logits[id] = -std::numeric_limits<float>::infinity();
    return table_->size() - int64_t(refused.size());
}

int64_t JsonConstraint::mask(float *logits) {
    if (state_ == State::Watching) return mask_watching(logits);
    const int64_t V = table_->size();
    allowed_.assign(size_t(V), 0);
    int64_t n = 0;
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
    for (int b = 0; b < 256; ++b) {
        SchemaGrammar first = grammar_;
        if (!first.feed(uint8_t(b))) continue;
        // Outside strings the second byte rules most tokens out (after whitespace, the many " word" tokens): the
        // bytes that may follow b, tested once, spare reading those tokens. Inside one, its lexer reads them cheaply.
        std::bitset<256> second;
        bool second_known = first.string_lexer() != nullptr;
        if (second_known) second.set();
        for (int32_t id : table_->starting_with(uint8_t(b))) {
            bool ok = in_string && table_->plain(id);
            if (ok && bounded && table_->plain_chars(id) > room) continue; // plain text cannot close the string
            if (classes && (*classes)[size_t(id)] != 0 && ((*classes)[size_t(id)] & others) == 0) {
                // It stays in the pattern's state: allowed if a string of the pattern can still end within the
                // lengths after its characters (then after each of them too).
                if (!pattern->viable(state, lexer->chars() + table_->plain_chars(id))) continue;
                ok = true;
            }
            const std::string_view bytes = ok ? std::string_view() : table_->bytes(id); // only when needed: 8 MB
            if (!ok && bytes.size() == 1) ok = true;
            if (!ok) {
                if (!second_known) {
                    for (int c = 0; c < 256; ++c) second[size_t(c)] = SchemaGrammar(first).feed(uint8_t(c));
                    second_known = true;
                }
                ok = second[uint8_t(bytes[1])] && continues(first, bytes.substr(1));
            }
            if (ok) allowed_[size_t(id)] = 1, ++n;
        }
    }
    for (int64_t id = 0; id < V; ++id)
        if (!allowed_[size_t(id)]) logits[id] = -std::numeric_limits<float>::infinity();
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
    if (state_ == State::Watching) {
        const size_t rest = completes(bytes);
        if (rest == 0) {
            for (char c : bytes) trigger_step(trigger_, matched_, uint8_t(c));
            return;
        }
        SchemaGrammar g = after_trigger_;
        if (!g.feed(bytes.substr(rest))) fail("JSON mode: token {} does not continue the JSON text", token);
        grammar_ = std::move(g);
        state_ = State::Held;
        return;
    }
    SchemaGrammar g = grammar_;
    if (bytes.empty() || !g.feed(bytes)) fail("JSON mode: token {} does not continue the JSON text", token);
    grammar_ = std::move(g);
}

} // namespace zaya
