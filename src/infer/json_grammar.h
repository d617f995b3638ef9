// JSON as a byte-by-byte acceptor (RFC 8259): the state after any prefix of a JSON text, and whether a next byte
// can continue it. JSON mode (`response_format: {"type": "json_object"}`, infer/json_constraint.h) keeps one per
// request and lets only tokens whose bytes it accepts be sampled, so the output is always a prefix of a JSON object.
//
// Beyond RFC 8259, so that generation ends: the text is one object (no other top-level value, nothing after it:
// complete() is then true), and a run of whitespace between tokens is at most kMaxWhitespace bytes (a model stuck
// on newlines cannot fill max_tokens with them). Strings must be valid UTF-8 (no overlong forms, no surrogates,
// nothing above U+10FFFF) whose \u escapes pair their surrogates, so that strict parsers take the text too.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya {

class JsonGrammar {
  public:
    static constexpr int kMaxWhitespace = 32;

    // Whether `byte` can follow what was read; if so, reads it. A refused byte leaves the state as it was.
    bool feed(uint8_t byte);
    // Reads every byte in turn; false (the state then undefined: use a copy) at the first one refused.
    bool feed(std::string_view bytes) {
        for (char b : bytes)
            if (!feed(uint8_t(b))) return false;
        return true;
    }
    bool complete() const { return mode_ == Mode::Done; } // the top-level object is closed
    // Inside a string, past any escape or partial UTF-8 character: any byte but '"', '\\' and controls (< 0x20)
    // that ends whole characters leaves the state as it is (json_constraint.h's shortcut for most tokens).
    bool in_plain_string() const { return mode_ == Mode::String && utf8_left_ == 0 && !low_surrogate_; }
    int depth() const { return int(stack_.size()); }

  private:
    enum class Mode : uint8_t {
        Start,      // before the top-level object: whitespace or '{'
        Value,      // a value (after ':' or ',' in an array)
        ValueOrEnd, // after '[': a value or ']'
        KeyOrEnd,   // after '{': a key or '}'
        Key,        // after ',' in an object: a key
        Colon,      // after a key
        AfterValue, // ',' or the innermost container's end
        String,     // in a string (key_ says which kind)
        Escape,     // after '\\'
        Unicode,    // in \uXXXX (hex_left_ digits to go)
        Minus,      // number: after '-'
        Zero,       // number: integer part "0" (no digit may follow)
        Int,        // number: integer digits
        Dot,        // number: after '.', a digit must follow
        Frac,       // number: fraction digits
        Exp,        // number: after 'e' / 'E'
        ExpSign,    // number: after the exponent's sign
        ExpInt,     // number: exponent digits
        Literal,    // true / false / null: literal_ holds the bytes still to come
        Done,       // the object is closed; nothing may follow
    };
    bool value_start(uint8_t b);        // the first byte of a value (not whitespace)
    bool after_value(uint8_t b);        // ',' or a container's end, or whitespace
    bool close(uint8_t b);              // '}' or ']' matching the innermost container
    bool string_byte(uint8_t b);        // a byte of a string's contents
    void end_value() { mode_ = stack_.empty() ? Mode::Done : Mode::AfterValue; }

    Mode mode_ = Mode::Start;
    std::string stack_;       // the open containers, '{' or '[' each, innermost last
    bool key_ = false;        // the string being read is an object's key
    uint8_t utf8_left_ = 0;   // continuation bytes the character under way still needs
    uint8_t utf8_lo_ = 0x80;  // the range of the next continuation byte (narrower after E0, ED, F0, F4)
    uint8_t utf8_hi_ = 0xBF;
    uint8_t hex_left_ = 0;    // \u digits to go
    uint16_t unit_ = 0;       // the \u escape's code unit so far
    bool low_surrogate_ = false; // a \uD800–\uDBFF was read: the next thing must be its \uDC00–\uDFFF
    uint8_t ws_run_ = 0;      // whitespace bytes in a row
    const char *literal_ = nullptr; // the rest of true / false / null
};

} // namespace zaya
