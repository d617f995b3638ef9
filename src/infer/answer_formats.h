// How a chat model's answers are read: the format it writes tool calls in (infer/tool_formats.h) and the markers
// around its reasoning (infer/reasoning.h), from its chat template unless the command line says otherwise (vLLM's
// --tool-call-parser and --reasoning-parser). Markers the tokenizer keeps as special tokens (which decoding skips,
// as transformers' skip_special_tokens does) are made text, so that answers show them to their readers.
#pragma once
#include "data/tokenizer.h"
#include "infer/reasoning.h"
#include "infer/tool_formats.h"

#include <optional>
#include <string>
#include <vector>

namespace zaya {

// The format the model's own chat template writes tool calls in (tool_format_of_template), else Json (no template of
// its own, or one that writes none, or one that does not load).
ToolFormat template_tool_format(const Tokenizer &tok);

// --tool-call-parser's value for a model with tokenizer `tok` (null: none): "json" → zaya's own object; a format's
// name → that format, which needs the model's own chat template (the built-in format has no place for tools);
// "auto" → the format the chat template writes calls in (tool_format_of_template), else Json. Fails naming the
// option.
ToolFormat resolve_tool_format(Tokenizer *tok, const std::string &option);

// --reasoning-parser's value: "none" → no reasoning is split off; "think" (or vLLM's names "qwen3",
// "deepseek_r1") → <think>…</think>; "auto" → the markers the chat template writes (reasoning_tags_of_template),
// else none. Fails naming the option.
std::optional<ReasoningTags> resolve_reasoning(Tokenizer *tok, const std::string &option);

// Whether the prompt's ids leave a reasoning block open (prompt_opens_reasoning of the text of its last 32 tokens,
// which hold any generation prompt): the answer then begins inside it.
bool prompt_ids_open_reasoning(const Tokenizer &tok, const std::vector<int32_t> &prompt, const ReasoningTags &tags);

// What `zaya serve` and `zaya info` say of them: "tool calls: zaya_xml (the chat template's), reasoning: <think>".
std::string answer_formats_summary(ToolFormat tools, const std::optional<ReasoningTags> &reasoning);

} // namespace zaya
