// Python's case mapping of str: upper(), lower(), title() and capitalize() map every character of Unicode (simple
// mappings from utf8proc) plus SpecialCasing's one-to-many mappings (ß -> "SS", ﬁ -> "FI", İ -> "i̇") and the final
// sigma rule of lower().
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya::jinja {

// Simple (one-to-one) mappings of one character.
uint32_t to_upper(uint32_t cp);
uint32_t to_lower(uint32_t cp);
// Unicode's Cased property (what Python's title() and islower() look at).
bool is_cased(uint32_t cp);

// Full mappings appended to `out`. lower looks at the characters around cps[k] for the final sigma.
void append_upper(std::string &out, uint32_t cp);
void append_title(std::string &out, uint32_t cp);
void append_lower(std::string &out, const std::vector<uint32_t> &cps, size_t k);

std::string upper(std::string_view s);
std::string lower(std::string_view s);

} // namespace zaya::jinja
