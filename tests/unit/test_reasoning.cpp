// Reasoning split from the answer proper (infer/reasoning.h): a block at the start or one the prompt left open, the
// whitespace around its text dropped, one block only, a block cut short, and a stream's pieces adding up to the
// whole answer's split whatever the pieces (inside tags and characters too), each piece whole UTF-8.
#include "core/utf8.h"
#include "infer/reasoning.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace zaya {
namespace {

const ReasoningTags rs_think; // <think>, </think>
// Kimi's tags, of several-byte characters: ◁think▷, ◁/think▷.
const ReasoningTags rs_kimi{"\xe2\x97\x81think\xe2\x96\xb7", "\xe2\x97\x81/think\xe2\x96\xb7"};

// The whole answer's split as the spec says it, written plainly: what the splitter must agree with.
ReasoningPiece rs_reference(std::string_view t, const ReasoningTags &tags, bool starts_in_reasoning) {
    const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    const auto lstrip = [&](std::string_view s) {
        while (!s.empty() && space(s.front())) s.remove_prefix(1);
        return s;
    };
    const auto rstrip = [&](std::string_view s) {
        while (!s.empty() && space(s.back())) s.remove_suffix(1);
        return s;
    };
    std::string_view body = t;
    if (lstrip(t).starts_with(tags.open)) body = lstrip(t).substr(tags.open.size());
    else if (!starts_in_reasoning) return {"", std::string(t)};
    const size_t close = body.find(tags.close);
    if (close == std::string_view::npos) return {std::string(rstrip(lstrip(body))), ""};
    return {std::string(rstrip(lstrip(body.substr(0, close)))),
            std::string(lstrip(body.substr(close + tags.close.size())))};
}

// The pieces' parts gathered, each piece checked to be whole UTF-8 (when the answer is valid UTF-8).
ReasoningPiece rs_stream(const std::vector<std::string> &pieces, const ReasoningTags &tags, bool starts,
                         bool *reasoned = nullptr) {
    ReasoningSplitter splitter(tags, starts);
    ReasoningPiece all;
    const auto add = [&](const ReasoningPiece &p) {
        EXPECT_TRUE(is_utf8(p.reasoning)) << p.reasoning;
        EXPECT_TRUE(is_utf8(p.content)) << p.content;
        all.reasoning += p.reasoning;
        all.content += p.content;
    };
    for (const std::string &piece : pieces) add(splitter.feed(piece));
    add(splitter.finish());
    if (reasoned) *reasoned = splitter.reasoned();
    return all;
}

// The text cut at random places (pieces of 0 to 7 bytes, so some empty), or byte by byte.
std::vector<std::string> rs_cuts(const std::string &text, std::mt19937 &rng, bool byte_by_byte) {
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
        const size_t n = byte_by_byte ? 1 : std::uniform_int_distribution<size_t>(0, 7)(rng);
        pieces.push_back(text.substr(i, n));
        i += n;
    }
    return pieces;
}

void rs_expect(const std::string &text, bool starts, const std::string &reasoning, const std::string &content,
               const ReasoningTags &tags = rs_think) {
    const ReasoningPiece p = split_reasoning(text, tags, starts);
    EXPECT_EQ(p.reasoning, reasoning) << "text: " << text;
    EXPECT_EQ(p.content, content) << "text: " << text;
}

TEST(Reasoning, AnswerStartingInReasoning) {
    rs_expect("Let me think.\nIt is 4.\n</think>\n\nThe answer is 4.", true, "Let me think.\nIt is 4.",
              "The answer is 4.");
    rs_expect("\n  x </think>y\n", true, "x", "y\n"); // the content's trailing whitespace is its own
    rs_expect("</think>\n\nHi", true, "", "Hi");        // thinking left empty
    ReasoningSplitter s(rs_think, true);
    EXPECT_TRUE(s.reasoned()); // the block was opened by the prompt
}

TEST(Reasoning, OpenTagAtTheStart) {
    bool reasoned = false;
    EXPECT_EQ(rs_stream({"<think>\nhmm\n</think>\n\nHi"}, rs_think, false, &reasoned).reasoning, "hmm");
    EXPECT_TRUE(reasoned);
    rs_expect("<think>\nhmm\n</think>\n\nHi", false, "hmm", "Hi");
    rs_expect("\n \t<think>hmm</think>Hi", false, "hmm", "Hi"); // whitespace before the tag dropped
    rs_expect("<think></think>Hi", false, "", "Hi");
    rs_expect("<think>\n\n</think>\n\nHi", false, "", "Hi");
}

TEST(Reasoning, AnswerNotBeginningWithTheTagHasNoReasoning) {
    bool reasoned = true;
    const ReasoningPiece p = rs_stream({"Hello <think>x</think> there"}, rs_think, false, &reasoned);
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.content, "Hello <think>x</think> there");
    EXPECT_FALSE(reasoned);
    rs_expect("  Hello\n", false, "", "  Hello\n"); // as written, leading whitespace too
    rs_expect("x<think>a</think>b", false, "", "x<think>a</think>b");
    rs_expect("</think>Hi", false, "", "</think>Hi"); // a close without a block is text
}

TEST(Reasoning, RepeatedOpenTagIsDropped) {
    rs_expect("<think>\nabc\n</think>\n\nX", true, "abc", "X");
    rs_expect(" \n<think>abc</think>X", true, "abc", "X");
    rs_expect("abc <think> def</think>x", true, "abc <think> def", "x"); // only at the very start
    rs_expect("<think><think>a</think>b", false, "<think>a", "b");
}

TEST(Reasoning, BlockCutShortIsAllReasoning) {
    rs_expect("abc\n\n", true, "abc", "");
    rs_expect("<think>\nabc </thi", false, "abc </thi", ""); // a part of the close is text
    rs_expect("<think>", false, "", "");
    rs_expect("<think>\n  ", false, "", "");
    bool reasoned = false;
    EXPECT_EQ(rs_stream({"<thi", "nk>\nab", "c"}, rs_think, false, &reasoned).reasoning, "abc");
    EXPECT_TRUE(reasoned);
}

TEST(Reasoning, OnlyOneBlockIsRead) {
    rs_expect("<think>a</think>b<think>c</think>d", false, "a", "b<think>c</think>d");
    rs_expect("a</think>\n\n<think>\nc</think>d", true, "a", "<think>\nc</think>d");
    rs_expect("a</think>\n\n</think>", true, "a", "</think>");
}

TEST(Reasoning, TextLikeATagIsText) {
    rs_expect("<thin", false, "", "<thin");
    rs_expect("  <thin", false, "", "  <thin");
    rs_expect("<thinking>x</thinking>", false, "", "<thinking>x</thinking>");
    rs_expect("<thin", true, "<thin", ""); // inside the block, a part of the open tag is reasoning
    rs_expect("a </thinking> b</think>c", true, "a </thinking> b", "c");
    rs_expect("a </ b <</think>c", true, "a </ b <", "c");
    rs_expect("a <</think>c", true, "a <", "c");
    rs_expect("a </think</think>c", true, "a </think", "c");
}

TEST(Reasoning, MultibyteText) {
    rs_expect("<think>\n\xe6\x80\x9d\xe8\x80\x83\xe2\x80\xa6\n</think>\n\n\xe7\xad\x94\xf0\x9f\x99\x82", false,
              "\xe6\x80\x9d\xe8\x80\x83\xe2\x80\xa6", "\xe7\xad\x94\xf0\x9f\x99\x82");
    rs_expect("\xc3\xa9t\xc3\xa9 </think>\xc3\xa0", true, "\xc3\xa9t\xc3\xa9", "\xc3\xa0");
    // Tags of several-byte characters (Kimi's).
    rs_expect("\xe2\x97\x81think\xe2\x96\xb7 a \xe2\x97\x81/think\xe2\x96\xb7 b", false, "a", "b", rs_kimi);
    rs_expect("\xe2\x97\x81thin", false, "", "\xe2\x97\x81thin", rs_kimi);
}

TEST(Reasoning, EmptyAnswer) {
    for (bool starts : {false, true}) {
        bool reasoned = !starts;
        const ReasoningPiece p = rs_stream({}, rs_think, starts, &reasoned);
        EXPECT_EQ(p.reasoning, "");
        EXPECT_EQ(p.content, "");
        EXPECT_EQ(reasoned, starts);
        rs_expect("", starts, "", "");
    }
    rs_expect(" \n", false, "", " \n"); // whitespace alone: the answer as written
    rs_expect(" \n", true, "", "");     // the block's whitespace
}

TEST(Reasoning, StreamHoldsOnlyWhatIsUndecided) {
    ReasoningSplitter s(rs_think, true);
    EXPECT_EQ(s.feed("\n").reasoning, "");        // the block's leading whitespace
    EXPECT_EQ(s.feed("abc \n").reasoning, "abc"); // the whitespace may end the reasoning
    EXPECT_EQ(s.feed("d").reasoning, " \nd");     // it did not
    ReasoningPiece p = s.feed(" </th");
    EXPECT_EQ(p.reasoning + p.content, "");
    p = s.feed("ink>\n");
    EXPECT_EQ(p.reasoning + p.content, "");
    p = s.feed("\n\xe6\x80");
    EXPECT_EQ(p.reasoning + p.content, ""); // a character begun
    p = s.feed("\x9dx");
    EXPECT_EQ(p.reasoning, "");
    EXPECT_EQ(p.content, "\xe6\x80\x9dx");
    p = s.feed(" <think> ");
    EXPECT_EQ(p.content, " <think> "); // the content as written, once it began
    p = s.finish();
    EXPECT_EQ(p.reasoning + p.content, "");

    ReasoningSplitter plain(rs_think, false);
    EXPECT_EQ(plain.feed(" <thi").content, ""); // may yet be the open tag
    EXPECT_EQ(plain.feed("s is").content, " <this is");
    EXPECT_FALSE(plain.reasoned());

    ReasoningSplitter open(rs_think, false);
    EXPECT_EQ(open.feed("<think").reasoning, "");
    EXPECT_FALSE(open.reasoned());
    EXPECT_EQ(open.feed(">a").reasoning, "a");
    EXPECT_TRUE(open.reasoned());
    p = open.feed(" </");
    EXPECT_EQ(p.reasoning + p.content, "");
    p = open.finish(); // cut short: the part of the close is reasoning, the whitespace before it too
    EXPECT_EQ(p.reasoning, " </");
    EXPECT_EQ(p.content, "");
}

// The answers the invariance is checked on: tags whole, cut, repeated, around whitespace and characters.
const std::vector<std::string> rs_answers = {
    "<think>\nLet me see: 2+2.\n</think>\n\nIt is 4.",
    "Let me see: 2+2.\n</think>\n\nIt is 4.\n",
    "\n<think>\nhmm\xe6\x80\x9d\xe8\x80\x83\n</think>\n\n\xe7\xad\x94\xf0\x9f\x99\x82 <think>x</think>",
    "  <think>a </thinking> b <</think>\n\n\n c",
    "<thinking>not a block</thinking>",
    "\xc3\xa9<think>\xc3\xa9</think>\xc3\xa9",
    "<think><think> \t</think></think> \n",
    "<think>\nno close, cut short </thi",
    "<think>\nno close \n\n",
    "<thi",
    " \n ",
    "</think>",
    "</think></think>",
    "a </ b </t </th </thi </thin </think",
    "\xe2\x97\x81think\xe2\x96\xb7 a \xe2\x97\x81/thin \xe2\x97\x81/think\xe2\x96\xb7 b \xf0\x9f\x99\x82",
    "",
};

TEST(Reasoning, AnyPiecesAddUpToTheWholeSplit) {
    for (const ReasoningTags &tags : {rs_think, rs_kimi})
        for (bool starts : {false, true})
            for (const std::string &text : rs_answers) {
                SCOPED_TRACE(testing::Message() << "starts " << starts << " text: " << text);
                const ReasoningPiece whole = split_reasoning(text, tags, starts);
                const ReasoningPiece ref = rs_reference(text, tags, starts);
                EXPECT_EQ(whole.reasoning, ref.reasoning);
                EXPECT_EQ(whole.content, ref.content);
                // The content is the answer's end, from content_start() (none: no content began).
                ReasoningSplitter at(tags, starts);
                at.feed(text);
                at.finish();
                if (at.content_start() == std::string::npos) EXPECT_EQ(whole.content, "");
                else EXPECT_EQ(text.substr(at.content_start()), whole.content);
                std::mt19937 rng(7);
                for (int seed = 0; seed < 60; ++seed) {
                    const ReasoningPiece p = rs_stream(rs_cuts(text, rng, seed == 0), tags, starts);
                    ASSERT_EQ(p.reasoning, whole.reasoning) << "seed " << seed;
                    ASSERT_EQ(p.content, whole.content) << "seed " << seed;
                }
                for (size_t i = 0; i <= text.size(); ++i) // cuts in three pieces
                    for (size_t j = i; j <= text.size(); j += 3) {
                        const ReasoningPiece p =
                            rs_stream({text.substr(0, i), text.substr(i, j - i), text.substr(j)}, tags, starts);
                        ASSERT_EQ(p.reasoning, whole.reasoning) << "cuts " << i << ", " << j;
                        ASSERT_EQ(p.content, whole.content) << "cuts " << i << ", " << j;
                    }
            }
}

// Random answers of fragments that make and break tags: the splitter as the plain reading, in any pieces.
TEST(Reasoning, RandomAnswersMatchThePlainReading) {
    const std::vector<std::string> fragments = {"<think>", "</think>", "<", "</", "<th", "think>", "ink>", " ", "\n",
                                                "\t", "a", "\xc3\xa9", "\xe6\x80\x9d", "\xf0\x9f\x99\x82", "/"};
    std::mt19937 rng(11);
    for (int round = 0; round < 3000; ++round) {
        std::string text;
        const int n = std::uniform_int_distribution<int>(0, 12)(rng);
        for (int k = 0; k < n; ++k)
            text += fragments[std::uniform_int_distribution<size_t>(0, fragments.size() - 1)(rng)];
        const bool starts = round % 2;
        SCOPED_TRACE(testing::Message() << "round " << round << " starts " << starts << " text: " << text);
        const ReasoningPiece ref = rs_reference(text, rs_think, starts);
        const ReasoningPiece whole = split_reasoning(text, rs_think, starts);
        ASSERT_EQ(whole.reasoning, ref.reasoning);
        ASSERT_EQ(whole.content, ref.content);
        const ReasoningPiece p = rs_stream(rs_cuts(text, rng, round % 5 == 0), rs_think, starts);
        ASSERT_EQ(p.reasoning, ref.reasoning);
        ASSERT_EQ(p.content, ref.content);
    }
}

// The gate the engine watches tool calls behind (ContentGate): a byte at a time, it releases exactly the splitter's
// content, and holds only an undecided start (whitespace and a part of the open tag), for any answer.
TEST(Reasoning, ContentGateReleasesTheSplittersContent) {
    const std::vector<std::string> fragments = {"<think>", "</think>", "<", "</", "<th", "think>", "ink>", " ", "\n",
                                                "a", "{\"a\":", "\xc3\xa9", "/", "\xe2\x97\x81think\xe2\x96\xb7",
                                                "\xe2\x97\x81/think\xe2\x96\xb7", "\xe2\x97"};
    std::mt19937 rng(5);
    int decided = 0, held = 0;
    for (int round = 0; round < 4000; ++round) {
        std::string text;
        const int n = std::uniform_int_distribution<int>(0, 10)(rng);
        for (int k = 0; k < n; ++k)
            text += fragments[std::uniform_int_distribution<size_t>(0, fragments.size() - 1)(rng)];
        const bool starts = round % 2;
        const ReasoningTags &tags = round % 3 == 2 ? rs_kimi : rs_think;
        SCOPED_TRACE(testing::Message() << "round " << round << " starts " << starts << " text: " << text);
        ContentGate gate(tags, starts);
        std::string content;
        for (char c : text) gate.feed(uint8_t(c), content);
        const ReasoningPiece ref = rs_reference(text, tags, starts);
        if (gate.in_content()) {
            ++decided;
            ASSERT_EQ(content, ref.content);
        } else {
            ASSERT_EQ(content, "");
            held += !gate.held().empty();
            // Undecided at the start: the held bytes are the content should the answer end there (no block), or
            // the block's when it starts in one.
            ASSERT_EQ(starts ? "" : gate.held(), ref.content);
        }
    }
    EXPECT_GT(decided, 1000);
    EXPECT_GT(held, 20);
}

TEST(Reasoning, PromptOpensReasoning) {
    const std::string chat = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    EXPECT_TRUE(prompt_opens_reasoning(chat + "<think>\n", rs_think));
    EXPECT_FALSE(prompt_opens_reasoning(chat + "<think>\n\n</think>\n\n", rs_think)); // thinking turned off
    EXPECT_FALSE(prompt_opens_reasoning(chat, rs_think));
    EXPECT_FALSE(prompt_opens_reasoning("", rs_think));
    // An earlier turn's block, closed; then the generation prompt's, open.
    const std::string earlier = "<|im_start|>assistant\n<think>\nx\n</think>\n\nHello<|im_end|>\n";
    EXPECT_FALSE(prompt_opens_reasoning(earlier + chat, rs_think));
    EXPECT_TRUE(prompt_opens_reasoning(earlier + chat + "<think>\n", rs_think));
    EXPECT_TRUE(prompt_opens_reasoning("\xe2\x97\x81think\xe2\x96\xb7", rs_kimi));
}

TEST(Reasoning, TagsOfTemplate) {
    const std::string qwen3 = "{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}"
                              "{%- endif %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                              "{%- if enable_thinking is defined and enable_thinking is false %}"
                              "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}";
    const std::optional<ReasoningTags> tags = reasoning_tags_of_template(qwen3);
    ASSERT_TRUE(tags.has_value());
    EXPECT_EQ(tags->open, "<think>");
    EXPECT_EQ(tags->close, "</think>");
    EXPECT_FALSE(reasoning_tags_of_template("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}"));
    EXPECT_FALSE(reasoning_tags_of_template("Think step by step in <think> tags."));
    EXPECT_FALSE(reasoning_tags_of_template(""));
}

} // namespace
} // namespace zaya
