// Hexadecimal digits, as JSON's \u escapes, regular expressions' \x and \u, and URI percent-escapes write them.
#pragma once
#include <cstdint>

namespace zaya {

// The value of hex digit c (0-9, a-f, A-F), −1 if it is none.
inline int hex_digit(uint32_t c) {
    if (c >= '0' && c <= '9') return int(c - '0');
    if (c >= 'a' && c <= 'f') return int(c - 'a' + 10);
    if (c >= 'A' && c <= 'F') return int(c - 'A' + 10);
    return -1;
}

} // namespace zaya
