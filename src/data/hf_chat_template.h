// A model's own chat template: the Jinja `chat_template` a Hugging Face model directory brings (chat_template.jinja,
// or tokenizer_config.json's), run by data/jinja.h as `transformers`' apply_chat_template runs it, with the special
// tokens' texts tokenizer_config.json names (bos_token, eos_token, ...) as variables. A tokenizer loaded from such a
// directory carries it (Tokenizer::chat_template), and data/chat_template.h's chats then take the model's format
// instead of ZAYA1's built-in one.
#pragma once
#include "core/error.h"
#include "data/jinja.h"

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zaya {

struct ChatMessage;
class Tokenizer;

class HfChatTemplate {
  public:
    // The template of model directory `dir`: its chat_template.jinja, else tokenizer_config.json's chat_template (a
    // text, or a list of named ones, of which "default"), with that file's special tokens. None when the directory
    // has neither. Throws naming the file when one is there but unreadable, not JSON, or its template does not parse.
    static std::optional<HfChatTemplate> find_in(const std::string &dir);
    // A template file given by name (--chat-template FILE), with `dir`'s tokenizer_config.json special tokens, if any.
    static HfChatTemplate load(const std::string &file, const std::string &dir);

    // The text of a chat: `generation_prompt` asks for the opening of the model's answer (add_generation_prompt).
    // `generation`: the byte ranges of {% generation %} blocks, where the template has any. Throws on the template's
    // errors (raise_exception), naming the file.
    // `variables`: more of them (transformers' apply_chat_template **kwargs, vLLM's chat_template_kwargs, e.g.
    // {"enable_thinking": false}), over the special tokens' texts; an object, or null. Its "tools", when there, are
    // the chat's tools in OpenAI's form (the server's; a person's variables may not set them: check_chat_variables).
    std::string render(const std::vector<ChatMessage> &messages, bool generation_prompt,
                       std::vector<std::pair<size_t, size_t>> *generation = nullptr,
                       const nlohmann::ordered_json &variables = nullptr) const;

    // Writes the template where find_in finds it again: DIR/chat_template.jinja, and the special tokens' texts (when
    // any) as DIR/tokenizer_config.json; atomically. A data directory keeps the chat format its chats were written
    // in, and the models trained on it keep it too (copy_files).
    void save(const std::string &dir) const;
    // The files of `from_dir` that find_in reads (chat_template.jinja, tokenizer_config.json), copied to `to_dir`;
    // those `to_dir` has and `from_dir` has not are removed, so a directory never keeps another model's format.
    static void copy_files(const std::string &from_dir, const std::string &to_dir);

    const std::string &file() const { return file_; }
    const std::string &source() const { return source_; }
    bool has_generation_blocks() const { return generation_blocks_; }
    // The texts of tokenizer_config.json's special tokens: "eos_token" → "<|im_end|>"; empty when not named.
    std::string special_token(const std::string &name) const;

  private:
    HfChatTemplate(std::string file, std::string source, nlohmann::ordered_json special);
    std::string file_, source_;
    jinja::Template template_;
    nlohmann::ordered_json special_; // {"bos_token": "<bos>", ...}: the variables apply_chat_template adds
    bool generation_blocks_ = false;
};

// Checks chat template variables given by a person (--chat-template-kwargs, a request's chat_template_kwargs, named
// `where`): a JSON object that does not set the chat's own (messages, tools, documents, add_generation_prompt).
// Inline: the request parser has it without linking the interpreter.
inline void check_chat_variables(const nlohmann::ordered_json &variables, const std::string &where) {
    if (variables.is_null()) return;
    if (!variables.is_object()) fail("{}: must be a JSON object of the chat template's variables", where);
    for (const char *own : {"messages", "tools", "documents", "add_generation_prompt"})
        if (variables.contains(own)) fail("{}: '{}' is the chat's own variable, not one to set", where, own);
}

// --chat-template's value: a Jinja file, which `tok` then carries (with the special tokens of the tokenizer file's
// directory's tokenizer_config.json, if any), or "builtin" for ZAYA1's turn format; empty changes nothing.
void apply_chat_template_option(Tokenizer &tok, const std::string &option);

} // namespace zaya
