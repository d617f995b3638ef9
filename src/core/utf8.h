// UTF-8 validity: what text files and JSON strings must be.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya {

// What starts at s[i]: a valid character of `length` bytes, or (valid = false) the maximal subpart of an invalid
// sequence, its lead byte and the continuation bytes that could still have completed it (at least 1 byte). The second
// byte's range rules out overlong forms, surrogates and values past U+10FFFF, as is_utf8 does.
struct Utf8Step {
    size_t length;
    bool valid;
};
inline Utf8Step utf8_step(std::string_view s, size_t i) {
    const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
    const unsigned c = byte(0);
    if (c < 0x80) return {1, true};
    if (c < 0xc2 || c > 0xf4) return {1, false};
    const size_t len = c <= 0xdf ? 2 : c <= 0xef ? 3 : 4;
    const unsigned lo = c == 0xe0 ? 0xa0 : c == 0xf0 ? 0x90 : 0x80, hi = c == 0xed ? 0x9f : c == 0xf4 ? 0x8f : 0xbf;
    size_t k = 1;
    if (i + 1 < s.size() && byte(1) >= lo && byte(1) <= hi)
        for (k = 2; k < len && i + k < s.size() && (byte(k) & 0xc0) == 0x80;) ++k;
    return {k, k == len};
}

// Valid UTF-8: no stray continuation bytes, no truncated characters, no overlong encodings, surrogates or values
// past U+10FFFF. NUL bytes are valid here (callers that refuse them say so).
inline bool is_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        const Utf8Step step = utf8_step(s, i);
        if (!step.valid) return false;
        i += step.length;
    }
    return true;
}

// The bytes of the character a lead byte begins (1 for ASCII, and for a byte that begins none: a continuation byte).
inline size_t utf8_length(uint8_t lead) { return lead < 0xc0 ? 1 : lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : 2; }

// The character of valid UTF-8 text (is_utf8) that begins at byte i; i moves past it.
inline uint32_t utf8_next(std::string_view s, size_t &i) {
    const unsigned lead = static_cast<unsigned char>(s[i]);
    const size_t len = utf8_length(uint8_t(lead));
    uint32_t cp = len == 1 ? lead : lead & (0x7fu >> len); // the lead byte's payload: 5, 4 or 3 bits
    for (size_t k = 1; k < len; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3fu);
    i += len;
    return cp;
}

// The character a UTF-16 surrogate pair (high U+D800–DBFF, low U+DC00–DFFF) stands for.
inline uint32_t utf16_pair(uint32_t high, uint32_t low) { return 0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00); }

// Characters of UTF-8 text, counted by their lead bytes (so a character cut short still counts once): Python's len()
// of valid text.
inline int64_t utf8_characters(std::string_view s) {
    int64_t n = 0;
    for (char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
    return n;
}

// `s` with each maximal invalid subsequence replaced by one U+FFFD: Rust's String::from_utf8_lossy, which the
// tokenizers library decodes byte-level tokens with (unlike its byte fallback: one U+FFFD per byte).
inline std::string utf8_lossy(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const Utf8Step step = utf8_step(s, i);
        if (step.valid) out.append(s.substr(i, step.length));
        else out += "\xef\xbf\xbd";
        i += step.length;
    }
    return out;
}

} // namespace zaya
