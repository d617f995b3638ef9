#include "data/chat_template.h"

#include "core/atomic_file.h"
#include "core/error.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace zaya {

int32_t end_of_turn_id(const Tokenizer &tok) { return tok.piece_id("<end_of_turn>"); }

std::vector<std::string> chat_stop_strings(const Tokenizer &tok) {
    if (end_of_turn_id(tok) >= 0) return {};
    return {"<end_of_turn>"};
}

std::optional<std::string> foreign_chat_template(const std::string &model_dir) {
    namespace fs = std::filesystem;
    const auto foreign = [](const std::string &text) { return text.find("<start_of_turn>") == std::string::npos; };
    const auto read = [](const fs::path &file) -> std::optional<std::string> { // absent or unreadable: none
        std::error_code ec;
        if (!fs::is_regular_file(file, ec)) return std::nullopt;
        try {
            return read_file_bytes(file.string());
        } catch (const Error &) {
            return std::nullopt;
        }
    };
    const fs::path jinja = fs::path(model_dir) / "chat_template.jinja";
    if (const auto text = read(jinja); text && foreign(*text)) return jinja.string();
    const fs::path config = fs::path(model_dir) / "tokenizer_config.json";
    const auto text = read(config);
    if (!text) return std::nullopt;
    const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    if (!j.is_object() || !j.contains("chat_template")) return std::nullopt;
    const nlohmann::json &t = j["chat_template"];
    if (t.is_string() && foreign(t.get<std::string>())) return config.string();
    if (t.is_array())
        for (const nlohmann::json &named : t)
            if (named.is_object() && named.contains("template") && named["template"].is_string() &&
                foreign(named["template"].get<std::string>()))
                return config.string();
    return std::nullopt;
}

std::vector<int32_t> chat_tokens(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id,
                                 bool generation_prompt, std::vector<uint8_t> *trained) {
    if (messages.empty()) fail("a chat needs at least one message");
    const int32_t start = tok.piece_id("<start_of_turn>"), end = end_of_turn_id(tok);
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

std::vector<int32_t> chat_prompt(const Tokenizer &tok, const std::vector<ChatMessage> &messages, int32_t bos_id) {
    return chat_tokens(tok, messages, bos_id, /*generation_prompt=*/true);
}

std::vector<int32_t> text_prompt(const Tokenizer &tok, const std::string &text, bool chat, const std::string &system,
                                 int32_t bos_id) {
    if (chat) {
        std::vector<ChatMessage> msgs;
        if (!system.empty()) msgs.push_back({"system", system});
        msgs.push_back({"user", text});
        return chat_prompt(tok, msgs, bos_id);
    }
    std::vector<int32_t> ids = tok.encode(text);
    if (bos_id >= 0) ids.insert(ids.begin(), bos_id);
    return ids;
}

} // namespace zaya
