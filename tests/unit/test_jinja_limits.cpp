// The renderer's bounds on hostile or runaway templates (src/data/jinja*.cpp): a step budget, a size bound on the
// output and on every string or list built, and numbers or widths past 64 bits. Each fails with a zaya::Error that
// names the template, never a hang, a crash or an exhausted memory.
#include "core/error.h"
#include "data/jinja.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

using zaya::jinja::Template;
using zaya::test::error_of;

namespace {

std::string render(const std::string &source) { return Template(source, "t.jinja").render(nlohmann::json::object()); }
bool fails_with(const std::string &source, const std::string &text) {
    const std::string e = error_of([&] { render(source); });
    return e.find(text) != std::string::npos && e.starts_with("t.jinja:");
}

} // namespace

TEST(JinjaLimits, RunawayLoopsRunOutOfSteps) {
    EXPECT_TRUE(fails_with("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                           "the template ran past 1000000 steps"));
}

TEST(JinjaLimits, StringsListsAndOutputAreBounded) {
    EXPECT_TRUE(fails_with("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                           "{% endfor %}",
                           "a string passed 67108864 bytes"));
    EXPECT_TRUE(fails_with("{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}"
                           "{% endfor %}",
                           "passed 67108864 bytes"));
    EXPECT_TRUE(fails_with("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}"
                           "{% endfor %}",
                           "a list passed"));
    EXPECT_TRUE(fails_with("{{ 'ab' * 1000000000000 }}", "passed 67108864 bytes"));
    EXPECT_TRUE(fails_with("{{ [1, 2] * 100000000 }}", "passed 67108864 bytes"));
    EXPECT_TRUE(fails_with("{% set s = 'x' * 10000 %}{% for i in range(10000) %}{{ s }}{% endfor %}",
                           "the output passed 67108864 bytes"));
    EXPECT_TRUE(fails_with("{{ ('x' * 10000000)|replace('', 'yyyyyyyy') }}", "a string passed"));
    EXPECT_TRUE(fails_with("{{ 'a'|center(100000000000) }} ", "a string passed"));
    EXPECT_TRUE(fails_with("{{ 'a'.ljust(100000000000, 'xy') }} ", "a string passed"));
    EXPECT_TRUE(fails_with("{{ 'a\nb'|indent(100000000000) }} ", "a string passed"));
    EXPECT_TRUE(fails_with("{{ [1]|tojson(indent=100000000000) }} ", "a string passed"));
    // Cheap ones stay cheap: an empty string repeated any number of times.
    EXPECT_EQ(render("{{ '' * 1000000000000000000 }}|{{ 'ab' * -3 }}|{{ ([1] * 0)|length }}"), "||0");
}

TEST(JinjaLimits, HugeNumbersAndWidths) {
    EXPECT_TRUE(fails_with("{{ '%99999999999999999999999s' % 'a' }}", "a string passed"));
    EXPECT_TRUE(fails_with("{{ '{:99999999999999999999}'.format(1) }}", "a string passed"));
    EXPECT_TRUE(fails_with("{{ '{99999999999999999999}'.format(1) }}", "out of range"));
    EXPECT_EQ(render("{{ 1e999 }} {{ 1e-999 }}"), "inf 0.0");
    EXPECT_NE(error_of([] { Template("{{ 0xffffffffffffffffffff }}", "t.jinja"); }).find("too large"),
              std::string::npos);
    EXPECT_EQ(render("{{ range(9223372036854775806, 9223372036854775807, 5)|list }}"), "[9223372036854775806]");
    EXPECT_EQ(render("{{ range(-9223372036854775807, -9223372036854775807 - 1, -7)|list }}"), "[-9223372036854775807]");
}

TEST(JinjaLimits, NamespacesCannotBuildDeepValues) {
    // Each iteration wraps the list once more: past the bound it fails, instead of a stack overflow when the value
    // is destroyed.
    EXPECT_TRUE(fails_with("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}"
                           "{% endfor %}",
                           "nests lists and dicts more than 512 deep"));
    EXPECT_TRUE(fails_with("{% set ns = namespace(d={}) %}{% for i in range(100000) %}{% set ns.d = {'a': [ns.d]} %}"
                           "{% endfor %}",
                           "more than 512 deep"));
    EXPECT_EQ(render("{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = [ns.l] %}{% endfor %}"
                     "{{ ns.l|length }}"),
              "1");
}

TEST(JinjaLimits, FilterArgumentsAtTheIntegerBounds) {
    EXPECT_EQ(render("{{ 'abc'|truncate(9223372036854775807) }}"), "abc");
    EXPECT_TRUE(fails_with("{{ 'abcdefgh'|truncate(4, true, '', -9223372036854775807 - 1) }}",
                           "expected leeway >= 0, got -9223372036854775808"));
    EXPECT_TRUE(fails_with("{{ [1]|batch(100000000000, 0)|list }}", "a list passed"));
}

TEST(JinjaLimits, IntegerEdgesAreErrorsNotUndefinedBehaviour) {
    EXPECT_TRUE(fails_with("{{ -(-9223372036854775807 - 1) }}", "integer overflow"));
    EXPECT_TRUE(fails_with("{{ (-9223372036854775807 - 1) // -1 }}", "integer overflow"));
    EXPECT_EQ(render("{{ 7 // -1 }} {{ -7 % -1 }} {{ (-9223372036854775807 - 1) % -1 }}"), "-7 0 0");
    EXPECT_EQ(render("{{ 'abcdef'[1::9223372036854775807] }} {{ [1, 2, 3][::-9223372036854775807] }}"), "b [3]");
}

TEST(JinjaLimits, FloatsPast64BitIntegers) {
    EXPECT_TRUE(fails_with("{{ 1e300|int }}", "integer overflow"));
    EXPECT_TRUE(fails_with("{{ '-1e19'|int }}", "integer overflow"));
    EXPECT_TRUE(fails_with("{{ '%d' % 1e300 }}", "integer overflow"));
    EXPECT_EQ(render("{{ -9.2e18|int }} {{ '%d|%i' % (2.9, -3.7) }}"), "-9200000000000000000 2|-3");
}

TEST(JinjaLimits, WideIndentOfADeepValue) {
    // Appended, not "{{ " + std::string(...): GCC 12's -Warray-bounds misreads that sum in some unity groupings.
    std::string deep = "{{ ";
    deep.append(100, '[').append(100, ']').append("|tojson(indent=10000000) }}");
    EXPECT_TRUE(fails_with(deep, "a string passed"));
}

TEST(JinjaLimits, SliceInATupleSubscript) {
    // Found by fuzz_jinja: the slice had no object to evaluate (a null dereference). jinja2 fails at render time too.
    EXPECT_TRUE(fails_with("{{ 0[3, 1, :] }}", "not part of a tuple subscript"));
    EXPECT_TRUE(fails_with("{{ [1, 2][:, 0] }}", "not part of a tuple subscript"));
    EXPECT_EQ(render("{% if false %}{{ x[1, :] }}{% endif %}ok"), "ok");
}

TEST(JinjaLimits, StrayBytesInATag) {
    // Found by fuzz_jinja: a lone continuation byte (0x85, NEL's second byte) counted as a two-byte space and the
    // lexer read past the end of the template.
    const std::string src = "{%\x85\xdb\x85\x85\x85\x85\x0b \x85";
    EXPECT_FALSE(error_of([&] { Template(src, "t.jinja"); }).empty());
    EXPECT_EQ(render("{%\xc2\x85 if true \xc2\x85%}x{% endif %}"), "x"); // a whole NEL is whitespace
}
