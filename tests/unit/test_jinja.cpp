// The Jinja subset (src/data/jinja*.cpp) against transformers' own rendering: every snippet of
// tests/golden/jinja/features.json (tools/gen_jinja_goldens.py) renders byte for byte as transformers' environment
// does, and each snippet that fails there fails here. Plus generation spans, error locations and concurrent renders.
#include "core/error.h"
#include "data/jinja.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

using zaya::jinja::Template;
using ojson = nlohmann::ordered_json;

namespace jinja_test {

const ojson &features() {
    static const ojson j = [] {
        std::ifstream f(zaya::test::golden_dir("jinja") + "/features.json");
        EXPECT_TRUE(f.good());
        return ojson::parse(f);
    }();
    return j;
}

std::string render(const std::string &source, const ojson &context = ojson::object()) {
    return Template(source, "t.jinja").render(context);
}

} // namespace jinja_test

TEST(Jinja, GoldenFeatures) {
    const ojson &cases = jinja_test::features()["cases"];
    ASSERT_GT(cases.size(), 100u);
    int errors = 0;
    for (const auto &c : cases) {
        const std::string name = c["name"], source = c["template"];
        SCOPED_TRACE(name + ": " + source);
        std::string out, message;
        try {
            out = Template(source, "t.jinja").render(c["context"]);
        } catch (const zaya::Error &e) {
            message = e.what();
        }
        if (c.value("error", false)) {
            ++errors;
            EXPECT_FALSE(message.empty()) << "rendered " << out;
            EXPECT_TRUE(message.starts_with("t.jinja")) << message;
        } else {
            EXPECT_EQ(message, "");
            EXPECT_EQ(out, c["output"].get<std::string>());
        }
    }
    EXPECT_GT(errors, 10);
}

TEST(Jinja, GenerationSpans) {
    const Template t("{% for m in messages %}<{{ m.role }}>{% if m.role == 'assistant' %}{% generation %}"
                     "{{ m.content }}!{% endgeneration %}{% else %}{{ m.content }}{% endif %}\n{% endfor %}",
                     "t.jinja");
    const ojson ctx = {{"messages",
                        {{{"role", "user"}, {"content", "hé"}},
                         {{"role", "assistant"}, {"content", "ça va"}},
                         {{"role", "user"}, {"content", "x"}},
                         {{"role", "assistant"}, {"content", "y"}}}}};
    std::vector<std::pair<size_t, size_t>> spans;
    const std::string out = t.render(ctx, &spans);
    ASSERT_EQ(spans.size(), 2u);
    EXPECT_EQ(out.substr(spans[0].first, spans[0].second - spans[0].first), "ça va!");
    EXPECT_EQ(out.substr(spans[1].first, spans[1].second - spans[1].first), "y!");
    // Without a sink the same text comes out.
    EXPECT_EQ(t.render(ctx), out);
}

TEST(Jinja, SyntaxErrorsNameLineAndColumn) {
    using zaya::test::error_of;
    EXPECT_EQ(error_of([] { Template("a\n{% if x %}\n  {% endfor %}", "chat_template.jinja"); }),
              "chat_template.jinja:3:6: unexpected 'endfor' (expected 'elif', 'else', 'endif')");
    EXPECT_EQ(error_of([] { Template("{% for x in y %}", "c.jinja"); }),
              "c.jinja:1:17: unexpected end of template, expected 'endfor' or 'else'");
    EXPECT_EQ(error_of([] { Template("\n\n  {{ x|nope }}", "c.jinja"); }), "c.jinja:3:8: No filter named 'nope'.");
    EXPECT_EQ(error_of([] { Template("{{ 1 + }}", "c.jinja"); }), "c.jinja:1:8: unexpected 'end of print statement'");
    EXPECT_EQ(error_of([] { Template("{% frob %}", "c.jinja"); }), "c.jinja:1:4: unknown tag 'frob'");
}

TEST(Jinja, RuntimeErrorsNameLine) {
    using zaya::test::error_of;
    const ojson ctx = {{"messages", ojson::array({{{"role", "user"}}})}};
    EXPECT_EQ(error_of([&] {
                  Template("{% for m in messages %}\n{% if m.role != 'system' %}\n"
                           "{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% endfor %}",
                           "chat_template.jinja")
                      .render(ctx);
              }),
              "chat_template.jinja: raise_exception: Conversation roles must alternate");
    EXPECT_EQ(error_of([] { jinja_test::render("line\n\n{{ nope.attr }}"); }), "t.jinja:3: 'nope' is undefined");
    EXPECT_EQ(error_of([] { jinja_test::render("{% set l = [] %}\n{{ l.append(1) }}"); }),
              "t.jinja:2: access to attribute 'append' is unsafe (the sandbox forbids mutating methods)");
    EXPECT_NE(error_of([] { jinja_test::render("{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}"); })
                  .find("recursion deeper"),
              std::string::npos);
}

TEST(Jinja, HostileTemplatesFailCleanly) {
    using zaya::test::error_of;
    // Nesting past the parser's bound, a namespace that contains itself, a macro that never stops: errors, not
    // stack overflows.
    std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
    EXPECT_NE(error_of([&] { Template(deep, "t.jinja"); }).find("nested too deeply"), std::string::npos);
    std::string nots = "{{ " + std::string(0, ' ');
    for (int k = 0; k < 5000; ++k) nots += "not ";
    nots += "1 }}";
    EXPECT_NE(error_of([&] { Template(nots, "t.jinja"); }).find("nested too deeply"), std::string::npos);
    EXPECT_NE(error_of([] { jinja_test::render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"); })
                  .find("recursion depth"),
              std::string::npos);
    EXPECT_NE(error_of([] { jinja_test::render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns|tojson }}"); })
                  .find("t.jinja:1:"),
              std::string::npos);
    EXPECT_NE(error_of([] { jinja_test::render("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}"); })
                  .find("recursion deeper than"),
              std::string::npos);
}

TEST(Jinja, StrftimeNowUsesGivenTime) {
    std::tm tm{};
    tm.tm_year = 2024 - 1900;
    tm.tm_mon = 6;
    tm.tm_mday = 26;
    tm.tm_hour = 12;
    tm.tm_isdst = -1;
    const std::time_t now = std::mktime(&tm);
    EXPECT_EQ(Template("{{ strftime_now('%d %b %Y') }}", "t.jinja").render(ojson::object(), nullptr, now),
              "26 Jul 2024");
}

TEST(Jinja, ConcurrentRendersOfOneTemplate) {
    // render() is const and keeps its state per call, so copies and threads share the parsed template.
    const Template t("{% set ns = namespace(n=0) %}{% for x in xs %}{% set ns.n = ns.n + x %}{% endfor %}{{ ns.n }}",
                     "t.jinja");
    std::vector<std::thread> threads;
    std::vector<std::string> outs(8);
    for (int k = 0; k < 8; ++k)
        threads.emplace_back([&, k] {
            const Template copy = t;
            ojson xs = ojson::array();
            for (int m = 0; m <= k; ++m) xs.push_back(m);
            for (int rep = 0; rep < 50; ++rep) outs[size_t(k)] = copy.render({{"xs", xs}});
        });
    for (auto &th : threads) th.join();
    for (int k = 0; k < 8; ++k) EXPECT_EQ(outs[size_t(k)], std::to_string(k * (k + 1) / 2));
}
