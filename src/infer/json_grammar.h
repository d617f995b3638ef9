// JSON as a byte-by-byte acceptor (RFC 8259): the state after any prefix of a JSON text, and whether a next byte
// can continue it. JSON mode (`response_format: {"type": "json_object"}`, infer/json_constraint.h) keeps one per
// request and lets only tokens whose bytes it accepts be sampled, so the output is always a prefix of a JSON object.
//
// Beyond RFC 8259, so that generation ends: the text is one object (no other top-level value, nothing after it:
// complete() is then true), and a run of whitespace between tokens is at most kMaxWhitespace bytes with one line
// break (WhitespaceRun: a model stuck on newlines cannot fill max_tokens with them). Strings must be valid UTF-8 (no overlong forms, no surrogates,
// nothing above U+10FFFF) whose \u escapes pair their surrogates, so that strict parsers take the text too.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya {

class Regex;

inline constexpr int kJsonMaxWhitespace = 32;

inline bool json_whitespace(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }

// A run of whitespace between two tokens: at most kJsonMaxWhitespace bytes and one line break ("\n", "\r" or
// "\r\n"), so that pretty-printing fits (a break, then indentation) and a model cannot pad its answer with blank
// lines.
struct WhitespaceRun {
    uint8_t bytes = 0, breaks = 0; // breaks: 1 for a '\n' seen, 2 for a '\r'
    bool take(uint8_t b) {
        if (bytes >= kJsonMaxWhitespace) return false;
        const uint8_t bit = b == '\n' ? 1 : b == '\r' ? 2 : 0;
        if ((breaks & bit) || (bit == 2 && (breaks & 1))) return false; // one '\n', one '\r', and '\r' before '\n'
        breaks = uint8_t(breaks | bit);
        ++bytes;
        return true;
    }
    void reset() { bytes = breaks = 0; }
    bool operator==(const WhitespaceRun &) const = default;
};

// What a lexer does with a byte.
enum class Lexed : uint8_t {
    Taken,   // part of the token
    Refused, // cannot come here (the lexer's state is unchanged)
    Ended,   // the token ended before this byte (a number, seen whole only when what follows it comes): the byte
             // belongs to what follows, and the lexer is done
    Closed,  // the byte ended the token (a string's closing quote)
};

// A string's contents, after its opening quote, up to and with its closing quote.
class StringLexer {
  public:
    Lexed feed(uint8_t b);
    // Past any escape or partial UTF-8 character: any byte but '"', '\\' and controls (< 0x20) that ends whole
    // characters leaves the state as it is (json_constraint.h's shortcut for most tokens).
    bool plain() const { return mode_ == Mode::Chars && utf8_left_ == 0 && !low_surrogate_; }
    // A schema's minLength and maxLength, in characters (code points: an escape is one, a surrogate pair one): a
    // character that would pass max_chars is refused at its first byte, the closing quote before min_chars.
    void limit(uint32_t min_chars, uint32_t max_chars) { min_chars_ = min_chars, max_chars_ = max_chars; }
    uint32_t room() const { return max_chars_ - chars_; } // characters that may still come
    // A schema's pattern (or format): each character must continue a string of it, within the lengths (the Regex
    // was compiled with them), the closing quote end one. The Regex must outlive the lexer (the schema owns it).
    void match(const Regex *pattern) { pattern_ = pattern, state_ = 0; } // (Regex::start())
    bool matches() const { return pattern_ != nullptr; } // plain tokens then change the state: read them
    const Regex *pattern() const { return pattern_; }
    int32_t pattern_state() const { return state_; }
    uint32_t chars() const { return chars_; } // characters begun
    bool operator==(const StringLexer &) const = default; // the same state (json_schema.h merges equal readings)

  private:
    Lexed lex(uint8_t b);
    bool pattern_takes(uint32_t code_point);
    bool pattern_may_take(uint32_t lo, uint32_t hi) const;
    bool pattern_may_take_unit(int digits) const;

    enum class Mode : uint8_t { Chars, Escape, Unicode };
    Mode mode_ = Mode::Chars;
    uint8_t utf8_left_ = 0;  // continuation bytes the character under way still needs
    uint8_t utf8_lo_ = 0x80; // the range of the next continuation byte (narrower after E0, ED, F0, F4)
    uint8_t utf8_hi_ = 0xBF;
    uint8_t hex_left_ = 0;       // \u digits to go
    uint16_t unit_ = 0;          // the \u escape's code unit so far
    bool low_surrogate_ = false; // a \uD800–\uDBFF was read: the next thing must be its \uDC00–\uDFFF
    uint32_t chars_ = 0;         // characters begun
    uint32_t min_chars_ = 0, max_chars_ = UINT32_MAX;
    uint32_t code_point_ = 0;    // the UTF-8 character under way: its bits so far
    uint16_t high_ = 0;          // the pair's high surrogate, while low_surrogate_
    int32_t state_ = 0;          // the pattern's
    const Regex *pattern_ = nullptr;
};

// A number, from its first byte ('-' or a digit; integer: no fraction or exponent). Each part's digits are capped,
// so that a model that writes digits on ("0.000000…", "1111…") must end the number: no value a program reads needs
// more (a double holds 17 significant digits; these leave room for big integers and leading zeros), and a number
// cut by max_tokens is no JSON value. A schema's bounded or stepped number is capped by its range instead
// (json_bounds.h: a bounded one's fraction as a multiple of 10^-22, with two more zeros at most), which knows which
// prefixes can still end within it: `capped` false lifts these caps, which could strand such a prefix.
class NumberLexer {
  public:
    static constexpr int kMaxIntegerDigits = 32, kMaxFractionDigits = 24, kMaxExponentDigits = 3;
    explicit NumberLexer(bool integer = false, bool capped = true) : integer_(integer), capped_(capped) {}
    Lexed feed(uint8_t b);
    bool operator==(const NumberLexer &) const = default;

  private:
    enum class Mode : uint8_t { Start, Minus, Zero, Int, Dot, Frac, Exp, ExpSign, ExpInt };
    Mode mode_ = Mode::Start;
    uint8_t digits_ = 0; // the digits of the part under way (Int, Frac, ExpInt), up to its cap
    bool integer_, capped_;
};

class JsonGrammar {
  public:
    static constexpr int kMaxWhitespace = kJsonMaxWhitespace;

    // any_value: the text is one JSON value of any kind (a schema's free-form part, json_schema.h), else an object.
    // compact: no whitespace between tokens (JsonSchema::compact()).
    explicit JsonGrammar(bool any_value = false, bool compact = false) : any_value_(any_value), compact_(compact) {}

    // Whether `byte` can follow what was read; if so, reads it. A refused byte leaves the state as it was.
    bool feed(uint8_t byte);
    // Reads every byte in turn; false (the state then undefined: use a copy) at the first one refused.
    bool feed(std::string_view bytes) {
        for (char b : bytes)
            if (!feed(uint8_t(b))) return false;
        return true;
    }
    bool complete() const { return mode_ == Mode::Done; } // the top-level value is closed
    // Whether the value could end here: complete, or a top-level number that the next byte ends.
    bool can_end() const { return complete() || (mode_ == Mode::Number && stack_.empty() && number_done()); }
    bool in_plain_string() const { return mode_ == Mode::String && string_.plain(); }
    // The string under way (a key's or a value's), or null.
    const StringLexer *string_lexer() const { return mode_ == Mode::String ? &string_ : nullptr; }
    int depth() const { return int(stack_.size()); }
    bool operator==(const JsonGrammar &) const = default;

  private:
    enum class Mode : uint8_t {
        Start,      // before the top-level value: whitespace, or its first byte
        Value,      // a value (after ':' or ',' in an array)
        ValueOrEnd, // after '[': a value or ']'
        KeyOrEnd,   // after '{': a key or '}'
        Key,        // after ',' in an object: a key
        Colon,      // after a key
        AfterValue, // ',' or the innermost container's end
        String,     // in a string (key_ says which kind)
        Number,     // in a number
        Literal,    // true / false / null: literal_ holds the bytes still to come
        Done,       // the top-level value is complete; nothing may follow
    };
    bool value_start(uint8_t b); // the first byte of a value (not whitespace)
    bool after_value(uint8_t b); // ',' or a container's end
    bool close(uint8_t b);       // '}' or ']' matching the innermost container
    bool number_done() const;    // the number read so far is whole (a copy of it ends at a space)
    void end_value() { mode_ = stack_.empty() ? Mode::Done : Mode::AfterValue; }

    bool any_value_;
    bool compact_;
    Mode mode_ = Mode::Start;
    std::string stack_;             // the open containers, '{' or '[' each, innermost last
    bool key_ = false;              // the string being read is an object's key
    StringLexer string_;            // the string under way
    NumberLexer number_;            // the number under way
    WhitespaceRun ws_;              // the whitespace run under way
    const char *literal_ = nullptr; // the rest of true / false / null
};

} // namespace zaya
