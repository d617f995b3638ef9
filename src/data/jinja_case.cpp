// Case mapping as CPython's unicodeobject.c does it: the full (SpecialCasing) mapping where there is one, else the
// simple one.
#include "data/jinja_case.h"

#include "data/jinja_value.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <iterator>

namespace zaya::jinja {

namespace {

// SpecialCasing.txt's unconditional one-to-many upper and title mappings (0-terminated). Left out: the Greek
// letters with ypogegrammeni and the other precomposed Greek of U+1F80-1FFC, which get their simple mapping here
// (Python: ᾳ -> "ΑΙ"); no chat template upper-cases polytonic Greek.
struct Special {
    uint32_t cp;
    std::array<uint32_t, 4> upper, title;
};
constexpr Special kSpecial[] = {
    {0xdf, {0x53, 0x53}, {0x53, 0x73}},                 // ß
    {0x149, {0x2bc, 0x4e}, {0x2bc, 0x4e}},              // ŉ
    {0x1f0, {0x4a, 0x30c}, {0x4a, 0x30c}},              // ǰ
    {0x390, {0x399, 0x308, 0x301}, {0x399, 0x308, 0x301}}, // ΐ
    {0x3b0, {0x3a5, 0x308, 0x301}, {0x3a5, 0x308, 0x301}}, // ΰ
    {0x587, {0x535, 0x552}, {0x535, 0x582}},            // և
    {0x1e96, {0x48, 0x331}, {0x48, 0x331}},
    {0x1e97, {0x54, 0x308}, {0x54, 0x308}},
    {0x1e98, {0x57, 0x30a}, {0x57, 0x30a}},
    {0x1e99, {0x59, 0x30a}, {0x59, 0x30a}},
    {0x1e9a, {0x41, 0x2be}, {0x41, 0x2be}},
    {0xfb00, {0x46, 0x46}, {0x46, 0x66}},               // ﬀ
    {0xfb01, {0x46, 0x49}, {0x46, 0x69}},               // ﬁ
    {0xfb02, {0x46, 0x4c}, {0x46, 0x6c}},               // ﬂ
    {0xfb03, {0x46, 0x46, 0x49}, {0x46, 0x66, 0x69}},   // ﬃ
    {0xfb04, {0x46, 0x46, 0x4c}, {0x46, 0x66, 0x6c}},   // ﬄ
    {0xfb05, {0x53, 0x54}, {0x53, 0x74}},               // ﬅ
    {0xfb06, {0x53, 0x54}, {0x53, 0x74}},               // ﬆ
    {0xfb13, {0x544, 0x546}, {0x544, 0x576}},           // Armenian ligatures
    {0xfb14, {0x544, 0x535}, {0x544, 0x565}},
    {0xfb15, {0x544, 0x53b}, {0x544, 0x56b}},
    {0xfb16, {0x54e, 0x546}, {0x54e, 0x576}},
    {0xfb17, {0x544, 0x53d}, {0x544, 0x56d}},
};

const Special *special(uint32_t cp) {
    const auto it = std::lower_bound(std::begin(kSpecial), std::end(kSpecial), cp,
                                     [](const Special &s, uint32_t c) { return s.cp < c; });
    return it != std::end(kSpecial) && it->cp == cp ? it : nullptr;
}

void append_all(std::string &out, const std::array<uint32_t, 4> &cps) {
    for (uint32_t c : cps)
        if (c) append_utf8(out, c);
}

utf8proc_category_t category(uint32_t cp) { return utf8proc_category(utf8proc_int32_t(cp)); }

// Unicode's Case_Ignorable, as CPython's final-sigma test uses it: marks, format characters, modifier letters and
// symbols, and the word-internal punctuation of Word_Break MidLetter / MidNumLet / Single_Quote.
bool case_ignorable(uint32_t cp) {
    switch (category(cp)) {
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_SK: return true;
    default:
        return cp == '\'' || cp == '.' || cp == ':' || cp == 0xb7 || cp == 0x387 || cp == 0x5f4 || cp == 0x2018 ||
               cp == 0x2019 || cp == 0x2024 || cp == 0x2027 || cp == 0xfe13 || cp == 0xfe52 || cp == 0xfe55 ||
               cp == 0xff07 || cp == 0xff0e || cp == 0xff1a;
    }
}

// CPython's final_sigma: a cased letter before (past case-ignorables) and none after.
bool final_sigma(const std::vector<uint32_t> &cps, size_t k) {
    size_t j = k;
    while (j > 0 && case_ignorable(cps[j - 1])) --j;
    if (j == 0 || !is_cased(cps[j - 1])) return false;
    j = k + 1;
    while (j < cps.size() && case_ignorable(cps[j])) ++j;
    return j == cps.size() || !is_cased(cps[j]);
}

} // namespace

uint32_t to_upper(uint32_t cp) { return uint32_t(utf8proc_toupper(utf8proc_int32_t(cp))); }
uint32_t to_lower(uint32_t cp) { return uint32_t(utf8proc_tolower(utf8proc_int32_t(cp))); }

bool is_cased(uint32_t cp) {
    switch (category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT: return true;
    default:
        // Other_Lowercase / Other_Uppercase: the ones with a case pair (circled letters, Roman numerals, U+0345)
        // and the ordinal indicators; the superscript modifier letters (ʰ, ᵃ, ...) are not counted cased here.
        return to_upper(cp) != cp || to_lower(cp) != cp || cp == 0xaa || cp == 0xba;
    }
}

void append_upper(std::string &out, uint32_t cp) {
    if (const Special *s = special(cp)) append_all(out, s->upper);
    else append_utf8(out, to_upper(cp));
}

void append_title(std::string &out, uint32_t cp) {
    if (const Special *s = special(cp)) append_all(out, s->title);
    else append_utf8(out, uint32_t(utf8proc_totitle(utf8proc_int32_t(cp))));
}

void append_lower(std::string &out, const std::vector<uint32_t> &cps, size_t k) {
    const uint32_t cp = cps[k];
    if (cp == 0x130) { // İ: i and a combining dot above
        append_utf8(out, 'i');
        append_utf8(out, 0x307);
    } else if (cp == 0x3a3) {
        append_utf8(out, final_sigma(cps, k) ? 0x3c2 : 0x3c3);
    } else {
        append_utf8(out, to_lower(cp));
    }
}

std::string upper(std::string_view s) {
    std::string out;
    for (uint32_t cp : code_points(s)) append_upper(out, cp);
    return out;
}

std::string lower(std::string_view s) {
    const std::vector<uint32_t> cps = code_points(s);
    std::string out;
    for (size_t k = 0; k < cps.size(); ++k) append_lower(out, cps, k);
    return out;
}

} // namespace zaya::jinja
