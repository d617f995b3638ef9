#include "infer/json_grammar.h"

namespace zaya {

namespace {

bool is_whitespace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

int hex_value(uint8_t b) {
    if (is_digit(b)) return b - '0';
    if (b >= 'a' && b <= 'f') return b - 'a' + 10;
    if (b >= 'A' && b <= 'F') return b - 'A' + 10;
    return -1;
}

} // namespace

bool JsonGrammar::feed(uint8_t b) {
    // Whitespace between tokens: where a structural byte may come, and after a number (which it ends).
    if (is_whitespace(b)) {
        switch (mode_) {
        case Mode::Zero:
        case Mode::Int:
        case Mode::Frac:
        case Mode::ExpInt:
        case Mode::Start:
        case Mode::Value:
        case Mode::ValueOrEnd:
        case Mode::KeyOrEnd:
        case Mode::Key:
        case Mode::Colon:
        case Mode::AfterValue:
            if (ws_run_ >= kMaxWhitespace) return false;
            ++ws_run_;
            if (mode_ == Mode::Zero || mode_ == Mode::Int || mode_ == Mode::Frac || mode_ == Mode::ExpInt)
                mode_ = Mode::AfterValue; // a number is only ever inside a container
            return true;
        default:
            break;
        }
    }
    bool ok = false;
    switch (mode_) {
    case Mode::Start:
        ok = b == '{';
        if (ok) {
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
    case Mode::String: ok = string_byte(b); break;
    case Mode::Escape:
        if (b == 'u') {
            mode_ = Mode::Unicode;
            hex_left_ = 4;
            unit_ = 0;
            ok = true;
        } else if (!low_surrogate_ && (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' ||
                                       b == 'r' || b == 't')) {
            mode_ = Mode::String;
            ok = true;
        }
        break;
    case Mode::Unicode: {
        const int h = hex_value(b);
        if (h < 0) break;
        const unsigned v = unsigned(unit_) << 4 | unsigned(h);
        if (hex_left_ == 4 && low_surrogate_ && h != 0xD) break;
        if (hex_left_ == 3) { // the first two digits decide a surrogate: D8–DB high, DC–DF low
            const bool low = v >= 0xDC && v <= 0xDF;
            if (low != low_surrogate_) break; // a low one only right after a high one, and there it must be
        }
        unit_ = uint16_t(v);
        ok = true;
        if (--hex_left_ == 0) {
            low_surrogate_ = !low_surrogate_ && unit_ >= 0xD800 && unit_ <= 0xDBFF;
            mode_ = Mode::String;
        }
        break;
    }
    case Mode::Minus:
        ok = is_digit(b);
        if (ok) mode_ = b == '0' ? Mode::Zero : Mode::Int;
        break;
    case Mode::Zero:
    case Mode::Int:
    case Mode::Frac:
    case Mode::ExpInt:
        if (is_digit(b) && mode_ != Mode::Zero) {
            ok = true;
        } else if (b == '.' && (mode_ == Mode::Zero || mode_ == Mode::Int)) {
            mode_ = Mode::Dot;
            ok = true;
        } else if ((b == 'e' || b == 'E') && mode_ != Mode::ExpInt) {
            mode_ = Mode::Exp;
            ok = true;
        } else { // the number ends here: b must be what may follow a value
            const Mode number = mode_;
            mode_ = Mode::AfterValue;
            ok = after_value(b);
            if (!ok) mode_ = number;
        }
        break;
    case Mode::Dot:
        ok = is_digit(b);
        if (ok) mode_ = Mode::Frac;
        break;
    case Mode::Exp:
        ok = is_digit(b) || b == '+' || b == '-';
        if (ok) mode_ = is_digit(b) ? Mode::ExpInt : Mode::ExpSign;
        break;
    case Mode::ExpSign:
        ok = is_digit(b);
        if (ok) mode_ = Mode::ExpInt;
        break;
    case Mode::Literal:
        ok = b == uint8_t(*literal_);
        if (ok && *++literal_ == '\0') end_value();
        break;
    case Mode::Done: break;
    }
    if (ok) ws_run_ = 0;
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
        key_ = false;
        return true;
    case '-': mode_ = Mode::Minus; return true;
    case '0': mode_ = Mode::Zero; return true;
    case 't': literal_ = "rue"; break;
    case 'f': literal_ = "alse"; break;
    case 'n': literal_ = "ull"; break;
    default:
        if (!is_digit(b)) return false;
        mode_ = Mode::Int;
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

bool JsonGrammar::string_byte(uint8_t b) {
    if (utf8_left_ > 0) {
        if (b < utf8_lo_ || b > utf8_hi_) return false;
        --utf8_left_;
        utf8_lo_ = 0x80, utf8_hi_ = 0xBF;
        return true;
    }
    if (low_surrogate_ && b != '\\') return false;
    if (b == '"') {
        if (key_) mode_ = Mode::Colon;
        else end_value();
        return true;
    }
    if (b == '\\') {
        mode_ = Mode::Escape;
        return true;
    }
    if (b < 0x20) return false; // control characters must be escaped
    if (b < 0x80) return true;
    // A UTF-8 lead byte (RFC 3629's table): how many continuation bytes follow, and the second byte's range where
    // it is narrower (no overlong forms, no surrogates, nothing above U+10FFFF).
    if (b >= 0xC2 && b <= 0xDF) utf8_left_ = 1;
    else if (b >= 0xE0 && b <= 0xEF) utf8_left_ = 2;
    else if (b >= 0xF0 && b <= 0xF4) utf8_left_ = 3;
    else return false;
    if (b == 0xE0) utf8_lo_ = 0xA0;
    if (b == 0xED) utf8_hi_ = 0x9F;
    if (b == 0xF0) utf8_lo_ = 0x90;
    if (b == 0xF4) utf8_hi_ = 0x8F;
    return true;
}

} // namespace zaya
