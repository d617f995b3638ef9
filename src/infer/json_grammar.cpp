#include "infer/json_grammar.h"

namespace zaya {

namespace {

bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

int hex_value(uint8_t b) {
    if (is_digit(b)) return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

} // namespace

Lexed StringLexer::feed(uint8_t b) {
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
            return Lexed::Taken;
        }
        return Lexed::Refused;
    case Mode::Unicode: {
        const int h = hex_value(b);
        if (h < 0) return Lexed::Refused;
        const unsigned v = unsigned(unit_) << 4 | unsigned(h);
        if (hex_left_ == 4 && low_surrogate_ && h != 0xD) return Lexed::Refused;
        if (hex_left_ == 3 && (v >= 0xDC && v <= 0xDF) != low_surrogate_)
            return Lexed::Refused; // a low surrogate only right after a high one, and there it must be
        unit_ = uint16_t(v);
        if (--hex_left_ == 0) {
            low_surrogate_ = !low_surrogate_ && unit_ >= 0xD800 && unit_ <= 0xDBFF;
            mode_ = Mode::Chars;
        }
        return Lexed::Taken;
    }
    case Mode::Chars: break;
    }
    if (utf8_left_ > 0) {
        if (b < utf8_lo_ || b > utf8_hi_) return Lexed::Refused;
        --utf8_left_;
        utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
        return Lexed::Taken;
    }
    if (low_surrogate_) { // the \ of the pair's second escape: part of the character begun
        if (b != '\\') return Lexed::Refused;
        mode_ = Mode::Escape;
        return Lexed::Taken;
    }
    if (b == '"') return chars_ >= min_chars_ ? Lexed::Closed : Lexed::Refused;
    if (b < 0x20 || chars_ >= max_chars_) return Lexed::Refused; // control characters must be escaped
    if (b < 0x80 || b == '\\') {
        ++chars_;
        if (b == '\\') mode_ = Mode::Escape;
        return Lexed::Taken;
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
    return Lexed::Taken;
}

Lexed NumberLexer::feed(uint8_t b) {
    auto to = [this](Mode m) {
        mode_ = m;
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
        if (digit && mode_ != Mode::Zero) return Lexed::Taken;
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
        return ws_.take(b); // (a refused byte leaves the run as it was)
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
