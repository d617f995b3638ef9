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

// The byte ranges of a rendered chat's assistant answers, for a template without {% generation %} blocks: answer i
// is what the chat up to it adds to the chat before it with the generation prompt, less the whitespace ending it
// (the line break after a turn's end marker, which generation never writes). Needs each such chat to be the start
// of the whole one, as templates that write past turns as they were written do.
std::vector<std::pair<size_t, size_t>> answer_ranges(const HfChatTemplate &t, const std::vector<ChatMessage> &messages,
                                                     const std::string &text, const nlohmann::ordered_json &variables) {
    std::vector<std::pair<size_t, size_t>> out;
    for (size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role != "assistant") continue;
        const std::vector<ChatMessage> before(messages.begin(), messages.begin() + ptrdiff_t(i));
        const std::vector<ChatMessage> upto(messages.begin(), messages.begin() + ptrdiff_t(i + 1));
        const std::string prompt =
            before.empty() ? std::string() : t.render(before, /*generation_prompt=*/true, nullptr, variables);
        const std::string answered = t.render(upto, /*generation_prompt=*/false, nullptr, variables);
        if (!answered.starts_with(prompt) || !text.starts_with(answered))
            fail("{}: message {}: the chat template does not write the chat up to this answer as the start of the "
                 "whole chat, so the answer's tokens cannot be told apart (a template that marks answers with "
                 "{{% generation %}} blocks can be given with --chat-template)",
                 t.file(), i);
        size_t end = answered.size();
        while (end > prompt.size() && std::isspace(static_cast<unsigned char>(answered[end - 1]))) --end;
        if (end > prompt.size()) out.push_back({prompt.size(), end});
    }
    return out;
}

// A chat in the model's own format: its template's text, encoded as apply_chat_template encodes it (control tokens'
// texts are those tokens; no BOS is added: templates write bos_token themselves). With `trained`, the answers
// (data/hf_chat_template.h's {% generation %} blocks, else answer_ranges) are encoded apart from the rest, so a
// trained answer starts at a token boundary, as generation after the generation prompt does.
std::vector<int32_t> templated_chat_tokens(const Tokenizer &tok, const HfChatTemplate &t,
                                           const std::vector<ChatMessage> &messages, bool generation_prompt,
                                           std::vector<uint8_t> *trained, const nlohmann::ordered_json &variables) {
    std::vector<std::pair<size_t, size_t>> ranges;
    const bool blocks = trained && t.has_generation_blocks();
    const std::string text = t.render(messages, generation_prompt, blocks ? &ranges : nullptr, variables);
    if (!trained) return tok.encode_with_control(text);
    if (!blocks) ranges = answer_ranges(t, messages, text, variables);
    std::vector<int32_t> ids;
    std::vector<uint8_t> flags;
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
