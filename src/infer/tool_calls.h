// Tool calling (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`) for a model without a tool format of its
// own: ZAYA1's chat format (Gemma3's) has none. The tools are described to the model at the start of the
// conversation, and its answer is held by structured outputs (infer/json_schema.h) to one JSON object, written
// without spaces between its tokens (JsonSchema's compact texts, as nlohmann's dump() writes):
//   {"tool_calls":[{"name":TOOL,"arguments":{...}},...]}   calls of the tools offered, each one's arguments a value
//                                                          of its `parameters` schema (one call without
//                                                          parallel_tool_calls)
//   {"content":"..."}                                      an answer in words (tool_choice "auto" only)
// which the server reads back into OpenAI's message: `tool_calls` with ids and finish_reason "tool_calls", or
// `content`. Earlier turns are written the way the model would have: an assistant's calls as that object (and, with
// tools in force, its words as {"content": ...}), the tools' results as a user turn. tool_choice "none" (the
// default without tools) leaves the tools out and the answer free.
#pragma once
#include "infer/api_error.h"
#include "infer/json_schema.h"

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

struct ToolSpec {
    std::string name, description;
    nlohmann::ordered_json parameters; // a JSON Schema of the arguments (an object); {"type": "object"} if not given
};

struct ApiTools {
    enum class Choice { None, Auto, Required, Named };
    std::vector<ToolSpec> tools;
    Choice choice = Choice::None;
    std::string named;    // Choice::Named: the tool to call
    bool parallel = true; // several calls in one answer (parallel_tool_calls)
    bool active() const { return choice != Choice::None; }
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat request's body (ordered: the parameters' properties
// keep their order). Each tool's parameters must compile as a structured-outputs schema. Throws ApiError naming the
// field ("tools[1].function.name", "tools[0].function.parameters.properties.when: 'not' is not supported ...").
ApiTools parse_tools(const nlohmann::ordered_json &body);

// What the model is told of the tools and of how to answer, for the system turn (empty when !t.active()).
std::string tools_instructions(const ApiTools &t);

// The schema an answer is held to while t.active(): the calls tool_choice allows (one at most without
// parallel_tool_calls), or, with "auto", words instead.
std::shared_ptr<const JsonSchema> tools_schema(const ApiTools &t);

// How an earlier assistant turn is written: its `tool_calls` (OpenAI's form, messages[i].tool_calls at `where`;
// arguments a JSON text) as the object above, or its words as {"content": ...}. Throws ApiError naming the field.
std::string written_tool_calls(const nlohmann::json &calls, const std::string &where);
std::string written_content(const std::string &content);
// A tool's result (a "tool" message answering call `id` of tool `name`), as the user turn's text.
std::string written_tool_result(const std::string &id, const std::string &name, const std::string &content);

// An answer read back. `text` is what the model wrote (held to tools_schema, or cut short by max_tokens or a stop
// string), `finish_reason` the engine's. Calls get ids "call_<id_prefix>_<k>"; finish_reason becomes "tool_calls".
// Words, or a text that is not a whole answer, become `content` (what the answer's words say so far, or the text
// itself when it began as no answer in words).
struct ToolAnswer {
    nlohmann::json tool_calls = nullptr; // [{"id", "type": "function", "function": {"name", "arguments"}}], or null
    std::string content;
    std::string finish_reason;
};
ToolAnswer read_tool_answer(const std::string &text, const std::string &finish_reason, const std::string &id_prefix);

// The words of an answer {"content": "..."} as they are written, for a stream: feed the text as it comes, get the
// string's characters it completes (escapes decoded; a partial escape, or a high surrogate without its low one,
// waits for the next piece). Nothing comes out of an answer that is not words.
class ContentStream {
  public:
    std::string feed(std::string_view text);
    bool words() const { return phase_ == kString || phase_ == kDone; } // the answer is words (its string began)

  private:
    static constexpr int kString = 6, kDone = 7, kOther = 8;
    int phase_ = 0;      // 0 '{', 1 '"', 2 the key, 3 ':', 4 '"' opening the value, kString, kDone, kOther
    size_t key_at_ = 0;  // phase 2: bytes of `content"` matched
    std::string held_;   // kString: undecoded bytes (a partial escape)
};

} // namespace zaya
