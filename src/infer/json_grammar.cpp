#include "infer/json_grammar.h"

#include "core/hex.h"
#include "core/utf8.h"
#include "infer/regex.h"

#include <algorithm>

namespace zaya {

namespace {

bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

} // namespace

Lexed StringLexer::feed(uint8_t b) {
    if (pattern_ == nullptr) return lex(b);
    const StringLexer before = *this; // a pattern may refuse a byte the lexer took: undo it
    const Lexed l = lex(b);
    if (l == Lexed::Refused) *this = before;
    return l;
}

// The pattern's part: a character read whole moves its state; a character begun must be able to end as one that
// continues the pattern viably (within the lengths too).
bool StringLexer::pattern_takes(uint32_t code_point) {
    if (pattern_ == nullptr) return true;
    state_ = pattern_->step(state_, code_point);
    return pattern_->viable(state_, chars_);
}

bool StringLexer::pattern_may_take(uint32_t lo, uint32_t hi) const {
    return pattern_ == nullptr || pattern_->viable_through(state_, chars_ - 1, lo, hi);
}

// A \u escape with `digits` of its 4 hex digits read: which characters it can still become.
bool StringLexer::pattern_may_take_unit(int digits) const {
    if (pattern_ == nullptr) return true;
    const uint32_t span = 1u << (4 * (4 - digits)), lo = uint32_t(unit_) * span, hi = lo + span - 1;
    if (low_surrogate_) { // the pair's second unit: a character of the high one's 1024
        const uint32_t a = std::max(lo, 0xDC00u), z = std::min(hi, 0xDFFFu);
        return a <= z && pattern_may_take(utf16_pair(high_, a), utf16_pair(high_, z));
    }
    const uint32_t ha = std::max(lo, 0xD800u), hz = std::min(hi, 0xDBFFu); // high surrogates: what pairs make
    return (lo <= 0xD7FF && pattern_may_take(lo, std::min(hi, 0xD7FFu))) ||
           (hi >= 0xE000 && pattern_may_take(std::max(lo, 0xE000u), hi)) ||
           (ha <= hz && pattern_may_take(utf16_pair(ha, 0xDC00), utf16_pair(hz, 0xDFFF)));
}

Lexed StringLexer::lex(uint8_t b) {
    auto taken_if = [](bool ok) { return ok ? Lexed::Taken : Lexed::Refused; };
    switch (mode_) {
    case Mode::Escape:
        if (b == 'u') {
            mode_ = Mode::Unicode;
            hex_left_ = 4;
            unit_ = 0;
            return Lexed::Taken;
        }
        if (low_surrogate_) return Lexed::Refused;
        if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
            mode_ = Mode::Chars;
            const uint32_t c = b == 'b' ? 8 : b == 'f' ? 12 : b == 'n' ? 10 : b == 'r' ? 13 : b == 't' ? 9 : b;
            return taken_if(pattern_takes(c));
        }
        return Lexed::Refused;
    case Mode::Unicode: {
        const int h = hex_digit(b);
        if (h < 0) return Lexed::Refused;
        const unsigned v = unsigned(unit_) << 4 | unsigned(h);
        if (hex_left_ == 4 && low_surrogate_ && h != 0xD) return Lexed::Refused;
        if (hex_left_ == 3 && (v >= 0xDC && v <= 0xDF) != low_surrogate_)
            return Lexed::Refused; // a low surrogate only right after a high one, and there it must be
        unit_ = uint16_t(v);
        if (--hex_left_ > 0) return taken_if(pattern_may_take_unit(4 - hex_left_));
        mode_ = Mode::Chars;
        if (low_surrogate_) { // the pair is whole
            low_surrogate_ = false;
            return taken_if(pattern_takes(utf16_pair(high_, unit_)));
        }
        if (unit_ >= 0xD800 && unit_ <= 0xDBFF) {
            low_surrogate_ = true;
            high_ = unit_;
            return taken_if(pattern_may_take(utf16_pair(high_, 0xDC00), utf16_pair(high_, 0xDFFF))); // its pairs'
        }
        return taken_if(pattern_takes(unit_));
    }
    case Mode::Chars: break;
    }
    if (utf8_left_ > 0) {
        if (b < utf8_lo_ || b > utf8_hi_) return Lexed::Refused;
        --utf8_left_;
        utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
        code_point_ = code_point_ << 6 | (b & 0x3Fu);
        if (utf8_left_ == 0) return taken_if(pattern_takes(code_point_));
        const uint32_t shift = 6u * utf8_left_;
        return taken_if(pattern_may_take(code_point_ << shift, (code_point_ << shift) | ((1u << shift) - 1)));
    }
    if (low_surrogate_) { // the \ of the pair's second escape: part of the character begun
        if (b != '\\') return Lexed::Refused;
        mode_ = Mode::Escape;
        return Lexed::Taken;
    }
    if (b == '"') // closes the string if it is long enough and a whole string of the pattern
        return chars_ >= min_chars_ && (!pattern_ || pattern_->accepts(state_)) ? Lexed::Closed : Lexed::Refused;
    if (b < 0x20 || chars_ >= max_chars_) return Lexed::Refused; // control characters must be escaped
    if (b < 0x80 || b == '\\') {
        ++chars_;
        if (b != '\\') return taken_if(pattern_takes(b));
        mode_ = Mode::Escape;
        return taken_if(pattern_may_take(0, 0x10FFFF)); // an escape can write any character
    }
    // A UTF-8 lead byte (RFC 3629's table): how many continuation bytes follow, and the second byte's range where
    // it is narrower (no overlong forms, no surrogates, nothing above U+10FFFF).
    if (b >= 0xC2 && b <= 0xDF) utf8_left_ = 1;
    else if (b >= 0xE0 && b <= 0xEF) utf8_left_ = 2;
    else if (b >= 0xF0 && b <= 0xF4) utf8_left_ = 3;
    else return Lexed::Refused;
    if (b == 0xE0) utf8_lo_ = 0xA0;
    if (b == 0xED) utf8_hi_ = 0x9F;
    if (b == 0xF0) utf8_lo_ = 0x90;
    if (b == 0xF4) utf8_hi_ = 0x8F;
    ++chars_;
    code_point_ = b & (0x7Fu >> (utf8_left_ + 1));
    const uint32_t rest = 6u * (utf8_left_ - 1u); // the bits after the second byte's
    const uint32_t lo = ((code_point_ << 6 | (utf8_lo_ & 0x3Fu)) << rest);
    const uint32_t hi = ((code_point_ << 6 | (utf8_hi_ & 0x3Fu)) << rest) | ((1u << rest) - 1);
    return taken_if(pattern_may_take(lo, hi));
}

Lexed NumberLexer::feed(uint8_t b) {
    auto to = [this](Mode m) {
        mode_ = m;
        digits_ = 1; // (the modes reached by a byte other than a digit count none: they are left by one)
        return Lexed::Taken;
    };
    const bool digit = is_digit(b);
    switch (mode_) {
    case Mode::Start:
        if (b == '-') return to(Mode::Minus);
        [[fallthrough]];
    case Mode::Minus:
        if (!digit) return Lexed::Refused;
        return to(b == '0' ? Mode::Zero : Mode::Int);
    case Mode::Dot: return digit ? to(Mode::Frac) : Lexed::Refused;
    case Mode::Exp:
        if (b == '+' || b == '-') return to(Mode::ExpSign);
        [[fallthrough]];
    case Mode::ExpSign: return digit ? to(Mode::ExpInt) : Lexed::Refused;
    case Mode::Zero:
    case Mode::Int:
    case Mode::Frac:
    case Mode::ExpInt:
        if (digit && mode_ != Mode::Zero) {
            if (!capped_) return Lexed::Taken; // (digits_ stays at 1: no count needed)
            const int cap = mode_ == Mode::Int    ? kMaxIntegerDigits
                            : mode_ == Mode::Frac ? kMaxFractionDigits
                                                  : kMaxExponentDigits;
            if (digits_ >= cap) return Lexed::Refused; // the number must end (or go on to its next part)
            ++digits_;
            return Lexed::Taken;
        }
        if (!integer_ && b == '.' && (mode_ == Mode::Zero || mode_ == Mode::Int)) return to(Mode::Dot);
        if (!integer_ && (b == 'e' || b == 'E') && mode_ != Mode::ExpInt) return to(Mode::Exp);
        if (digit) return Lexed::Refused; // a digit after a leading 0
        return Lexed::Ended;
    }
    return Lexed::Refused;
}

bool JsonGrammar::number_done() const {
    NumberLexer n = number_;
    return n.feed(' ') == Lexed::Ended;
}

bool JsonGrammar::feed(uint8_t b) {
    if (mode_ == Mode::Number) {
        const NumberLexer before = number_;
        const Lexed l = number_.feed(b);
        if (l == Lexed::Taken) {
            ws_.reset();
            return true;
        }
        if (l == Lexed::Refused) return false;
        end_value(); // the number ended before b: b is what follows it
        if (feed(b)) return true;
        number_ = before;
        mode_ = Mode::Number;
        return false;
    }
    // Whitespace between tokens: where a structural byte may come.
    if (json_whitespace(b) && mode_ != Mode::String && mode_ != Mode::Literal && mode_ != Mode::Done) {
        return !compact_ && ws_.take(b); // (a refused byte leaves the run as it was)
    }
    bool ok = false;
    switch (mode_) {
    case Mode::Start:
        ok = any_value_ ? value_start(b) : b == '{';
        if (ok && !any_value_) {
            stack_.push_back('{');
            mode_ = Mode::KeyOrEnd;
        }
        break;
    case Mode::Value: ok = value_start(b); break;
    case Mode::ValueOrEnd: ok = b == ']' ? close(b) : value_start(b); break;
    case Mode::KeyOrEnd:
    case Mode::Key:
        if (b == '"') {
            mode_ = Mode::String;
            string_ = StringLexer();
            key_ = ok = true;
        } else if (b == '}' && mode_ == Mode::KeyOrEnd) {
            ok = close(b);
        }
        break;
    case Mode::Colon:
        ok = b == ':';
        if (ok) mode_ = Mode::Value;
        break;
    case Mode::AfterValue: ok = after_value(b); break;
    case Mode::String:
        switch (string_.feed(b)) {
        case Lexed::Taken: ok = true; break;
        case Lexed::Closed:
            ok = true;
            if (key_) mode_ = Mode::Colon;
            else end_value();
            break;
        default: break;
        }
        break;
    case Mode::Literal:
        ok = b == uint8_t(*literal_);
        if (ok && *++literal_ == '\0') end_value();
        break;
    case Mode::Number:
    case Mode::Done: break;
    }
    if (ok) ws_.reset();
    return ok;
}

bool JsonGrammar::value_start(uint8_t b) {
    switch (b) {
    case '{':
        stack_.push_back('{');
        mode_ = Mode::KeyOrEnd;
        return true;
    case '[':
        stack_.push_back('[');
        mode_ = Mode::ValueOrEnd;
        return true;
    case '"':
        mode_ = Mode::String;
        string_ = StringLexer();
        key_ = false;
        return true;
    case 't': literal_ = "rue"; break;
    case 'f': literal_ = "alse"; break;
    case 'n': literal_ = "ull"; break;
    default:
        number_ = NumberLexer();
        if (number_.feed(b) != Lexed::Taken) return false;
        mode_ = Mode::Number;
        return true;
    }
    mode_ = Mode::Literal;
    return true;
}

bool JsonGrammar::after_value(uint8_t b) {
    if (b == ',') {
        mode_ = stack_.back() == '{' ? Mode::Key : Mode::Value;
        return true;
    }
    return (b == '}' || b == ']') && close(b);
}

bool JsonGrammar::close(uint8_t b) {
    if (stack_.empty() || stack_.back() != (b == '}' ? '{' : '[')) return false;
    stack_.pop_back();
    end_value();
    return true;
}

} // namespace zaya
