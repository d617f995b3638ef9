// A model's own chat template (data/hf_chat_template.h, data/jinja.h) against transformers' apply_chat_template:
// the texts and {% generation %} ranges it rendered for tests/golden/chat_templates
// (tools/gen_chat_template_goldens.py: templates of our own in the styles of ChatML with tools, Qwen3-style
// reasoning, Llama 3, Mistral, Gemma 3, DeepSeek-R1 and SmolLM3's generation blocks), the ids it tokenized them to
// with a byte-level tokenizer.json, and the chats zaya builds on them (data/chat_template.h): prompts, trained
// answers, stops.
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/hf_chat_template.h"
#include "data/jinja.h"
#include "data/tokenizer.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace zaya;
using zaya::test::TempDir;
using nlohmann::ordered_json;

namespace {

const ordered_json &goldens() {
    static const ordered_json j = [] {
        std::ifstream in(zaya::test::golden_dir("chat_templates") + "/cases.json");
        return ordered_json::parse(in);
    }();
    return j;
}

std::string template_file(const std::string &name) {
    return zaya::test::golden_dir("chat_templates") + "/templates/" + name + ".jinja";
}

// A model directory as transformers saves one: the tokenizer.json, the template as chat_template.jinja, and the
// special tokens' texts in tokenizer_config.json.
void make_model_dir(const TempDir &dir, const std::string &tokenizer, const std::string &template_name,
                    const ordered_json &special) {
    std::filesystem::copy_file(tokenizer, dir.str("tokenizer.json"));
    std::filesystem::copy_file(template_file(template_name), dir.str("chat_template.jinja"));
    write_file_atomic(dir.str("tokenizer_config.json"), special.is_null() ? "{}" : special.dump());
}

// The qwen2-style golden tokenizer.json with the ChatML-with-tools template, as a model directory.
Tokenizer chatml_tokenizer(const TempDir &dir, const std::string &template_name = "chatml_tools") {
    make_model_dir(dir, zaya::test::golden_dir("tokenizer") + "/qwen2/tokenizer.json", template_name,
                   {{"eos_token", "<|im_end|>"}, {"pad_token", "<|endoftext|>"}});
    return Tokenizer::load(dir.str());
}

// The text of the ids flagged 1 (or 0), each run of them on its own line.
std::string flagged_text(const Tokenizer &tok, const std::vector<int32_t> &ids, const std::vector<uint8_t> &flags,
                         uint8_t which) {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (flags[i] != which) continue;
        if (i > 0 && flags[i - 1] != which && !out.empty()) out += '\n';
        out += tok.piece(ids[i]) == "<|im_end|>" ? "<|im_end|>" : tok.decode({ids[i]});
    }
    return out;
}

} // namespace

TEST(HfChatTemplate, RendersAsTransformers) {
    size_t rendered = 0, refused = 0;
    for (const ordered_json &c : goldens()["cases"]) {
        const std::string name = c["name"].get<std::string>();
        SCOPED_TRACE(name);
        const std::string t = c["template"].get<std::string>();
        const jinja::Template tmpl(read_file_bytes(template_file(t)), t + ".jinja");
        std::vector<std::pair<size_t, size_t>> generation;
        if (c.contains("error")) {
            EXPECT_THROW(tmpl.render(c["context"], &generation), Error);
            ++refused;
            continue;
        }
        std::string text;
        try {
            text = tmpl.render(c["context"], &generation);
        } catch (const Error &e) {
            ADD_FAILURE() << e.what();
            continue;
        }
        EXPECT_EQ(text, c["expected"].get<std::string>());
        if (c.contains("generation")) {
            std::vector<std::pair<size_t, size_t>> want;
            for (const ordered_json &r : c["generation"]) want.push_back({r[0].get<size_t>(), r[1].get<size_t>()});
            EXPECT_EQ(generation, want);
        }
        ++rendered;
    }
    EXPECT_GE(rendered, 60u); // the golden set is not silently empty
    EXPECT_GE(refused, 7u);
}

// Through a model directory (tokenizer_config.json's special tokens) and render(): every golden chat of plain
// messages, with its other variables (enable_thinking, date_string, ...) as --chat-template-kwargs gives them.
TEST(HfChatTemplate, ModelDirectoryRendersTheChatsWithTheirVariables) {
    size_t checked = 0, with_variables = 0;
    for (const ordered_json &c : goldens()["cases"]) {
        const ordered_json &ctx = c["context"];
        if (c.contains("error") || !ctx["tools"].is_null()) continue;
        std::vector<ChatMessage> messages;
        bool plain = true;
        for (const ordered_json &m : ctx["messages"]) {
            plain = plain && m.size() == 2 && m.contains("content") && m["content"].is_string();
            if (plain) messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
        }
        if (!plain || messages.empty()) continue;
        SCOPED_TRACE(c["name"].get<std::string>());
        ordered_json special = ordered_json::object(), variables = ordered_json::object();
        for (const auto &[k, v] : ctx.items()) {
            if (k == "bos_token" || k == "eos_token") special[k] = v;
            else if (k != "messages" && k != "tools" && k != "documents" && k != "add_generation_prompt")
                variables[k] = v;
        }
        TempDir dir;
        std::filesystem::copy_file(template_file(c["template"].get<std::string>()), dir.str("chat_template.jinja"));
        write_file_atomic(dir.str("tokenizer_config.json"), special.dump());
        const std::optional<HfChatTemplate> t = HfChatTemplate::find_in(dir.str());
        ASSERT_TRUE(t.has_value());
        EXPECT_EQ(t->render(messages, ctx["add_generation_prompt"].get<bool>(), nullptr, variables),
                  c["expected"].get<std::string>());
        ++checked;
        with_variables += !variables.empty();
    }
    EXPECT_GE(checked, 30u);
    EXPECT_GE(with_variables, 5u);
}

TEST(HfChatTemplate, VariablesMayNotSetTheChatsOwn) {
    EXPECT_NO_THROW(check_chat_variables(nullptr, "x"));
    EXPECT_NO_THROW(check_chat_variables({{"enable_thinking", false}}, "x"));
    EXPECT_NE(zaya::test::error_of([] { check_chat_variables({{"messages", 1}}, "kw"); })
                  .find("kw: 'messages' is the chat's own variable"),
              std::string::npos);
    EXPECT_NE(zaya::test::error_of([] { check_chat_variables(ordered_json::array(), "kw"); }).find("a JSON object"),
              std::string::npos);
}

TEST(HfChatTemplate, RaiseExceptionsMessageIsTheError) {
    const jinja::Template tmpl(read_file_bytes(template_file("mistral")), "mistral.jinja");
    for (const ordered_json &c : goldens()["cases"]) {
        if (c["template"] != "mistral" || !c.contains("error") || c["error_type"] != "TemplateError") continue;
        const std::string msg = zaya::test::error_of([&] { tmpl.render(c["context"]); });
        EXPECT_NE(msg.find("mistral.jinja"), std::string::npos) << msg;
        EXPECT_NE(msg.find(c["error"].get<std::string>()), std::string::npos) << msg;
        return;
    }
    FAIL() << "no Mistral-style case that raises";
}

TEST(HfChatTemplate, TokensAsApplyChatTemplate) {
    for (const ordered_json &c : goldens()["token_cases"]) {
        SCOPED_TRACE(c["name"].get<std::string>());
        const ordered_json &ctx = c["context"];
        const std::string tokenizer = zaya::test::golden_dir("") + "/" + c["tokenizer"].get<std::string>();
        const std::string t = c["template"].get<std::string>();
        std::vector<int32_t> want;
        for (const ordered_json &id : c["ids"]) want.push_back(id.get<int32_t>());
        // The rendered text, encoded as apply_chat_template encodes it.
        const jinja::Template tmpl(read_file_bytes(template_file(t)), t);
        const Tokenizer plain = Tokenizer::load(tokenizer);
        EXPECT_EQ(plain.encode_with_control(tmpl.render(ctx)), want);
        // And through a model directory and chat_tokens, where the chat is plain messages.
        bool plain_messages = ctx["tools"].is_null();
        std::vector<ChatMessage> messages;
        for (const ordered_json &m : ctx["messages"]) {
            plain_messages = plain_messages && m.size() == 2 && m.contains("content") && m["content"].is_string();
            if (plain_messages) messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
        }
        if (!plain_messages) continue;
        TempDir dir;
        ordered_json special = ordered_json::object();
        for (const char *k : {"bos_token", "eos_token", "pad_token"})
            if (ctx.contains(k)) special[k] = ctx[k];
        make_model_dir(dir, tokenizer, t, special);
        const Tokenizer tok = Tokenizer::load(dir.str());
        ASSERT_NE(tok.chat_template(), nullptr);
        EXPECT_EQ(chat_tokens(tok, messages, /*bos_id=*/-1, ctx["add_generation_prompt"].get<bool>()), want);
    }
}

TEST(ChatTokens, ModelsTemplateTrainsTheAnswersWhereGenerationStarts) {
    TempDir dir;
    const Tokenizer tok = chatml_tokenizer(dir);
    const std::vector<ChatMessage> chat = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello there."},
                                           {"user", "Bye"}, {"assistant", "Goodbye, friend."}};
    std::vector<uint8_t> trained;
    const std::vector<int32_t> ids = chat_tokens(tok, chat, -1, false, &trained);
    ASSERT_EQ(trained.size(), ids.size());
    // The answers and the <|im_end|> closing each, not the line break after it or the turns' headers.
    EXPECT_EQ(flagged_text(tok, ids, trained, 1), "Hello there.<|im_end|>\nGoodbye, friend.<|im_end|>");
    // Each answer starts where generation starts: the prompt of the chat before it, token for token.
    for (const size_t answered : {size_t(3), size_t(5)}) {
        const std::vector<ChatMessage> before(chat.begin(), chat.begin() + ptrdiff_t(answered - 1));
        const std::vector<int32_t> prompt = chat_prompt(tok, before, -1);
        ASSERT_LE(prompt.size(), ids.size());
        EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), ids.begin())) << answered;
        EXPECT_EQ(trained[prompt.size()], 1) << answered;
        EXPECT_EQ(trained[prompt.size() - 1], 0) << answered;
    }
    // Tokenized whole, the text gives the same ids here (the answers' edges are token edges in ChatML).
    EXPECT_EQ(ids, tok.encode_with_control(tok.chat_template()->render(chat, false)));
}

TEST(ChatTokens, GenerationBlocksMarkTheTrainedText) {
    TempDir dir;
    const Tokenizer tok = chatml_tokenizer(dir, "smol_generation");
    ASSERT_TRUE(tok.chat_template()->has_generation_blocks());
    const std::vector<ChatMessage> chat = {{"user", "Hi"}, {"assistant", "Hello there."}};
    std::vector<std::pair<size_t, size_t>> blocks;
    const std::string text = tok.chat_template()->render(chat, false, &blocks);
    ASSERT_EQ(blocks.size(), 1u);
    std::vector<uint8_t> trained;
    const std::vector<int32_t> ids = chat_tokens(tok, chat, -1, false, &trained);
    std::string learned;
    for (size_t i = 0; i < ids.size(); ++i)
        if (trained[i]) learned += tok.piece(ids[i]) == "<|im_end|>" ? "<|im_end|>" : tok.decode({ids[i]});
    EXPECT_EQ(learned, text.substr(blocks[0].first, blocks[0].second - blocks[0].first));
}

TEST(ChatTokens, AnswersATemplateRewritesAreLearnedInTheChatUpToThem) {
    // A Qwen3-style template drops the reasoning of answers before the last question: the chat up to the first
    // answer is then not the start of the whole one. Each answer is learned in the chat up to it instead (as the
    // template writes it when that answer is the last, its reasoning kept), the chats one after another.
    TempDir dir;
    const Tokenizer tok = chatml_tokenizer(dir, "chatml_think");
    const HfChatTemplate &t = *tok.chat_template();
    const std::vector<ChatMessage> chat = {{"user", "1+1?"}, {"assistant", "<think>\nsum\n</think>\n\n2"},
                                           {"user", "2+2?"}, {"assistant", "<think>\nadd\n</think>\n\n4"}};
    const std::string whole = t.render(chat, false);
    ASSERT_EQ(whole.find("sum"), std::string::npos); // (the first answer's reasoning is dropped there)
    std::vector<uint8_t> trained;
    const std::vector<int32_t> ids = chat_tokens(tok, chat, -1, false, &trained);
    ASSERT_EQ(ids.size(), trained.size());
    // Two chats: up to the first answer, EOS, up to the second; the learned tokens are the two answers as the
    // template writes them last (reasoning and all) with their end markers.
    const std::vector<ChatMessage> first(chat.begin(), chat.begin() + 2);
    std::vector<int32_t> want = tok.encode_with_control(t.render(first, false));
    want.push_back(tok.eos_id());
    const std::vector<int32_t> second = tok.encode_with_control(whole);
    want.insert(want.end(), second.begin(), second.end());
    EXPECT_EQ(tok.decode(ids), tok.decode(want));
    EXPECT_EQ(flagged_text(tok, ids, trained, 1),
              "<think>\nsum\n</think>\n\n2<|im_end|>\n<think>\nadd\n</think>\n\n4<|im_end|>"); // (a line a run)
    EXPECT_NO_THROW(chat_tokens(tok, chat, -1, false)); // a prompt is the whole chat, as ever
    EXPECT_EQ(chat_tokens(tok, chat, -1, true), tok.encode_with_control(t.render(chat, true)));
}

TEST(ChatTokens, StopsAtTheTemplatesTurnEnds) {
    TempDir dir;
    const Tokenizer tok = chatml_tokenizer(dir);
    EXPECT_EQ(chat_end_ids(tok), std::vector<int32_t>{tok.piece_id("<|im_end|>")});
    EXPECT_TRUE(chat_stop_strings(tok).empty());
    // The built-in format instead: no <end_of_turn> token here, so it is a stop string.
    Tokenizer builtin = tok;
    apply_chat_template_option(builtin, "builtin");
    EXPECT_EQ(builtin.chat_template(), nullptr);
    EXPECT_TRUE(chat_end_ids(builtin).empty());
    EXPECT_EQ(chat_stop_strings(builtin), std::vector<std::string>{"<end_of_turn>"});
}

TEST(ChatTokens, ABrokenTemplateFailsOnlyChats) {
    TempDir dir;
    make_model_dir(dir, zaya::test::golden_dir("tokenizer") + "/qwen2/tokenizer.json", "chatml_tools", {});
    write_file_atomic(dir.str("chat_template.jinja"), "{% for m in messages %}\n{{ m.content }\n{% endfor %}");
    const Tokenizer tok = Tokenizer::load(dir.str()); // text needs no template
    EXPECT_FALSE(tok.encode("hello").empty());
    EXPECT_EQ(chat_end_ids(tok), std::vector<int32_t>{}); // the built-in format's stops, none here
    const std::string msg = zaya::test::error_of([&] { chat_prompt(tok, {{"user", "hi"}}, -1); });
    EXPECT_NE(msg.find("chat_template.jinja:2:"), std::string::npos) << msg;
}

TEST(ChatTokens, TokenizerConfigsTemplateAndItsNamedList) {
    TempDir dir;
    std::filesystem::copy_file(zaya::test::golden_dir("tokenizer") + "/qwen2/tokenizer.json",
                               dir.str("tokenizer.json"));
    const std::string chatml = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                               "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";
    const ordered_json named = ordered_json::array(
        {{{"name", "tool_use"}, {"template", "x"}}, {{"name", "default"}, {"template", chatml}}});
    write_file_atomic(dir.str("tokenizer_config.json"),
                      ordered_json({{"eos_token", {{"content", "<|im_end|>"}, {"special", true}}},
                                    {"chat_template", named}})
                          .dump());
    const Tokenizer tok = Tokenizer::load(dir.str("tokenizer.json"));
    ASSERT_NE(tok.chat_template(), nullptr);
    EXPECT_EQ(tok.chat_template()->special_token("eos_token"), "<|im_end|>");
    EXPECT_EQ(tok.chat_template()->render({{"user", "hi"}}, true),
              "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    // Saved into another directory (a data directory), it is found there again.
    TempDir data;
    tok.chat_template()->save(data.str());
    std::filesystem::copy_file(dir.str("tokenizer.json"), data.str("tokenizer.json"));
    const Tokenizer again = Tokenizer::load(data.str());
    ASSERT_NE(again.chat_template(), nullptr);
    EXPECT_EQ(again.chat_template()->source(), chatml);
    EXPECT_EQ(again.chat_template()->special_token("eos_token"), "<|im_end|>");
}

TEST(Tokenizer, EncodeWithControlReadsSentencepiecesControlTexts) {
    const Tokenizer tok = Tokenizer::load(zaya::test::golden_dir("tokenizer") + "/gemma/tokenizer.model");
    ASSERT_GE(tok.bos_id(), 0);
    ASSERT_TRUE(tok.is_control(tok.bos_id()));
    const std::string bos = tok.piece(tok.bos_id());
    std::vector<int32_t> want = {tok.bos_id()};
    for (const int32_t id : tok.encode("Hello world")) want.push_back(id);
    EXPECT_EQ(tok.encode_with_control(bos + "Hello world"), want);
    EXPECT_NE(tok.encode(bos + "Hello world"), want); // sentencepiece alone reads it as text
}
