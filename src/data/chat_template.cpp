#include "data/chat_template.h"

#include "core/error.h"
#include "data/hf_chat_template.h"

#include <algorithm>
#include <cctype>
#include <string_view>

namespace zaya {

namespace {

// The texts that end a turn in the chat formats in use (ZAYA1's and Gemma's, ChatML, Llama 3, Phi, Command R,
// DeepSeek, gpt-oss); a model's template that writes one ends its answers with it.
constexpr std::string_view kTurnEnds[] = {"<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>",
                                          "<|END_OF_TURN_TOKEN|>", "<｜end▁of▁sentence｜>", "<|return|>",
                                          "<|call|>"};

// What ends the model's answer in a chat: ZAYA1's <end_of_turn>, or under the model's own template its
// tokenizer_config.json eos_token and the turn ends the template writes.
std::vector<std::string> chat_end_texts(const Tokenizer &tok) {
    const HfChatTemplate *t = nullptr;
    try {
        t = tok.chat_template();
    } catch (const Error &) { // a template that does not load fails the chats themselves, not every generation's stops
    }
    if (!t) return {"<end_of_turn>"};
    std::vector<std::string> out;
    if (const std::string eos = t->special_token("eos_token"); !eos.empty()) out.push_back(eos);
    for (const std::string_view end : kTurnEnds)
        if (t->source().find(end) != std::string::npos && std::find(out.begin(), out.end(), end) == out.end())
            out.emplace_back(end);
    return out;
}

} // namespace

std::vector<int32_t> chat_end_ids(const Tokenizer &tok) {
    std::vector<int32_t> ids;
    for (const std::string &text : chat_end_texts(tok))
        if (const int32_t id = tok.piece_id(text); id >= 0) ids.push_back(id);
    return ids;
}

std::vector<std::string> chat_stop_strings(const Tokenizer &tok) {
    std::vector<std::string> out;
    for (std::string &text : chat_end_texts(tok))
        if (tok.piece_id(text) < 0) out.push_back(std::move(text));
    return out;
}

namespace {

// One answer of a chat without {% generation %} blocks: the text of the chat up to it (`answered`) and, in it, the
// answer's byte range: what that chat adds to the chat before it with the generation prompt, less the whitespace
// ending it (the line break after a turn's end marker, which generation never writes).
struct RenderedAnswer {
    std::string answered;
    size_t begin = 0, end = 0;
};

std::vector<RenderedAnswer> rendered_answers(const HfChatTemplate &t, const std::vector<ChatMessage> &messages,
                                             const nlohmann::ordered_json &variables) {
    std::vector<RenderedAnswer> out;
    for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role != "assistant") continue;
        const std::vector<ChatMessage> before(messages.begin(), messages.begin() + ptrdiff_t(i));
        const std::vector<ChatMessage> upto(messages.begin(), messages.begin() + ptrdiff_t(i + 1));
        const std::string prompt =
            before.empty() ? std::string() : t.render(before, /*generation_prompt=*/true, nullptr, variables);
        RenderedAnswer a{t.render(upto, /*generation_prompt=*/false, nullptr, variables), prompt.size(), 0};
        if (!a.answered.starts_with(prompt))
            fail("{}: message {}: the chat template does not write the chat up to this answer as the chat before it "
                 "with the generation prompt, then the answer, so the answer's tokens cannot be told apart (a "
                 "template that marks answers with {{% generation %}} blocks can be given with --chat-template)",
                 t.file(), i);
        a.end = a.answered.size();
        while (a.end > a.begin && std::isspace(static_cast<unsigned char>(a.answered[a.end - 1]))) --a.end;
        if (a.end > a.begin) out.push_back(std::move(a));
    }
    return out;
}

// Ids and trained flags of `text`, its [begin, end) ranges learned, each encoded apart from the rest so that a
// trained answer starts at a token boundary, as generation after the generation prompt does.
void add_ranges(const Tokenizer &tok, const HfChatTemplate &t, const std::string &text,
                const std::vector<std::pair<size_t, size_t>> &ranges, std::vector<int32_t> &ids,
                std::vector<uint8_t> &flags) {
    auto add = [&](size_t begin, size_t end, bool learn) {
        if (end <= begin) return;
        const std::vector<int32_t> part = tok.encode_with_control(std::string_view(text).substr(begin, end - begin));
        ids.insert(ids.end(), part.begin(), part.end());
        flags.insert(flags.end(), part.size(), uint8_t(learn));
    };
    size_t at = 0;
    for (const auto &[begin, end] : ranges) {
        if (begin < at) fail("{}: the template's {{% generation %}} blocks overlap", t.file());
        add(at, begin, false);
        add(begin, end, true);
        at = end;
    }
    add(at, text.size(), false);
}

// A chat in the model's own format: its template's text, encoded as apply_chat_template encodes it (control tokens'
// texts are those tokens; no BOS is added: templates write bos_token themselves). With `trained`, the answers are
// learned: the template's {% generation %} blocks; else each answer where the chat up to it begins the whole chat;
// else (a template that rewrites earlier turns, as Qwen3's drops the reasoning of answers before the last question)
// each answer in the chat up to it, as the template writes it when that answer is the last, those chats one after
// another with EOS between them: every answer is learned in the context it was given, at the cost of the repeats.
std::vector<int32_t> templated_chat_tokens(const Tokenizer &tok, const HfChatTemplate &t,
                                           const std::vector<ChatMessage> &messages, bool generation_prompt,
                                           std::vector<uint8_t> *trained, const nlohmann::ordered_json &variables) {
    std::vector<std::pair<size_t, size_t>> ranges;
    const bool blocks = trained && t.has_generation_blocks();
    const std::string text = t.render(messages, generation_prompt, blocks ? &ranges : nullptr, variables);
    if (!trained) return tok.encode_with_control(text);
    std::vector<int32_t> ids;
    std::vector<uint8_t> flags;
    if (blocks) {
        add_ranges(tok, t, text, ranges, ids, flags);
    } else {
        const std::vector<RenderedAnswer> answers = rendered_answers(t, messages, variables);
        const bool whole = std::all_of(answers.begin(), answers.end(),
                                       [&](const RenderedAnswer &a) { return text.starts_with(a.answered); });
        if (whole) {
            for (const RenderedAnswer &a : answers) ranges.push_back({a.begin, a.end});
            add_ranges(tok, t, text, ranges, ids, flags);
        } else {
            for (const RenderedAnswer &a : answers) {
                if (!ids.empty() && tok.eos_id() >= 0) {
                    ids.push_back(tok.eos_id());
                    flags.push_back(0);
                }
                add_ranges(tok, t, a.answered, {{a.begin, a.end}}, ids, flags);
            }
        }
    }
    *trained = std::move(flags);
    return ids;
}

} // namespace

std::vector<int32_t> chat_tokens(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id,
                                 bool generation_prompt, std::vector<uint8_t> *trained,
                                 const nlohmann::ordered_json &variables) {
    if (messages.empty()) fail("a chat needs at least one message");
    if (const HfChatTemplate *t = tok.chat_template())
        return templated_chat_tokens(tok, *t, messages, generation_prompt, trained, variables);
    const int32_t start = tok.piece_id("<start_of_turn>"), end = tok.piece_id("<end_of_turn>");
    std::vector<int32_t> ids;
    std::vector<uint8_t> flags;
    auto add = [&](const std::vector<int32_t> &t, bool learn) {
        ids.insert(ids.end(), t.begin(), t.end());
        flags.insert(flags.end(), t.size(), uint8_t(learn));
    };
    auto text = [&](const std::string &s, bool learn = false) { add(tok.encode(s), learn); };
    auto marker = [&](int32_t id, const char *literal, bool learn = false) {
        if (id >= 0) add({id}, learn);
        else text(literal, learn);
    };
    if (bos_id >= 0) add({bos_id}, false);
    std::string system;
    size_t first = 0;
    if (messages[0].role == "system") {
        system = messages[0].content + "\n\n";
        first = 1;
    }
    for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage &m = messages[i];
        if (m.role == "system") fail("message {}: a system message may only come first", i);
        if (m.role != "user" && m.role != "assistant")
            fail("message {}: role must be 'user' or 'assistant' (or 'system' first), got '{}'", i, m.role);
        marker(start, "<start_of_turn>");
        if (m.role == "user") {
            text("user\n" + (i == first ? system : std::string()) + m.content);
        } else {
            text("model\n" + (i == first ? system : std::string()));
            text(m.content, true);
        }
        marker(end, "<end_of_turn>", m.role == "assistant");
        text("\n");
    }
    if (first == messages.size()) { // only a system message: it opens the user turn
        marker(start, "<start_of_turn>");
        text("user\n" + system);
        marker(end, "<end_of_turn>");
        text("\n");
    }
    if (generation_prompt) {
        marker(start, "<start_of_turn>");
        text("model\n");
    }
    if (trained) *trained = std::move(flags);
    return ids;
}

std::vector<int32_t> chat_prompt(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id,
                                 const nlohmann::ordered_json &variables) {
    return chat_tokens(tok, messages, bos_id, /*generation_prompt=*/true, nullptr, variables);
}

std::vector<int32_t> text_prompt(const Tokenizer &tok, const std::string &text, bool chat, const std::string &system,
                                 int32_t bos_id, const nlohmann::ordered_json &variables) {
    if (chat) {
        std::vector<ChatMessage> msgs;
        if (!system.empty()) msgs.push_back({"system", system});
        msgs.push_back({"user", text});
        return chat_prompt(tok, msgs, bos_id, variables);
    }
    std::vector<int32_t> ids = tok.encode(text);
    if (bos_id >= 0) ids.insert(ids.begin(), bos_id);
    return ids;
}

} // namespace zaya
