// zaya tokenize TOKENIZER [--text T | --file F | stdin] [--ids] [--bos]; zaya tokenize TOKENIZER --decode 5,17,3;
// zaya tokenize TOKENIZER --chat MESSAGES.json [--generation-prompt] [--render] [--chat-template FILE|builtin] —
// what a tokenizer makes of a text or a chat, token by token: to check a tokenizer.json or tokenizer.model against
// Hugging Face's `tokenizers` or sentencepiece, a chat against transformers' apply_chat_template, a fine-tuning
// chat's trained tokens, or to see what a prompt costs. TOKENIZER is a tokenizer file or a directory holding one
// (a model's, a data directory's).
#include "cli/commands.h"
#include "cli/infer_args.h"
#include "cli/model_arg.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/hf_chat_template.h"
#include "data/tokenizer.h"
#include "infer/answer_formats.h"
#include "infer/openai_api.h"

#include <fmt/format.h>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace zaya::cli {

namespace {

struct TokenizeArgs {
    std::string tokenizer, text, file, decode, chat, chat_template, chat_template_kwargs;
    bool has_text = false, ids_only = false, bos = false, generation_prompt = false, render = false;
};

// A chat file's messages: a JSON array of {"role", "content"} (or an object holding it as "messages", as a chat
// request's body or a JSONL chat record does).
// A chat file: OpenAI's messages, or an object with them and maybe "tools" (and "tool_choice",
// "parallel_tool_calls"), read as the server reads a request's (chat_messages) and in the model's tool format; its
// template variables get the tools where that format is the model's own.
std::vector<ChatMessage> read_chat(const std::string &path, const Tokenizer &tok, nlohmann::ordered_json &variables) {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(read_file_bytes(path), nullptr, false);
    const bool object = j.is_object() && j.contains("messages");
    if (!object && !j.is_array()) fail("--chat {}: not a JSON array of messages (or an object with 'messages')", path);
    try {
        ApiTools tools = object && has_tool_fields(j) ? parse_tools(j) : ApiTools{};
        tools.format = template_tool_format(tok);
        std::vector<ChatMessage> messages = chat_messages(nlohmann::json(object ? j["messages"] : j), tools);
        if (tools.native() && tools.active()) variables["tools"] = template_tools(tools);
        return messages;
    } catch (const ApiError &e) {
        fail("--chat {}: {}", path, e.message);
    }
}

// A chat's tokens, one a line with a third column: 1 where the model learns the token (an answer), 0 elsewhere; or
// with --render the chat's text, as apply_chat_template(tokenize=False) gives it.
void tokenize_chat(const Tokenizer &tok, const TokenizeArgs &a) {
    nlohmann::ordered_json variables = chat_variables(a.chat_template_kwargs);
    const std::vector<ChatMessage> messages = read_chat(a.chat, tok, variables);
    if (a.render) {
        const HfChatTemplate *t = tok.chat_template();
        if (!t) fail("--render: {} has no chat template of its own (give --chat-template FILE)", tok.path());
        fmt::print("{}", t->render(messages, a.generation_prompt, nullptr, variables));
        return;
    }
    std::vector<uint8_t> trained;
    const std::vector<int32_t> ids =
        chat_tokens(tok, messages, tok.bos_id(), a.generation_prompt, &trained, variables);
    if (a.ids_only) fmt::print("{}\n", fmt::join(ids, ","));
    else
        for (size_t i = 0; i < ids.size(); ++i)
            fmt::print("{}\t{}\t{}\n", ids[i],
                       nlohmann::json(tok.piece(ids[i])).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                       int(trained[i]));
    fmt::print(stderr, "{} tokens for {} messages ({}, {})\n", ids.size(), messages.size(), tok.path(),
               tok.chat_template() ? tok.chat_template()->file() : std::string("the built-in chat format"));
}

void run_tokenize(const TokenizeArgs &a) {
    Tokenizer tok = Tokenizer::load(a.tokenizer);
    apply_chat_template_option(tok, a.chat_template);
    if (!a.chat.empty()) return tokenize_chat(tok, a);
    if (!a.decode.empty()) {
        const auto lists = parse_token_lists(a.decode, "--decode");
        if (lists.size() != 1) fail("--decode takes one list of ids, comma-separated (no ';')");
        for (const int32_t id : lists[0])
            if (id >= tok.vocab_size())
                fail("--decode: id {} is past the vocabulary ({} tokens)", id, tok.vocab_size());
        fmt::print("{}\n", tok.decode(lists[0]));
        return;
    }
    const std::string text = !a.file.empty() ? read_file_bytes(a.file)
                             : a.has_text    ? a.text
                                             : std::string(std::istreambuf_iterator<char>(std::cin), {});
    std::vector<int32_t> ids = tok.encode(text);
    if (a.bos) {
        if (tok.bos_id() < 0) fail("--bos: {} has no BOS token", tok.path());
        ids.insert(ids.begin(), tok.bos_id());
    }
    if (a.ids_only) {
        fmt::print("{}\n", fmt::join(ids, ","));
    } else {
        // A piece as a JSON string: spaces, control characters and the pieces' own quotes stay visible.
        for (const int32_t id : ids)
            fmt::print("{}\t{}\n", id,
                       nlohmann::json(tok.piece(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    fmt::print(stderr, "{} tokens for {} bytes ({})\n", ids.size(), text.size(), tok.path());
}

} // namespace

void register_tokenize(CLI::App &app) {
    auto *cmd = app.add_subcommand("tokenize", "Show the tokens a tokenizer (tokenizer.model or tokenizer.json) makes "
                                               "of a text, or the text of token ids (--decode)");
    auto a = std::make_shared<TokenizeArgs>();
    cmd->add_option("tokenizer", a->tokenizer,
                    "A tokenizer file, or a directory holding tokenizer.model or tokenizer.json (a model's or a data "
                    "directory's)")
        ->required();
    auto *text = cmd->add_option("--text", a->text, "The text (default: standard input)");
    cmd->add_option("--file", a->file, "Read the text from this file, byte for byte")->check(CLI::ExistingFile);
    cmd->add_flag("--ids", a->ids_only, "Print the ids alone, comma-separated (as --tokens and --decode take them)");
    cmd->add_flag("--bos", a->bos, "Prepend BOS, as a prompt is fed (otherwise no special token is added)");
    cmd->add_option("--decode", a->decode, "Print the text of these ids (comma-separated) instead");
    cmd->add_option("--chat", a->chat,
                    "Tokenize this chat instead: a JSON file of messages [{\"role\": ..., \"content\": ...}, ...] "
                    "(or an object with \"messages\"), written in the chat format; a third column says 1 where the "
                    "model learns the token in fine-tuning (the answers)")
        ->check(CLI::ExistingFile);
    cmd->add_flag("--generation-prompt", a->generation_prompt,
                  "With --chat: end with the opening of the model's answer (add_generation_prompt)");
    cmd->add_flag("--render", a->render, "With --chat: print the chat template's text instead of tokens");
    add_chat_template_option(cmd, a->chat_template, "With --chat: ");
    cmd->add_option("--chat-template-kwargs", a->chat_template_kwargs,
                    "With --chat: the chat template's other variables, a JSON object, e.g. "
                    "'{\"enable_thinking\": false}'");
    cmd->callback([a, text] {
        a->has_text = text->count() > 0;
        if (int(a->has_text) + int(!a->file.empty()) + int(!a->decode.empty()) + int(!a->chat.empty()) > 1)
            fail("tokenize: give one of --text, --file, --decode and --chat");
        if (a->chat.empty() &&
            (a->generation_prompt || a->render || !a->chat_template.empty() || !a->chat_template_kwargs.empty()))
            fail("tokenize: --generation-prompt, --render, --chat-template and --chat-template-kwargs go with --chat");
        run_tokenize(*a);
    });
}

} // namespace zaya::cli
