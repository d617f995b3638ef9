#include "infer/json_constraint.h"

#include "core/error.h"
#include "data/tokenizer.h"

#include <algorithm>
#include <limits>

namespace zaya {

namespace {

// Whether bytes are whole, valid UTF-8 characters with nothing a JSON string must escape.
bool plain_string_text(std::string_view s) {
    JsonGrammar g;
    if (!g.feed("{\"")) return false;
    for (char c : s)
        if (!g.feed(uint8_t(c)) || (uint8_t(c) < 0x80 && !g.in_plain_string())) return false;
    return g.in_plain_string();
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
    for (size_t id = 0; id < bytes_.size(); ++id) {
        const std::string &b = bytes_[id];
        if (b.empty()) continue;
        plain_[id] = plain_string_text(b);
        by_first_[uint8_t(b[0])].push_back(int32_t(id));
    }
}

int64_t JsonConstraint::mask(float *logits) {
    const int64_t V = table_->size();
    allowed_.assign(size_t(V), 0);
    int64_t n = 0;
    const bool in_string = grammar_.in_plain_string();
    for (int b = 0; b < 256; ++b) {
        JsonGrammar first = grammar_;
        if (!first.feed(uint8_t(b))) continue;
        for (int32_t id : table_->starting_with(uint8_t(b))) {
            bool ok = in_string && table_->plain(id);
            if (!ok) {
                JsonGrammar g = first;
                ok = g.feed(table_->bytes(id).substr(1));
            }
            if (ok) allowed_[size_t(id)] = 1, ++n;
        }
    }
    for (int64_t id = 0; id < V; ++id)
        if (!allowed_[size_t(id)]) logits[id] = -std::numeric_limits<float>::infinity();
    return n;
}

void JsonConstraint::advance(int32_t token) {
    if (token < 0 || token >= table_->size()) fail("JSON mode: token {} is outside the vocabulary", token);
    JsonGrammar g = grammar_;
    if (table_->bytes(token).empty() || !g.feed(table_->bytes(token)))
        fail("JSON mode: token {} does not continue the JSON text", token);
    grammar_ = std::move(g);
}

} // namespace zaya
