// Tool calls in a model's own format (infer/tool_formats.h): zaya_xml, qwen3_coder and hermes blocks read as vLLM's
// parsers read them (values converted by their parameters' types), words before, between and after them, blocks that
// hold no call left as words, blocks cut short by the end of the text, and the same words and calls however the text
// is cut into pieces.
#include "infer/tool_formats.h"

#include "core/utf8.h"
#include "infer/tool_calls.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>

namespace zaya {
namespace {

using nlohmann::ordered_json;

std::vector<ToolSpec> tf_tools() {
    const ordered_json weather = ordered_json::parse(R"({"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "temp": {"type": "number"},
        "metric": {"type": "boolean"}, "opts": {"type": "object"}, "tags": {"type": "array"},
        "maybe": {"type": ["null", "integer"]}, "odd": {"type": "weird"}, "plain": {"description": "no type"},
        "count": {"type": "Int64"}, "ratio": {"type": "float"}}})");
    const ordered_json search =
        ordered_json::parse(R"({"type": "object", "properties": {"query": {"type": "string"},
                                "limit": {"type": "integer"}}})");
    return {{"get_weather", "The weather", weather}, {"search", "", search}, {"now", "", {{"type", "object"}}}};
}

TaggedAnswer tf_read(ToolFormat f, std::string_view text) { return read_tagged_answer(f, tf_tools(), text); }

// An XML block of one call: the parameters (name, value) in order, each value between newlines.
std::string tf_xml(ToolFormat f, const std::string &name, const std::vector<std::pair<std::string, std::string>> &ps) {
    const auto [open, close] = tool_call_tags(f);
    std::string s = std::string(open) + "\n<function=" + name + ">\n";
    for (const auto &[key, value] : ps) s += "<parameter=" + key + ">\n" + value + "\n</parameter>\n";
    return s + "</function>\n" + std::string(close);
}

// The arguments of a call with one parameter of get_weather, as read.
std::string tf_converted(const std::string &key, const std::string &value, const std::string &tool = "get_weather") {
    const TaggedAnswer a = tf_read(ToolFormat::ZayaXml, tf_xml(ToolFormat::ZayaXml, tool, {{key, value}}));
    EXPECT_EQ(a.calls.size(), 1u);
    return a.calls.empty() ? "" : a.calls[0].arguments;
}

void tf_expect_call(const AnswerPiece::Call &c, size_t index, const std::string &name, const std::string &arguments) {
    EXPECT_EQ(c.index, index);
    EXPECT_EQ(c.name, name);
    EXPECT_EQ(c.arguments, arguments);
}

// The text fed in pieces cut at `cuts` (ascending): the pieces' words and calls merged. Each piece's words are whole
// characters when the text is valid UTF-8.
TaggedAnswer tf_streamed(ToolFormat f, std::string_view text, const std::vector<size_t> &cuts) {
    TaggedCallReader reader(f, tf_tools());
    TaggedAnswer a;
    const auto add = [&](const AnswerPiece &p) {
        EXPECT_TRUE(!is_utf8(text) || is_utf8(p.words)) << "a piece's words: " << p.words;
        a.content += p.words;
        for (const AnswerPiece::Call &c : p.calls) {
            EXPECT_TRUE(!is_utf8(text) || is_utf8(c.arguments)) << "a piece's arguments: " << c.arguments;
            if (!c.name.empty()) { // a call begins: the next index, its arguments so far
                EXPECT_EQ(c.index, a.calls.size());
                a.calls.push_back(c);
            } else { // the call under way goes on (only the last one begun)
                ASSERT_FALSE(a.calls.empty());
                EXPECT_EQ(c.index, a.calls.size() - 1);
                a.calls.back().arguments += c.arguments;
            }
        }
    };
    size_t from = 0;
    for (size_t cut : cuts) {
        add(reader.feed(text.substr(from, cut - from)));
        from = cut;
    }
    add(reader.feed(text.substr(from)));
    add(reader.finish());
    EXPECT_EQ(reader.calls(), !a.calls.empty());
    return a;
}

void tf_expect_same(const TaggedAnswer &got, const TaggedAnswer &want, const std::string &what) {
    EXPECT_EQ(got.content, want.content) << what;
    ASSERT_EQ(got.calls.size(), want.calls.size()) << what;
    for (size_t k = 0; k < want.calls.size(); ++k)
        tf_expect_call(got.calls[k], k, want.calls[k].name, want.calls[k].arguments);
}

TEST(ToolFormats, NamesTagsAndTemplates) {
    for (ToolFormat f : {ToolFormat::Json, ToolFormat::ZayaXml, ToolFormat::Qwen3Coder, ToolFormat::Hermes})
        EXPECT_EQ(tool_format_named(tool_format_name(f)), f);
    EXPECT_STREQ(tool_format_name(ToolFormat::ZayaXml), "zaya_xml");
    EXPECT_STREQ(tool_format_name(ToolFormat::Qwen3Coder), "qwen3_coder");
    EXPECT_STREQ(tool_format_name(ToolFormat::Hermes), "hermes");
    EXPECT_STREQ(tool_format_name(ToolFormat::Json), "json");
    EXPECT_EQ(tool_format_named("qwen3_xml"), std::nullopt);
    EXPECT_EQ(tool_format_named(""), std::nullopt);
    EXPECT_EQ(tool_call_tags(ToolFormat::ZayaXml).first, "<zyphra_tool_call>");
    EXPECT_EQ(tool_call_tags(ToolFormat::ZayaXml).second, "</zyphra_tool_call>");
    EXPECT_EQ(tool_call_tags(ToolFormat::Qwen3Coder).first, "<tool_call>");
    EXPECT_EQ(tool_call_tags(ToolFormat::Hermes).second, "</tool_call>");
    EXPECT_EQ(tool_format_of_template("{{ '<zyphra_tool_call>\\n<function=' + name }}"), ToolFormat::ZayaXml);
    EXPECT_EQ(tool_format_of_template("<tool_call>\n<function={{ tool_call.name }}>"), ToolFormat::Qwen3Coder);
    EXPECT_EQ(tool_format_of_template("{{- '<tool_call>\\n{\"name\": \"' }}"), ToolFormat::Hermes);
    EXPECT_EQ(tool_format_of_template("{{ messages }}<function=x>"), std::nullopt);
    EXPECT_EQ(tool_format_of_template(""), std::nullopt);
    // GLM-4.5's <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>: none of these.
    EXPECT_EQ(tool_format_of_template("{{ '<tool_call>' + tc.name }}<arg_key>{{ k }}</arg_key>"), std::nullopt);
}

TEST(ToolFormats, ZayaXmlCalls) {
    const std::string block = "<zyphra_tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                              "<parameter=days>\n3\n</parameter>\n</function>\n</zyphra_tool_call>";
    TaggedAnswer a = tf_read(ToolFormat::ZayaXml, block);
    ASSERT_EQ(a.calls.size(), 1u);
    tf_expect_call(a.calls[0], 0, "get_weather", R"({"city":"Paris","days":3})");
    EXPECT_EQ(a.content, "");

    // Parallel calls after words; the layout between them dropped. No parameters: {}.
    a = tf_read(ToolFormat::ZayaXml, "Let me look.\n\n" + block + "\n" +
                                         tf_xml(ToolFormat::ZayaXml, "search", {{"query", "rain"}, {"limit", "5"}}) +
                                         "\n<zyphra_tool_call>\n<function=now>\n</function>\n</zyphra_tool_call>\n");
    ASSERT_EQ(a.calls.size(), 3u);
    tf_expect_call(a.calls[0], 0, "get_weather", R"({"city":"Paris","days":3})");
    tf_expect_call(a.calls[1], 1, "search", R"({"query":"rain","limit":5})");
    tf_expect_call(a.calls[2], 2, "now", "{}");
    EXPECT_EQ(a.content, "Let me look.");

    // Qwen3-Coder's wrapper is not ZAYA's: words there.
    a = tf_read(ToolFormat::ZayaXml, "<tool_call>\n<function=now>\n</function>\n</tool_call>");
    EXPECT_TRUE(a.calls.empty());
    EXPECT_EQ(a.content, "<tool_call>\n<function=now>\n</function>\n</tool_call>");
}

TEST(ToolFormats, Qwen3CoderCalls) {
    const std::string text = "I'll check both.\n" + tf_xml(ToolFormat::Qwen3Coder, "get_weather", {{"city", "Oslo"}}) +
                             "\n" + tf_xml(ToolFormat::Qwen3Coder, "get_weather", {{"city", "Rome"}, {"days", "2"}});
    const TaggedAnswer a = tf_read(ToolFormat::Qwen3Coder, text);
    ASSERT_EQ(a.calls.size(), 2u);
    tf_expect_call(a.calls[0], 0, "get_weather", R"({"city":"Oslo"})");
    tf_expect_call(a.calls[1], 1, "get_weather", R"({"city":"Rome","days":2})");
    EXPECT_EQ(a.content, "I'll check both.");
    // ZAYA's wrapper is words in Qwen3-Coder's format.
    const std::string zaya = tf_xml(ToolFormat::ZayaXml, "now", {});
    EXPECT_TRUE(tf_read(ToolFormat::Qwen3Coder, zaya).calls.empty());
    EXPECT_EQ(tf_read(ToolFormat::Qwen3Coder, zaya).content, zaya);
    // Two functions in one block are two calls (as vLLM reads them).
    const TaggedAnswer two = tf_read(ToolFormat::Qwen3Coder, "<tool_call>\n<function=now>\n</function>\n"
                                                             "<function=search>\n<parameter=query>\nx\n</parameter>\n"
                                                             "</function>\n</tool_call>");
    ASSERT_EQ(two.calls.size(), 2u);
    tf_expect_call(two.calls[0], 0, "now", "{}");
    tf_expect_call(two.calls[1], 1, "search", R"({"query":"x"})");
}

TEST(ToolFormats, ConvertsValuesByTheirTypes) {
    EXPECT_EQ(tf_converted("city", "42"), R"({"city":"42"})");
    EXPECT_EQ(tf_converted("days", "42"), R"({"days":42})");
    EXPECT_EQ(tf_converted("days", " -7 "), R"({"days":-7})");
    EXPECT_EQ(tf_converted("days", "+7"), R"({"days":7})");
    EXPECT_EQ(tf_converted("days", "3.0"), R"({"days":"3.0"})"); // not an integer's text
    EXPECT_EQ(tf_converted("days", "three"), R"({"days":"three"})");
    EXPECT_EQ(tf_converted("days", "+-3"), R"({"days":"+-3"})");
    EXPECT_EQ(tf_converted("days", "18446744073709551615"), R"({"days":18446744073709551615})");
    EXPECT_EQ(tf_converted("count", "12"), R"({"count":12})"); // "Int64": a type starting with "int"
    EXPECT_EQ(tf_converted("temp", "2.5"), R"({"temp":2.5})");
    EXPECT_EQ(tf_converted("temp", "3.0"), R"({"temp":3})"); // integral: an integer
    EXPECT_EQ(tf_converted("temp", "-1e3"), R"({"temp":-1000})");
    EXPECT_EQ(tf_converted("temp", ".5"), R"({"temp":0.5})");
    EXPECT_EQ(tf_converted("temp", "warm"), R"({"temp":"warm"})");
    EXPECT_EQ(tf_converted("temp", "1e400"), R"({"temp":"1e400"})"); // infinite
    EXPECT_EQ(tf_converted("temp", "nan"), R"({"temp":"nan"})");
    EXPECT_EQ(tf_converted("ratio", "0.25"), R"({"ratio":0.25})");
    EXPECT_EQ(tf_converted("metric", "True"), R"({"metric":true})");
    EXPECT_EQ(tf_converted("metric", "false"), R"({"metric":false})");
    EXPECT_EQ(tf_converted("metric", "yes"), R"({"metric":false})");
    EXPECT_EQ(tf_converted("opts", R"({"a": [1, 2], "b": {"c": null}})"), R"({"opts":{"a":[1,2],"b":{"c":null}}})");
    EXPECT_EQ(tf_converted("opts", "{not json"), R"({"opts":"{not json"})");
    EXPECT_EQ(tf_converted("tags", R"(["x", 2])"), R"({"tags":["x",2]})");
    EXPECT_EQ(tf_converted("tags", std::string(300, '[') + std::string(300, ']')), // too deep: the text
              R"({"tags":")" + std::string(300, '[') + std::string(300, ']') + R"("})");
    EXPECT_EQ(tf_converted("maybe", "8"), R"({"maybe":8})"); // ["null", "integer"]: integer
    EXPECT_EQ(tf_converted("city", "NULL"), R"({"city":null})"); // null, whatever the type
    EXPECT_EQ(tf_converted("days", "null"), R"({"days":null})");
    EXPECT_EQ(tf_converted("odd", "5"), R"({"odd":"5"})");       // an unknown type
    EXPECT_EQ(tf_converted("plain", "5"), R"({"plain":"5"})");   // no type
    EXPECT_EQ(tf_converted("unknown", "5"), R"({"unknown":"5"})"); // not a parameter
    EXPECT_EQ(tf_converted("days", "5", "no_such_tool"), R"({"days":"5"})");
    EXPECT_EQ(tf_converted("unknown", "Null", "no_such_tool"), R"({"unknown":null})");
}

TEST(ToolFormats, ValuesAreAnyTextUpToTheirClosingTag) {
    // One newline is removed at each end, no more; "<", ">" and tags of other names are the value's.
    const std::string code = "if a < b and c > d:\n    print(\"<b>\" + '</param>')\n";
    const std::string multibyte = "Zürich → 東京 🙂";
    TaggedAnswer a = tf_read(ToolFormat::ZayaXml, tf_xml(ToolFormat::ZayaXml, "search",
                                                         {{"query", code}, {"limit", "\n2\n"}, {"city", multibyte}}));
    ASSERT_EQ(a.calls.size(), 1u);
    const ordered_json want = {{"query", code}, {"limit", 2}, {"city", multibyte}}; // (int() allows whitespace)
    EXPECT_EQ(a.calls[0].arguments, want.dump());
    EXPECT_EQ(ordered_json::parse(a.calls[0].arguments)["city"], multibyte);
    EXPECT_NE(a.calls[0].arguments.find("東京"), std::string::npos); // UTF-8 kept, not \u escapes

    // Without the layout's newlines; a value ended by the next parameter or the function's end (tolerated).
    a = tf_read(ToolFormat::ZayaXml, "<zyphra_tool_call><function=get_weather><parameter=city>Lima<parameter=days>4"
                                     "</function></zyphra_tool_call>");
    ASSERT_EQ(a.calls.size(), 1u);
    EXPECT_EQ(a.calls[0].arguments, R"({"city":"Lima","days":4})");
    // An empty value, and a value of newlines only.
    EXPECT_EQ(tf_converted("city", ""), R"({"city":""})");
    a = tf_read(ToolFormat::ZayaXml,
                "<zyphra_tool_call>\n<function=search>\n<parameter=query>\n</parameter>\n<parameter=limit>\n\n\n"
                "</parameter>\n</function>\n</zyphra_tool_call>");
    ASSERT_EQ(a.calls.size(), 1u);
    EXPECT_EQ(a.calls[0].arguments, R"({"query":"","limit":"\n"})");
}

TEST(ToolFormats, WordsBeforeBetweenAndAfterCalls) {
    const std::string call = tf_xml(ToolFormat::Qwen3Coder, "now", {});
    TaggedAnswer a = tf_read(ToolFormat::Qwen3Coder, "  Hi there\n" + call + "\n\nAnd also:\n" + call + "\nDone.\n\n");
    ASSERT_EQ(a.calls.size(), 2u);
    EXPECT_EQ(a.content, "  Hi there"); // the words before the calls only
    // Only whitespace between and after: nothing.
    a = tf_read(ToolFormat::Qwen3Coder, "\n" + call + " \n\t" + call + "\n");
    EXPECT_EQ(a.calls.size(), 2u);
    EXPECT_EQ(a.content, "");
    // No calls: the text as written, whitespace at its end too.
    a = tf_read(ToolFormat::Qwen3Coder, "  Just words.\n\n");
    EXPECT_TRUE(a.calls.empty());
    EXPECT_EQ(a.content, "  Just words.\n\n");
}

TEST(ToolFormats, TextThatBeginsLikeATagIsWords) {
    for (const std::string text : {"a < b, and <tools> or <tool_calls> or </tool_call> <tool_call", "<tool", "x <",
                                   "<tool_call", "<<tool_call>\n{\"name\": \"now\"}\n</tool_call>"}) {
        const TaggedAnswer a = tf_read(ToolFormat::Hermes, text);
        if (text.rfind("<<", 0) == 0) { // a tag after a "<" is still a tag
            ASSERT_EQ(a.calls.size(), 1u);
            tf_expect_call(a.calls[0], 0, "now", "{}");
            EXPECT_EQ(a.content, "<");
        } else {
            EXPECT_TRUE(a.calls.empty()) << text;
            EXPECT_EQ(a.content, text);
        }
    }
    // Streamed: a part of the tag held until the text goes on otherwise.
    TaggedCallReader r(ToolFormat::Hermes, tf_tools());
    EXPECT_EQ(r.feed("Hello wor").words, "Hello wor");
    EXPECT_EQ(r.feed("ld <tool").words, "ld"); // " <tool" may begin a call
    EXPECT_EQ(r.feed("s> ok ").words, " <tools> ok");
    EXPECT_EQ(r.feed("a <").words, " a");
    EXPECT_EQ(r.feed(" b").words, " < b");
    EXPECT_EQ(r.finish().words, "");
    EXPECT_FALSE(r.calls());
}

// XML calls stream as vLLM streams them: a call begins once its name is written, its arguments follow a parameter
// at a time (each once its value is closed), and '}' at the function's end.
TEST(ToolFormats, StreamedCallsBeginAtTheirNameAndGrowAParameterAtATime) {
    TaggedCallReader r(ToolFormat::ZayaXml, tf_tools());
    AnswerPiece p = r.feed("Checking.\n<zyphra_tool_call>\n<function=get_wea");
    EXPECT_EQ(p.words, "Checking.");
    EXPECT_TRUE(p.calls.empty()); // (its name not ended)
    EXPECT_FALSE(r.calls());
    p = r.feed("ther>\n<parameter=city>\nPar");
    ASSERT_EQ(p.calls.size(), 1u);
    tf_expect_call(p.calls[0], 0, "get_weather", ""); // begun: id, type, name
    EXPECT_TRUE(r.calls());
    p = r.feed("is\n</parameter>\n<parameter=days>\n3\n</para");
    ASSERT_EQ(p.calls.size(), 1u);
    tf_expect_call(p.calls[0], 0, "", R"({"city":"Paris")");
    p = r.feed("meter>\n</function>\n</zyphra_tool_");
    ASSERT_EQ(p.calls.size(), 1u);
    tf_expect_call(p.calls[0], 0, "", R"(,"days":3})");
    p = r.feed("call>\n<zyphra_tool_call>\n<function=now>\n</function>\n</zyphra_tool_call>\nBye");
    EXPECT_EQ(p.words, ""); // (after a call: not the answer's words)
    ASSERT_EQ(p.calls.size(), 1u);
    tf_expect_call(p.calls[0], 1, "now", "{}"); // begun and ended in one piece: one entry
    p = r.finish();
    EXPECT_EQ(p.words, "");
    EXPECT_TRUE(p.calls.empty());

    TaggedCallReader h(ToolFormat::Hermes, tf_tools());
    EXPECT_TRUE(h.feed("<tool_call>\n{\"name\": \"now\", \"argu").calls.empty());
    p = h.feed("ments\": {}}\n</tool_call>");
    ASSERT_EQ(p.calls.size(), 1u);
    tf_expect_call(p.calls[0], 0, "now", "{}");
}

// Hermes calls in their usual form stream too: the call begins once {"name": ..., "arguments": { is written, its
// arguments follow as written (strings byte for byte, no whitespace between tokens), the object's close ends them;
// a part of the closing tag or a character begun waits.
TEST(ToolFormats, HermesCallsStreamTheirArguments) {
    TaggedCallReader r(ToolFormat::Hermes, tf_tools());
    AnswerPiece p = r.feed("Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\"");
    EXPECT_EQ(p.words, "Sure.");
    EXPECT_TRUE(p.calls.empty());
    p = r.feed(": {\"city\": \"Z\xc3");
    ASSERT_EQ(p.calls.size(), 1u);
    tf_expect_call(p.calls[0], 0, "get_weather", R"({"city":"Z)"); // (the character begun waits)
    p = r.feed("\xbcrich \\\" x\", \n \"days\": [1, 2]</tool_ca");
    ASSERT_EQ(p.calls.size(), 1u);
    tf_expect_call(p.calls[0], 0, "", "\xc3\xbcrich \\\" x\",\"days\":[1,2]");
    p = r.feed("x}}\n</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": {}}");
    ASSERT_EQ(p.calls.size(), 2u);
    tf_expect_call(p.calls[0], 0, "", "</tool_cax}"); // (not the tag: the object's text)
    tf_expect_call(p.calls[1], 1, "now", "{}");
    p = r.finish();
    EXPECT_TRUE(p.calls.empty());
    EXPECT_EQ(p.words, "");
    // A raw newline or tab inside a string (code a model writes) is escaped: the arguments stay JSON.
    TaggedAnswer a =
        tf_read(ToolFormat::Hermes, "<tool_call>{\"name\": \"run\", \"arguments\": {\"code\": \"a\n\tb\"}}");
    ASSERT_EQ(a.calls.size(), 1u);
    tf_expect_call(a.calls[0], 0, "run", R"({"code":"a\u000a\u0009b"})");
    // Cut short inside the arguments: they end where the text does (less a part of the tag).
    a = tf_read(ToolFormat::Hermes, "<tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"ab</to");
    ASSERT_EQ(a.calls.size(), 1u);
    tf_expect_call(a.calls[0], 0, "search", R"({"q":"ab)");
    // A head longer than kHermesHeadMax (4 KB of whitespace) is read whole at the block's close, as other forms are.
    a = tf_read(ToolFormat::Hermes, "<tool_call>{" + std::string(5000, ' ') + R"("name": "now", "arguments": {"a": 1}})"
                                    "</tool_call>");
    ASSERT_EQ(a.calls.size(), 1u);
    tf_expect_call(a.calls[0], 0, "now", R"({"a":1})");
}

TEST(ToolFormats, StreamedWordsAreWholeCharacters) {
    TaggedCallReader r(ToolFormat::Hermes, tf_tools());
    EXPECT_EQ(r.feed("caf\xc3").words, "caf");
    EXPECT_EQ(r.feed("\xa9 \xf0\x9f").words, "\xc3\xa9");
    EXPECT_EQ(r.feed("\x99").words, "");
    EXPECT_EQ(r.feed("\x82!").words, " \xf0\x9f\x99\x82!");
    EXPECT_EQ(r.finish().words, "");
}

TEST(ToolFormats, HermesCalls) {
    TaggedAnswer a = tf_read(ToolFormat::Hermes,
                             "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"東京\", "
                             "\"days\": 3}}\n</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": "
                             "\"{\\\"query\\\": \\\"caf\\\\u00e9\\\"}\"}\n</tool_call>\n<tool_call>{\"name\": \"now\"}"
                             "</tool_call>");
    ASSERT_EQ(a.calls.size(), 3u);
    tf_expect_call(a.calls[0], 0, "get_weather", R"({"city":"東京","days":3})"); // as written: no conversion
    tf_expect_call(a.calls[1], 1, "search", R"({"query":"café"})");           // arguments as a JSON text
    tf_expect_call(a.calls[2], 2, "now", "{}");                               // no arguments
    EXPECT_EQ(a.content, "Sure.");
}

TEST(ToolFormats, HermesBlocksThatAreNotCallsAreWords) {
    for (const std::string body : {"{not json}", R"({"arguments": {}})", R"({"name": 3, "arguments": {}})",
                                   R"({"name": "", "arguments": {}})", R"({"name": "now", "arguments": [1]})",
                                   R"({"name": "now", "arguments": "[1]"})", R"(["now"])", ""}) {
        const std::string block = "<tool_call>\n" + body + "\n</tool_call>";
        const TaggedAnswer a = tf_read(ToolFormat::Hermes, "Words.\n" + block + "\nMore.");
        EXPECT_TRUE(a.calls.empty()) << body;
        EXPECT_EQ(a.content, "Words.\n" + block + "\nMore.");
    }
    // A block of words between calls: the calls keep their indices.
    const TaggedAnswer a = tf_read(ToolFormat::Hermes, "<tool_call>{\"name\": \"now\"}</tool_call>\n<tool_call>oops"
                                                       "</tool_call>\n<tool_call>{\"name\": \"now\"}</tool_call>");
    ASSERT_EQ(a.calls.size(), 2u);
    EXPECT_EQ(a.calls[1].index, 1u);
    EXPECT_EQ(a.content, ""); // (after a call: not the answer's words)
}

TEST(ToolFormats, BlocksCutShortAtTheEnd) {
    const std::string start = "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n";
    // The parameters read, the last one's text so far (less a tag begun).
    for (const auto &[rest, args] : std::vector<std::pair<std::string, std::string>>{
             {"", R"({"city":"Paris"})"},
             {"<parameter=da", R"({"city":"Paris"})"},
             {"<parameter=days>\n1", R"({"city":"Paris","days":1})"},
             {"<parameter=days>\n12\n</para", R"({"city":"Paris","days":12})"},
             {"<parameter=days>\n12\n</parameter>\n</function>\n</tool_", R"({"city":"Paris","days":12})"},
             {"<parameter=days>\n", R"({"city":"Paris","days":""})"},
             {"<parameter=opts>\n{\"a\": ", R"({"city":"Paris","opts":"{\"a\": "})"}}) {
        const TaggedAnswer a = tf_read(ToolFormat::Qwen3Coder, start + rest);
        ASSERT_EQ(a.calls.size(), 1u) << rest;
        tf_expect_call(a.calls[0], 0, "get_weather", args);
        EXPECT_EQ(a.content, "Sure.");
    }
    // No function's name yet: the block's text is words.
    for (const std::string rest : {"<tool_call>", "<tool_call>\n", "<tool_call>\n<function=get_wea"}) {
        const TaggedAnswer a = tf_read(ToolFormat::Qwen3Coder, "Sure.\n" + rest);
        EXPECT_TRUE(a.calls.empty());
        EXPECT_EQ(a.content, "Sure.\n" + rest);
    }
    // After a call: the cut block's text is no words of the answer's.
    TaggedAnswer a = tf_read(ToolFormat::Qwen3Coder, tf_xml(ToolFormat::Qwen3Coder, "now", {}) + "\n<tool_call>\n");
    EXPECT_EQ(a.calls.size(), 1u);
    EXPECT_EQ(a.content, "");
    // Hermes: a body that is whole JSON is a call; else the block's text is words.
    a = tf_read(ToolFormat::Hermes, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"query\": \"x\"}}\n");
    ASSERT_EQ(a.calls.size(), 1u);
    tf_expect_call(a.calls[0], 0, "search", R"({"query":"x"})");
    a = tf_read(ToolFormat::Hermes, "Hm.\n<tool_call>\n{\"name\": \"search\", \"argu");
    EXPECT_TRUE(a.calls.empty());
    EXPECT_EQ(a.content, "Hm.\n<tool_call>\n{\"name\": \"search\", \"argu");
}

TEST(ToolFormats, JsonReadsNoCalls) {
    const std::string text = "{\"tool_calls\":[]} <tool_call>{\"name\": \"now\"}</tool_call>\n";
    const TaggedAnswer a = tf_read(ToolFormat::Json, text);
    EXPECT_TRUE(a.calls.empty());
    EXPECT_EQ(a.content, text);
}

// Texts of every kind above, each read in pieces cut at random places (1-byte pieces among them): the words and calls
// of the whole text.
TEST(ToolFormats, AnyPiecesGiveTheWholeTextsWordsAndCalls) {
    const std::string hermes_call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Zürich\"}}\n"
                                    "</tool_call>";
    const std::vector<std::pair<ToolFormat, std::string>> texts = {
        {ToolFormat::ZayaXml, "Let me look ☀️.\n\n" +
                                  tf_xml(ToolFormat::ZayaXml, "get_weather", {{"city", "São Paulo"}, {"days", "3"}}) +
                                  "\n" + tf_xml(ToolFormat::ZayaXml, "search", {{"query", "a < b <zyphra"}}) + "\n"},
        {ToolFormat::ZayaXml, "a <zyphra_tool <zyphra_tool_call>\n<function=now>\n</function>\n</zyphra_tool_call"},
        {ToolFormat::Qwen3Coder, "  Hi\n" + tf_xml(ToolFormat::Qwen3Coder, "get_weather", {{"opts", "{\"é\": [1]}"}}) +
                                     "\n\nAnd 東京:\n" + tf_xml(ToolFormat::Qwen3Coder, "now", {}) + "\nDone.\n\n"},
        {ToolFormat::Qwen3Coder, "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar🙂is\n</par"},
        {ToolFormat::Qwen3Coder, "<tool_call>\n<function=get_wea"},
        {ToolFormat::Qwen3Coder, "a < b and <tools> or <tool_calls> é <tool_call"},
        {ToolFormat::Hermes,
         "Sure — ok.\n" + hermes_call + "\n<tool_call>{oops}</tool_call> \n" + hermes_call + " \n"},
        {ToolFormat::Hermes, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n"},
        {ToolFormat::Hermes, "x\n<tool_call>\n{\"name\": \"now\", \"argum"},
        {ToolFormat::Hermes, "no calls, ünïcödé and trailing space \n\t"},
        {ToolFormat::Hermes, "broken \xc3( bytes \xf0\x9f and <tool_call>{\"name\": \"now\"}</tool_call>\xe2\x82"},
    };
    for (size_t t = 0; t < texts.size(); ++t) {
        const auto &[f, text] = texts[t];
        const TaggedAnswer whole = tf_read(f, text);
        std::vector<size_t> every(text.size() > 0 ? text.size() - 1 : 0);
        for (size_t i = 0; i < every.size(); ++i) every[i] = i + 1;
        tf_expect_same(tf_streamed(f, text, every), whole, "text " + std::to_string(t) + ", 1-byte pieces");
        for (uint32_t seed = 0; seed < 150; ++seed) {
            std::mt19937 rng(seed * 131 + uint32_t(t));
            std::vector<size_t> cuts;
            const size_t n = rng() % (text.size() / 2 + 1);
            for (size_t k = 0; k < n; ++k) cuts.push_back(rng() % (text.size() + 1));
            std::sort(cuts.begin(), cuts.end());
            tf_expect_same(tf_streamed(f, text, cuts), whole, "text " + std::to_string(t) + ", seed " +
                                                                  std::to_string(seed));
            if (HasFailure()) return;
        }
    }
    // The texts read whole as the tests above want them (spot checks).
    const TaggedAnswer a = tf_read(texts[0].first, texts[0].second);
    ASSERT_EQ(a.calls.size(), 2u);
    tf_expect_call(a.calls[0], 0, "get_weather", R"({"city":"São Paulo","days":3})");
    tf_expect_call(a.calls[1], 1, "search", R"({"query":"a < b <zyphra"})");
    EXPECT_EQ(a.content, "Let me look ☀️.");
    const TaggedAnswer b = tf_read(texts[1].first, texts[1].second);
    ASSERT_EQ(b.calls.size(), 1u);
    EXPECT_EQ(b.content, "a <zyphra_tool");
    const TaggedAnswer h = tf_read(texts[6].first, texts[6].second);
    ASSERT_EQ(h.calls.size(), 2u);
    EXPECT_EQ(h.content, "Sure — ok."); // (the block that is no call comes after the first call)
}

} // namespace
} // namespace zaya
