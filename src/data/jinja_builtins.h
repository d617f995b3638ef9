// Helpers the builtins (jinja_filters.cpp, jinja_tests.cpp, jinja_methods.cpp) and jinja_text.cpp share: reading
// call arguments, and Python's len() and int() of a float.
#pragma once
#include "data/jinja_value.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zaya::jinja {

using VK = Value::Kind;

// The argument at position `i` (after the operand) or keyword `kw`; null when neither is given.
const Value *arg_at(CallArgs &a, size_t i, const char *kw);
// `def` a bare Value(): the argument is required.
Value arg(CallArgs &a, size_t i, const char *kw, Value def);
bool flag(CallArgs &a, size_t i, const char *kw, bool def = false);
std::string need_str(const Value &v, const char *what);
Value str_list(const std::vector<std::string> &parts);
// Python's int(x) of a finite float; fails past 64 bits (where the cast would be undefined).
int64_t float_to_int(double x);
// Python's len().
int64_t length(const Value &v);

} // namespace zaya::jinja
