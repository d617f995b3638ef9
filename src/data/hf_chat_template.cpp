#include "data/hf_chat_template.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"

#include <filesystem>
#include <regex>

namespace zaya {
namespace fs = std::filesystem;

namespace {

// The named special tokens apply_chat_template passes to a template (transformers' special_tokens_map), each a text
// or an AddedToken object {"content": ...} in tokenizer_config.json.
nlohmann::ordered_json special_tokens_of(const nlohmann::json &config) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const char *name : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                             "mask_token"}) {
        if (!config.contains(name)) continue;
        const nlohmann::json &v = config[name];
        if (v.is_string()) out[name] = v.get<std::string>();
        else if (v.is_object() && v.contains("content") && v["content"].is_string())
            out[name] = v["content"].get<std::string>();
    }
    return out;
}

std::optional<nlohmann::json> read_config(const fs::path &file) {
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return std::nullopt;
    nlohmann::json j = nlohmann::json::parse(read_file_bytes(file.string()), nullptr, false);
    if (!j.is_object()) fail("{}: not a JSON object", file.string());
    return j;
}

// tokenizer_config.json's chat_template: a text, or a list of {"name", "template"} of which transformers takes
// "default" when no tools are given.
std::optional<std::string> template_in_config(const nlohmann::json &config, const std::string &file) {
    if (!config.contains("chat_template") || config["chat_template"].is_null()) return std::nullopt;
    const nlohmann::json &t = config["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {
        for (const nlohmann::json &named : t)
            if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
                named["template"].is_string())
                return named["template"].get<std::string>();
        fail("{}: chat_template is a list of named templates without one named 'default'", file);
    }
    fail("{}: chat_template must be a text or a list of named templates", file);
}

} // namespace

HfChatTemplate::HfChatTemplate(std::string file, std::string source, nlohmann::ordered_json special)
    : file_(std::move(file)), source_(std::move(source)),
      // Errors name the file, and within tokenizer_config.json the field whose text the line numbers count.
      template_(source_, fs::path(file_).extension() == ".json" ? file_ + " (chat_template)" : file_),
      special_(std::move(special)) {
    // transformers' own test for an assistant mask's blocks.
    generation_blocks_ = std::regex_search(source_, std::regex(R"(\{%-?\s*generation\s*-?%\})"));
}

std::optional<HfChatTemplate> HfChatTemplate::find_in(const std::string &dir) {
    const fs::path config_file = fs::path(dir) / "tokenizer_config.json";
    const std::optional<nlohmann::json> config = read_config(config_file);
    const nlohmann::ordered_json special = config ? special_tokens_of(*config) : nlohmann::ordered_json::object();
    const fs::path jinja = fs::path(dir) / "chat_template.jinja";
    std::error_code ec;
    if (fs::is_regular_file(jinja, ec)) return HfChatTemplate(jinja.string(), read_file_bytes(jinja.string()), special);
    if (!config) return std::nullopt;
    std::optional<std::string> text = template_in_config(*config, config_file.string());
    if (!text) return std::nullopt;
    return HfChatTemplate(config_file.string(), std::move(*text), special);
}

HfChatTemplate HfChatTemplate::load(const std::string &file, const std::string &dir) {
    std::optional<nlohmann::json> config;
    if (!dir.empty()) config = read_config(fs::path(dir) / "tokenizer_config.json");
    return HfChatTemplate(file, read_file_bytes(file), config ? special_tokens_of(*config) : nlohmann::ordered_json());
}

void HfChatTemplate::save(const std::string &dir) const {
    const fs::path jinja = fs::path(dir) / "chat_template.jinja", config = fs::path(dir) / "tokenizer_config.json";
    std::error_code ec;
    if (fs::equivalent(file_, jinja, ec) || fs::equivalent(file_, config, ec))
        return; // the template's own file: the directory's files are the model's, and already there
    write_file_atomic(jinja.string(), source_);
    if (special_.is_object() && !special_.empty()) write_file_atomic(config.string(), special_.dump(2) + "\n");
    else fs::remove(config, ec);
}

void HfChatTemplate::copy_files(const std::string &from_dir, const std::string &to_dir) {
    for (const char *name : {"chat_template.jinja", "tokenizer_config.json"}) {
        const fs::path from = fs::path(from_dir) / name, to = fs::path(to_dir) / name;
        std::error_code ec;
        if (fs::equivalent(from, to, ec)) continue; // (false, with ec set, when either is missing)
        if (fs::is_regular_file(from, ec)) write_file_atomic(to.string(), read_file_bytes(from.string()));
        else fs::remove(to, ec);
    }
}

std::string HfChatTemplate::special_token(const std::string &name) const {
    return special_.is_object() && special_.contains(name) ? special_[name].get<std::string>() : std::string();
}

std::string HfChatTemplate::render(const std::vector<ChatMessage> &messages, bool generation_prompt,
                                   std::vector<std::pair<size_t, size_t>> *generation,
                                   const nlohmann::ordered_json &variables) const {
    // What apply_chat_template gives a template: the messages, tools (none unless the variables bring them) and
    // documents (none), the flag, and the special tokens' texts, which its keyword arguments override.
    nlohmann::ordered_json context = special_.is_object() ? special_ : nlohmann::ordered_json::object();
    if (variables.is_object())
        for (const auto &[k, v] : variables.items()) context[k] = v;
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ChatMessage &m : messages) {
        nlohmann::ordered_json message = {{"role", m.role}, {"content", m.content}};
        if (m.fields.is_object())
            for (const auto &[k, v] : m.fields.items()) message[k] = v;
        list.push_back(std::move(message));
    }
    context["messages"] = std::move(list);
    if (!context.contains("tools")) context["tools"] = nullptr;
    context["documents"] = nullptr;
    context["add_generation_prompt"] = generation_prompt;
    return template_.render(context, generation);
}

void apply_chat_template_option(Tokenizer &tok, const std::string &option) {
    if (option.empty()) return;
    if (option == "builtin") {
        tok.set_chat_template(nullptr);
        return;
    }
    std::error_code ec;
    if (!fs::is_regular_file(option, ec)) fail("--chat-template {}: no such file (or 'builtin')", option);
    tok.set_chat_template(
        std::make_shared<const HfChatTemplate>(HfChatTemplate::load(option, fs::path(tok.path()).parent_path())));
}

} // namespace zaya
