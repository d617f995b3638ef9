// Python's str operations the builtins share: strip, split, replace, title, capitalize, splitlines, and the
// printf-style (`%`) and str.format formatting.
#pragma once
#include "data/jinja_value.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya::jinja {

inline bool is_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Decimal digits as a number, saturating at INT64_MAX: Python's ints have no bound, and no width or index a
// template may use gets near it (std::stoul would throw past it).
int64_t parse_digits(std::string_view digits);

// Python's str.capitalize(): the first character upper (title) case, the rest lower.
std::string capitalize(const std::string &s);
// Python's str.title(): the first cased character of each run upper, the rest lower.
std::string py_title(const std::string &s);
// Python's str.islower() (want_lower) / isupper(): some cased character, and none of the other case.
bool is_case(const std::string &s, bool want_lower);
// Python's str.strip family; `chars` null: whitespace.
std::string strip(const std::string &s, const Value *chars, bool left, bool right);
std::string replace(const std::string &s, const std::string &old, const std::string &rep, int64_t count);
// Python's str.split / rsplit.
std::vector<std::string> split(const std::string &s, const Value *sep_v, int64_t maxsplit, bool from_right);
std::vector<std::string> splitlines(const std::string &s, bool keepends);
// Python's printf-style formatting (`fmt % args`, the format filter; args a tuple, a dict, or one value): flags,
// width, precision and the s r d i u f F e E g G x X o c conversions.
std::string percent_format(const std::string &fmt, const Value &args);
// Python's str.format: {} {0} {name} fields with !s / !r, and a format spec of fill, align and width (or a float's
// .N precision); {{ and }} escape braces.
std::string brace_format(Renderer &r, const std::string &fmt, CallArgs &a);

} // namespace zaya::jinja
