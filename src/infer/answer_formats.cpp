#include "infer/answer_formats.h"

#include "core/error.h"
#include "data/hf_chat_template.h"

#include <fmt/format.h>

#include <algorithm>

namespace zaya {

namespace {

// The model's own chat template, or null (none, or one that does not load: chats then fail on their own).
const HfChatTemplate *own_template(const Tokenizer *tok) {
    if (!tok) return nullptr;
    try {
        return tok->chat_template();
    } catch (const Error &) {
        return nullptr;
    }
}

} // namespace

ToolFormat template_tool_format(const Tokenizer &tok) {
    const HfChatTemplate *t = own_template(&tok);
    return t ? tool_format_of_template(t->source()).value_or(ToolFormat::Json) : ToolFormat::Json;
}

ToolFormat resolve_tool_format(Tokenizer *tok, const std::string &option) {
    const HfChatTemplate *t = own_template(tok);
    ToolFormat f = ToolFormat::Json;
    if (option == "auto") {
        if (tok) f = template_tool_format(*tok);
    } else if (const auto named = tool_format_named(option)) {
        f = *named;
        if (f != ToolFormat::Json && !t)
            fail("--tool-call-parser {}: the model has no chat template of its own to describe tools in that format "
                 "(give --chat-template FILE, or use json)",
                 option);
    } else {
        fail("--tool-call-parser: '{}' is not one of auto, json, zaya_xml, qwen3_coder, hermes", option);
    }
    if (f != ToolFormat::Json) {
        const auto [open, close] = tool_call_tags(f);
        tok->show_as_text(open);
        tok->show_as_text(close);
    }
    return f;
}

std::optional<ReasoningTags> resolve_reasoning(Tokenizer *tok, const std::string &option) {
    std::optional<ReasoningTags> tags;
    if (option == "auto") {
        if (const HfChatTemplate *t = own_template(tok)) tags = reasoning_tags_of_template(t->source());
    } else if (option == "think" || option == "qwen3" || option == "deepseek_r1") {
        tags = ReasoningTags{};
    } else if (option != "none") {
        fail("--reasoning-parser: '{}' is not one of auto, none, think (qwen3, deepseek_r1)", option);
    }
    if (tags && tok) {
        tok->show_as_text(tags->open);
        tok->show_as_text(tags->close);
    }
    return tags;
}

bool prompt_ids_open_reasoning(const Tokenizer &tok, const std::vector<int32_t> &prompt, const ReasoningTags &tags) {
    const auto tail = std::ptrdiff_t(std::min<size_t>(prompt.size(), 32));
    return prompt_opens_reasoning(tok.decode({prompt.end() - tail, prompt.end()}), tags);
}

std::string answer_formats_summary(ToolFormat tools, const std::optional<ReasoningTags> &reasoning) {
    return fmt::format("tool calls: {}, reasoning: {}",
                       tools == ToolFormat::Json ? "zaya's JSON object" : tool_format_name(tools),
                       reasoning ? reasoning->open + "…" + reasoning->close : "not split off");
}

} // namespace zaya
