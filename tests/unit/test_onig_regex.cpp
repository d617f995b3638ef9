// OnigRegex (data/onig_regex.h): the onig crate's find_iter rule for empty matches, which the tokenizers library's
// Split sees (tokenizers' own splits of these texts: a, b | a, b | a, b with "removed"; see
// tools/gen_tokenizer_goldens.py for the patterns that matter), and the process's POSIX regex staying glibc's.
#include "core/error.h"
#include "data/onig_regex.h"

#include <gtest/gtest.h>

#include <regex.h>

using namespace zaya;

namespace {

using Matches = std::vector<std::pair<size_t, size_t>>;

} // namespace

TEST(OnigRegex, EmptyMatchesFollowTheOnigCratesFindIter) {
    const OnigRegex digits("[0-9]*", "test");
    // An empty match right where the previous match ended is skipped, one character on; elsewhere it counts.
    EXPECT_EQ(digits.find_all("ab"), (Matches{{0, 0}, {1, 1}, {2, 2}}));
    EXPECT_EQ(digits.find_all("a1b22"), (Matches{{0, 0}, {1, 2}, {3, 5}}));
    EXPECT_EQ(digits.find_all("12ab"), (Matches{{0, 2}, {3, 3}, {4, 4}}));
    EXPECT_EQ(digits.find_all(""), (Matches{{0, 0}}));
    // Unicode classes and look-ahead, as GPT-2's pattern uses them.
    const OnigRegex gpt2(R"( ?\p{L}+|\s+(?!\S)|\s+)", "test");
    EXPECT_EQ(gpt2.find_all("héllo  wörld"), (Matches{{0, 6}, {6, 7}, {7, 14}}));
}

TEST(OnigRegex, ABadPatternIsNamed) {
    try {
        OnigRegex("(?<x", "tok.json: pre_tokenizer.pattern.Regex");
        FAIL() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("tok.json: pre_tokenizer.pattern.Regex: the regular expression '(?<x' "
                                             "does not compile: "),
                  std::string::npos)
            << e.what();
    }
}

// libonig exports a POSIX API under glibc's names; linked ahead of libc it took over regcomp (gtest's death-test
// matchers deadlocked under ASan, onig's regcomp meeting glibc's regexec). glibc's regex_t records the groups in
// re_nsub, which onig's layout does not hold there.
TEST(OnigRegex, PosixRegexStaysGlibcs) {
    regex_t re;
    ASSERT_EQ(regcomp(&re, "(a)(b+)", REG_EXTENDED), 0);
    ASSERT_EQ(re.re_nsub, 2u);
    regmatch_t m[3];
    ASSERT_EQ(regexec(&re, "xabb", 3, m, 0), 0);
    EXPECT_EQ(m[0].rm_so, 1);
    EXPECT_EQ(m[2].rm_eo, 4);
    regfree(&re);
}
