// Patterns for structured outputs (infer/regex.h) against std::regex's ECMAScript grammar as the reference: which
// strings match (a pattern is a search), which prefixes some string of the pattern begins with (within lengths), and
// what is refused; formats as the schema compiles them.
#include "core/utf8.h"
#include "infer/json_schema.h"
#include "infer/regex.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <regex>
#include <set>

namespace zaya {
namespace {

// Every string over `alphabet` of up to `max_len` characters, shortest first.
std::vector<std::string> all_strings(const std::string &alphabet, size_t max_len) {
    std::vector<std::string> out = {""}, level = {""};
    for (size_t len = 1; len <= max_len; ++len) {
        std::vector<std::string> next;
        for (const std::string &p : level)
            for (char c : alphabet) next.push_back(p + c);
        out.insert(out.end(), next.begin(), next.end());
        level = std::move(next);
    }
    return out;
}

int32_t run(const Regex &r, const std::string &s) { // ASCII: a character per byte
    int32_t state = r.start();
    for (char c : s) state = r.step(state, uint8_t(c));
    return state;
}

// core/utf8.h's decoder, which reads patterns' characters: it once kept one bit too few of a lead byte, so that
// Ж (U+0416) read as U+0016 and 語 (U+8A9E) as U+0A9E.
TEST(Utf8, NextDecodesCharactersOfEveryLength) {
    const std::pair<const char *, uint32_t> chars[] = {
        {"A", 0x41},         {"\u00e9", 0xe9},       {"\u0416", 0x416},        {"\u07ff", 0x7ff},
        {"\u0800", 0x800},  {"\u8a9e", 0x8a9e},     {"\uffff", 0xffff},       {"\U00010000", 0x10000},
        {"\U0001f600", 0x1f600}, {"\U0010ffff", 0x10ffff}};
    for (const auto &[text, cp] : chars) {
        size_t i = 0;
        EXPECT_EQ(utf8_next(text, i), cp) << text;
        EXPECT_EQ(i, std::string_view(text).size()) << text;
    }
}

TEST(Regex, MatchesWhatEcmaScriptSearchMatchesAndPrefixesAreViableExactly) {
    const std::vector<std::string> patterns = {
        "^a+b?$", "ab|^c", "^(ab|a)*c$", "a.c", "^[a-c]{2,3}$", "^\\d+(\\.\\d{1,2})?$", "^[^a]*$", "b$",
        "^(a|b)*abb$", "^a{3}$|^b", "(?:ab)+", "^[-a]\\.?$", "^\\w\\W?$", "^(?<x>a|bc){1,}c?$", "", "^$",
        "^[\\d.]{2}-?$", "c{2,}", "^\\x61\\u0062[\\s]?$", "^a*?b+?$"};
    const std::string alphabet = "abc1.-";
    const auto strings = all_strings(alphabet, 6);
    for (const std::string &p : patterns) {
        const auto r = Regex::compile(p);
        std::string ecma = p; // (std::regex has no named groups: the name does not change what matches)
        if (const size_t at = ecma.find("(?<x>"); at != std::string::npos) ecma.replace(at, 5, "(");
        const std::regex reference(ecma, std::regex::ECMAScript);
        std::set<std::string> begun; // prefixes (of up to 3 characters) of the matching strings of up to 6
        for (const std::string &s : strings) {
            const bool match = std::regex_search(s, reference);
            const int32_t state = run(*r, s);
            ASSERT_EQ(state != Regex::kDead && r->accepts(state), match) << "/" << p << "/ '" << s << "'";
            if (match)
                for (size_t n = 0; n <= std::min<size_t>(3, s.size()); ++n) begun.insert(s.substr(0, n));
        }
        // Viable = some string of the pattern begins so (one within 3 more characters does, for these patterns).
        for (const std::string &s : strings) {
            if (s.size() > 3) break;
            ASSERT_EQ(r->viable(run(*r, s), uint32_t(s.size())), begun.count(s) != 0) << "/" << p << "/ '" << s << "'";
        }
    }
}

// With lengths: viable = some string of the pattern with min to max characters begins so.
TEST(Regex, LengthsAreFoldedIntoViability) {
    struct Case {
        const char *pattern;
        uint32_t min, max;
    };
    const std::string alphabet = "ab";
    const auto strings = all_strings(alphabet, 8);
    for (const Case &c : std::vector<Case>{{"^(ab)+$", 0, 5}, {"^(ab)+$", 3, UINT32_MAX}, {"^a*b$", 4, 6},
                                           {"^(aa|bbb)*$", 5, 5}, {"a", 0, 2}, {"^b*(ab)?$", 2, 3}}) {
        const auto r = Regex::compile(c.pattern, c.min, c.max);
        const std::regex reference(c.pattern, std::regex::ECMAScript);
        std::set<std::string> begun;
        for (const std::string &s : strings)
            if (s.size() >= c.min && s.size() <= c.max && std::regex_search(s, reference))
                for (size_t n = 0; n <= s.size(); ++n) begun.insert(s.substr(0, n));
        for (const std::string &s : strings) {
            if (s.size() > 5) break;
            ASSERT_EQ(r->viable(run(*r, s), uint32_t(s.size())), begun.count(s) != 0)
                << "/" << c.pattern << "/ " << c.min << ".." << c.max << " '" << s << "'";
        }
    }
    EXPECT_NE(test::error_of([] { Regex::compile("^(ab)+$", 3, 3); }).find("matches no string of 3 to 3"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { Regex::compile("^a$b"); }).find("'$' may only end"), std::string::npos);
}

// endless(): every string begun can go on into strings of the pattern without end — against brute force over "ab":
// each viable prefix of up to 3 characters begins a match at least 5 characters longer (these patterns' automata
// have fewer states than that, so a longer match exists exactly when infinitely many do).
TEST(Regex, EndlessWhenEveryStringBegunGoesOnWithoutEnd) {
    const auto strings = all_strings("ab", 9);
    for (const char *pattern : {"^[ab]+$", "b", "", "^a*$", "^(a|b[ab]*)$", "^(ab|ba)$", "^[ab]{2}$", "^a+b?$",
                                "^(ab)*a?$", "^b(a|b)*a$"}) {
        const auto r = Regex::compile(pattern);
        const std::regex reference(pattern, std::regex::ECMAScript);
        bool endless = true;
        for (const std::string &p : strings) {
            if (p.size() > 3 || !r->viable(run(*r, p), uint32_t(p.size()))) continue;
            bool longer = false;
            for (const std::string &s : strings)
                longer = longer || (s.size() >= p.size() + 5 && s.compare(0, p.size(), p) == 0 &&
                                    std::regex_search(s, reference));
            endless = endless && longer;
        }
        EXPECT_EQ(r->endless(), endless) << "/" << pattern << "/";
    }
    EXPECT_FALSE(Regex::compile("^[ab]+$", 0, 5)->endless()); // a maximum length ends every string
}

TEST(Regex, CodePointsBeyondAscii) {
    const auto r = Regex::compile("^[é-ë]\\u00ff.😀$");
    int32_t s = r->start();
    for (uint32_t c : {0xE9u, 0xFFu, 0x4E2Du, 0x1F600u}) {
        s = r->step(s, c);
        ASSERT_TRUE(r->viable(s, 1)) << std::hex << c;
    }
    EXPECT_TRUE(r->accepts(s));
    EXPECT_EQ(r->step(r->start(), 0xECu), Regex::kDead);
    EXPECT_TRUE(r->viable_through(r->start(), 0, 0xC0, 0xFF));  // a 2-byte lead C3 could become é
    EXPECT_FALSE(r->viable_through(r->start(), 0, 0x00, 0x7F)); // no ASCII first
}

TEST(Regex, RefusesWhatItCannotDoNamingThePosition) {
    auto refused = [](const char *p) { return test::error_of([&] { Regex::compile(p); }); };
    EXPECT_NE(refused("a(?=b)").find("lookaround"), std::string::npos);
    EXPECT_NE(refused("(a)\\1").find("backreferences are not supported (at character 5)"), std::string::npos)
        << refused("(a)\\1");
    EXPECT_NE(refused("a**").find("nothing to repeat"), std::string::npos);
    EXPECT_NE(refused("[z-a]").find("out of order"), std::string::npos);
    EXPECT_NE(refused("(a").find("missing ')'"), std::string::npos);
    EXPECT_NE(refused("a)").find("unbalanced ')'"), std::string::npos);
    EXPECT_NE(refused("\\bword").find("word boundaries"), std::string::npos);
    EXPECT_NE(refused("a|b^").find("'^' may only begin"), std::string::npos);
    EXPECT_NE(refused("\\p{L}").find("property escapes"), std::string::npos);
    EXPECT_NE(refused("a{2000}").find("over 1000"), std::string::npos);
    EXPECT_NE(refused("(a{1000}){1000}").find("too large"), std::string::npos);
    EXPECT_NE(refused(std::string(100, '(').c_str()).find("nest too deeply"), std::string::npos);
    EXPECT_NO_THROW(Regex::compile("a{,2}}")); // not a quantifier: literal braces, as ECMA-262's Annex B reads them
    // Untrusted patterns are bounded in what their automaton may cost, and messages show at most 80 bytes of them.
    EXPECT_NE(refused("(a|b)*a(a|b){12}").find("over 4000 automaton states"), std::string::npos);
    const std::string long_min = test::error_of([] { Regex::compile("^(a|b)*a(a|b){10}$", 100000); });
    EXPECT_NE(long_min.find("minLength 100000 is too large"), std::string::npos) << long_min;
    const std::string long_refusal = refused((std::string(500, 'a') + "\\1").c_str());
    EXPECT_NE(long_refusal.find("aaa...': backreferences"), std::string::npos) << long_refusal.substr(0, 200);
    EXPECT_LT(long_refusal.size(), 200u);
}

// The formats a schema enforces: examples of each taken whole, near misses refused.
TEST(Regex, FormatsTakeTheirStringsAndRefuseNearMisses) {
    using ojson = nlohmann::ordered_json;
    struct Case {
        const char *format;
        std::vector<const char *> good, bad;
    };
    const std::vector<Case> cases = {
        {"date-time", {"2024-02-29T23:59:59Z", "1999-12-31T00:00:00.123456+05:30"},
         {"2024-02-30T00:00:00Z", "2024-01-01 00:00:00Z", "2024-01-01T24:00:00Z", "2024-01-01T00:00:60Z",
          "2024-01-01T00:00:00"}},
        {"date", {"2024-04-30", "0001-01-01", "0999-12-31"}, {"2024-04-31", "2024-13-01", "24-01-01", "2024-1-01",
                                                           "0000-01-01"}},
        {"time", {"08:30:00Z", "23:59:59.5-01:00"}, {"8:30:00Z", "08:30Z", "08:30:00.1234567Z"}},
        {"duration", {"P1D", "PT1H30M", "P1Y2M3DT4H5M6S", "P2W"}, {"P", "PT", "P1H", "1D", "P1W2D"}},
        {"email", {"ada@example.com", "a.b+c@x-y.org"}, {"@example.com", "ada@", "a..b@x.org", "ada@-x.org"}},
        {"hostname", {"example.com", "a-b.c"}, {"-a.com", "a..b", "a_b.com"}},
        {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "1.2.3", "01.2.3.4", "1.2.3.4.5"}},
        {"ipv6", {"::1", "fe80::1", "2001:db8:0:0:0:0:2:1", "::"}, {":::", "1:2:3:4:5:6:7:8:9", "12345::1"}},
        {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000", "123e4567-e89b"}},
    };
    for (const Case &c : cases) {
        const ojson x = {{"type", "string"}, {"format", c.format}};
        const auto schema =
            JsonSchema::compile(ojson{{"type", "object"}, {"properties", {{"x", x}}}, {"required", {"x"}}});
        auto whole = [&](const std::string &v) {
            SchemaGrammar g(schema);
            return g.feed(ojson{{"x", v}}.dump()) && g.complete();
        };
        for (const char *v : c.good) EXPECT_TRUE(whole(v)) << c.format << " " << v;
        for (const char *v : c.bad) EXPECT_FALSE(whole(v)) << c.format << " " << v;
    }
}

} // namespace
} // namespace zaya
