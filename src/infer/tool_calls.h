// Tool calling (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`) for a model without a tool format of its
// own: ZAYA1's chat format (Gemma3's) has none. The tools are described to the model at the start of the
// conversation, and a call is one JSON object, written without spaces between its tokens (JsonSchema's compact
// texts, as nlohmann's dump() writes):
//   {"tool_calls":[{"name":TOOL,"arguments":{...}},...]}   calls of the tools offered, each one's arguments a value
//                                                          of its `parameters` schema (one call without
//                                                          parallel_tool_calls)
// held by structured outputs (infer/json_schema.h). Under tool_choice "required" or a named function the answer is
// that object from its first token; under "auto" (the default with tools) the model answers in plain words, and
// {"tool_calls": wherever it appears — the trigger of a lazy constraint (infer/json_constraint.h) — begins the object,
// held to the schema from there to its close, which ends the answer. The server reads the answer back into OpenAI's
// message: `tool_calls` with ids and finish_reason "tool_calls", and the words before them (if any) as `content`, as
// OpenAI's models may write both. Earlier turns are written the way the model would have: an assistant's words, then
// its calls as that object, the tools' results as a user turn. tool_choice "none" (the default without tools) leaves
// the tools out and the answer free.
//
// A model that writes calls in a format of its own (ZAYA1-8B's <zyphra_tool_call>, Qwen's <tool_call>: a `format`
// of infer/tool_formats.h, found in its chat template) is prompted and read in it instead: the tools go to its chat
// template as `tools`, earlier calls and results as the messages the template writes itself, and an "auto" answer
// is read in that format, unconstrained, as vLLM's tool parsers read it. Under "required" and a named function the
// answer is still held to the object above from its first token (vLLM holds those to JSON likewise).
#pragma once
#include "infer/api_error.h"
#include "infer/json_schema.h"
#include "infer/tool_formats.h"

#include <nlohmann/json.hpp>

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

struct ApiTools {
    enum class Choice { None, Auto, Required, Named };
    std::vector<ToolSpec> tools;
    Choice choice = Choice::None;
    std::string named;    // Choice::Named: the tool to call
    bool parallel = true; // several calls in one answer (parallel_tool_calls)
    // How the model writes calls: Json, the object above described by tools_instructions(); else the model's own
    // format, which its chat template describes. Set by whoever knows the model (the server, `zaya prepare`).
    ToolFormat format = ToolFormat::Json;
    bool active() const { return choice != Choice::None; }
    bool native() const { return format != ToolFormat::Json; }
    // The form of this request's answer: the model's own under "auto", else the object above, held from the start.
    ToolFormat answer_format() const { return choice == Choice::Auto ? format : ToolFormat::Json; }
};

// `tools`, `tool_choice` and `parallel_tool_calls` of a chat request's body (ordered: the parameters' properties
// keep their order). Each tool's parameters must compile as a structured-outputs schema. Throws ApiError naming the
// field ("tools[1].function.name", "tools[0].function.parameters.properties.when: 'not' is not supported ...").
ApiTools parse_tools(const nlohmann::ordered_json &body);
// Whether a body (a request, a chat record, a chat file) has any field parse_tools reads: only then is it worth
// parsing again in order.
template <class Json> bool has_tool_fields(const Json &body) {
    for (const char *key : {"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"})
        if (body.contains(key)) return true;
    return false;
}

// What the model is told of the tools and of how to answer, for the system turn (empty when !t.active(), and in a
// model's own format, whose template describes them).
std::string tools_instructions(const ApiTools &t);
// The tools as a chat template reads them (OpenAI's form: [{"type": "function", "function": {"name", "description",
// "parameters"}}]); null when !t.active().
nlohmann::ordered_json template_tools(const ApiTools &t);

// The first bytes of every call object: what turns an "auto" answer into calls.
inline constexpr std::string_view kToolCallsTrigger = R"({"tool_calls":)";

// The schema a call object is held to while t.active(): the calls tool_choice allows (one at most without
// parallel_tool_calls); null when the answer is in the model's own format (nothing is held).
std::shared_ptr<const JsonSchema> tools_schema(const ApiTools &t);
// The trigger of the schema's lazy constraint: kToolCallsTrigger under "auto"; empty (held from the first token)
// under "required" and a named function, and in a model's own format (nothing held).
std::string tools_trigger(const ApiTools &t);

// How an earlier assistant turn's `tool_calls` (OpenAI's form, messages[i].tool_calls at `where`; arguments a JSON
// text) are written: as the object above, after the turn's words (`content`; a line between them). Throws ApiError
// naming the field.
std::string written_tool_calls(const std::string &content, const nlohmann::json &calls, const std::string &where);
// The same calls as a model's own chat template reads them: [{"id" (when given), "type": "function", "function":
// {"name", "arguments" (an object)}}]. Throws ApiError naming the field.
nlohmann::ordered_json template_tool_calls(const nlohmann::json &calls, const std::string &where);
// A tool's result (a "tool" message answering call `id` of tool `name`), as the user turn's text.
std::string written_tool_result(const std::string &id, const std::string &name, const std::string &content);

// An answer read back. `text` is what the model wrote (words, calls held to tools_schema after words or none; either
// cut short by max_tokens or a stop string), `finish_reason` the engine's. Calls get ids "call_<id_prefix>_<k>" and
// their arguments as written; an answer whose calls ended at the object's close has finish_reason "tool_calls".
// Calls cut short are the calls begun (a name written), the last one's arguments cut where the text ends, as a
// stream has sent them. `content` is the words before the calls, without the whitespace that ends them ("" if
// none), or, without calls, the whole text as written.
struct ToolAnswer {
    nlohmann::json tool_calls = nullptr; // [{"id", "type": "function", "function": {"name", "arguments"}}], or null
    std::string content;
    std::string finish_reason;
};
// `t`: the request's tools, whose answer_format() the text is in (the model's own format: read as
// infer/tool_formats.h reads it, calls closed or cut short alike; without parallel_tool_calls the first call only).
ToolAnswer read_tool_answer(const ApiTools &t, const std::string &text, const std::string &finish_reason,
                            const std::string &id_prefix);

// OpenAI's `delta.tool_calls` for a piece: a call that begins with its "index", "id" ("call_<id_prefix>_<index>"),
// "type" and "function" {"name", "arguments" so far}; one under way with its "index" and "function" {"arguments"}.
nlohmann::json call_deltas(const AnswerPiece &piece, const std::string &id_prefix);

// An answer read as it is written, for a stream (and for read_tool_answer): feed the text piece by piece, then
// finish(). Its words end where kToolCallsTrigger appears, as the engine decides (json_constraint.h's trigger_step);
// after the trigger whitespace between tokens is allowed, as in any JSON; calls of another shape stop the reading
// (nothing more comes out but, before a name was written, the text held, as words, from finish()).
// In a model's own format (AnswerStream(t) with t.answer_format() tagged), infer/tool_formats.h's reader reads it:
// an XML call begins at its name and its arguments follow a parameter at a time; a Hermes call goes out whole.
class AnswerStream {
  public:
    AnswerStream() = default;
    explicit AnswerStream(const ApiTools &t);
    AnswerPiece feed(std::string_view text);
    // The end of the text: the words held back (trailing whitespace, a part of the trigger, or all from the trigger
    // on when no call's name was written), whole; nothing once calls began.
    AnswerPiece finish();
    bool calls() const { return tagged_ ? tagged_->calls() : calls_; } // the answer has calls (a name is written)
    // the calls' object closed (a tagged format: a call's block closed)
    bool complete() const { return tagged_ ? tagged_->calls() : phase_ == Phase::Done; }
    // The answer's finish reason, given the engine's: "tool_calls" for calls whose object closed as it stopped.
    std::string finish_reason(const std::string &engine_reason) const;

  private:
    enum class Phase : uint8_t {
        Words, CallsBracket, Tokens, NameQuote, Name, Args, CallClose, AfterCall, Close, Done, Other
    };
    void byte(uint8_t b, AnswerPiece &out);
    void release_words(AnswerPiece &out); // Words: what can no longer begin calls
    size_t words_end(size_t tail) const;
    bool punct(uint8_t b, char want, Phase next); // whitespace, or `want` then `next`; else Other
    void expect(std::string_view a, std::string_view b, std::string_view c, Phase next); // tokens, then `next`
    AnswerPiece::Call &call_piece(AnswerPiece &out);

    AnswerPiece tagged_piece(AnswerPiece p) const; // a tagged format's piece, but calls past the first without
                                                   // parallel_tool_calls
    std::shared_ptr<TaggedCallReader> tagged_; // the model's own format's reader; null: zaya's object
    bool parallel_ = true;
    Phase phase_ = Phase::Words;
    Phase after_ = Phase::Words; // Tokens: where they lead
    bool calls_ = false;           // a call's name was written (the phase may have gone on to Other since)
    std::string key_;             // Name: the name so far
    std::array<std::string_view, 3> tokens_; // Tokens: to match in turn, whitespace allowed between them
    size_t token_ = 0, at_ = 0;   // Tokens: the token under way, and its bytes matched
    size_t matched_ = 0;          // Words: the trigger's bytes the text ends with (trigger_step)
    std::string words_; // the words not yet released (Words: its end; from the trigger to a call's name: all)
    size_t space_begin_ = 0, space_end_ = 0; // Words: the whitespace words_ held at the last release
    std::string held_;  // Args: a partial UTF-8 character
    size_t index_ = 0;            // the call under way
    int depth_ = 0;               // Args: open containers
    bool in_string_ = false, escaped_ = false; // Args: inside a string, after its backslash
};

} // namespace zaya
