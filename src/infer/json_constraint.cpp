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
    state_ = State::Deciding;
}

JsonConstraint::State JsonConstraint::decide(std::string_view bytes, size_t &matched, size_t &rest) const {
    for (size_t i = 0; i < bytes.size(); ++i) {
        const TriggerStep step = trigger_step(trigger_, matched, uint8_t(bytes[i]));
        if (step == TriggerStep::TurnedAway) return State::Free;
        if (step == TriggerStep::Complete) {
            rest = i + 1;
            return State::Held;
        }
    }
    return State::Deciding;
}

// Undecided, a token is allowed unless it completes the trigger with bytes the schema does not take: only tokens
// that begin with the trigger's next byte (or with whitespace, before its first) can.
int64_t JsonConstraint::mask_deciding(float *logits) {
    int64_t n = table_->size();
    for (int b = 0; b < 256; ++b) {
        if (b != uint8_t(trigger_[matched_]) && !(matched_ == 0 && json_whitespace(uint8_t(b)))) continue;
        for (int32_t id : table_->starting_with(uint8_t(b))) {
            const std::string_view bytes = table_->bytes(id);
            size_t matched = matched_, rest = 0;
            if (decide(bytes, matched, rest) != State::Held) continue;
            SchemaGrammar g = after_trigger_;
            if (g.feed(bytes.substr(rest))) continue;
            logits[id] = -std::numeric_limits<float>::infinity();
            --n;
        }
    }
    return n;
}

int64_t JsonConstraint::mask(float *logits) {
    if (state_ == State::Free) return table_->size();
    if (state_ == State::Deciding) return mask_deciding(logits);
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
    if (state_ == State::Free) return;
    if (state_ == State::Deciding) {
        const std::string_view bytes = table_->bytes(token);
        size_t matched = matched_, rest = 0;
        const State next = decide(bytes, matched, rest);
        if (next == State::Held) {
            SchemaGrammar g = after_trigger_;
            if (!g.feed(bytes.substr(rest))) fail("JSON mode: token {} does not continue the JSON text", token);
            grammar_ = std::move(g);
        }
        matched_ = matched;
        state_ = next;
        return;
    }
    SchemaGrammar g = grammar_;
    if (table_->bytes(token).empty() || !g.feed(table_->bytes(token)))
        fail("JSON mode: token {} does not continue the JSON text", token);
    grammar_ = std::move(g);
}

} // namespace zaya
