// Tool calling (OpenAI's `tools`, `tool_choice`, `parallel_tool_calls`) for a model without a tool format of its
// own: ZAYA1's chat format (Gemma3's) has none. The tools are described to the model at the start of the
// conversation, and a call is one JSON object, written without spaces between its tokens (JsonSchema's compact
// texts, as nlohmann's dump() writes):
//   {"tool_calls":[{"name":TOOL,"arguments":{...}},...]}   calls of the tools offered, each one's arguments a value
//                                                          of its `parameters` schema (one call without
//                                                          parallel_tool_calls)
// held by structured outputs (infer/json_schema.h). Under tool_choice "required" or a named function the answer is
// that object from its first token; under "auto" (the default with tools) the model answers in plain words unless
// it begins (after any whitespace) with {"tool_calls": — the trigger of a lazy constraint (infer/json_constraint.h),
// from which the object is held to the schema. The server reads the answer back into OpenAI's message: `tool_calls`
// with ids and finish_reason "tool_calls", or `content`. Earlier turns are written the way the model would have: an
// assistant's calls as that object, its words as they are, the tools' results as a user turn. tool_choice "none"
// (the default without tools) leaves the tools out and the answer free.
#pragma once
#include "infer/api_error.h"
#include "infer/json_schema.h"

#include <nlohmann/json.hpp>

#include <array>
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

// The first bytes of every call object: what turns an "auto" answer into calls.
inline constexpr std::string_view kToolCallsTrigger = R"({"tool_calls":)";

// The schema a call object is held to while t.active(): the calls tool_choice allows (one at most without
// parallel_tool_calls).
std::shared_ptr<const JsonSchema> tools_schema(const ApiTools &t);
// The trigger of the schema's lazy constraint: kToolCallsTrigger under "auto"; empty (held from the first token)
// under "required" and a named function.
std::string tools_trigger(const ApiTools &t);

// How an earlier assistant turn's `tool_calls` (OpenAI's form, messages[i].tool_calls at `where`; arguments a JSON
// text) are written: as the object above. Throws ApiError naming the field.
std::string written_tool_calls(const nlohmann::json &calls, const std::string &where);
// A tool's result (a "tool" message answering call `id` of tool `name`), as the user turn's text.
std::string written_tool_result(const std::string &id, const std::string &name, const std::string &content);

// An answer read back. `text` is what the model wrote (words, or calls held to tools_schema; either cut short by
// max_tokens or a stop string), `finish_reason` the engine's. Calls get ids "call_<id_prefix>_<k>" and their
// arguments as written; a whole answer of calls that ended at the object's close has finish_reason "tool_calls".
// Calls cut short are the calls begun (a name written), the last one's arguments cut where the text ends, as a
// stream has sent them; any other text is `content` itself.
struct ToolAnswer {
    nlohmann::json tool_calls = nullptr; // [{"id", "type": "function", "function": {"name", "arguments"}}], or null
    std::string content;
    std::string finish_reason;
};
ToolAnswer read_tool_answer(const std::string &text, const std::string &finish_reason, const std::string &id_prefix);

// What a piece of an answer adds: words (the text as written, once it has turned away from the trigger: the
// whitespace and trigger bytes held until then come with the first words), or calls begun (index, name) and the
// bytes of their arguments (the arguments' JSON text as written), in order; whole UTF-8 characters only.
struct AnswerPiece {
    struct Call {
        size_t index = 0;
        std::string name;      // non-empty: the call begins here (OpenAI's first delta of a call: id, type, name)
        std::string arguments; // the arguments' text this piece adds
    };
    std::string words;
    std::vector<Call> calls;
};

// OpenAI's `delta.tool_calls` for a piece: a call that begins with its "index", "id" ("call_<id_prefix>_<index>"),
// "type" and "function" {"name", "arguments" so far}; one under way with its "index" and "function" {"arguments"}.
nlohmann::json call_deltas(const AnswerPiece &piece, const std::string &id_prefix);

// An answer read as it is written, for a stream (and for read_tool_answer): feed the text piece by piece. It is
// calls if it begins (after whitespace) with kToolCallsTrigger exactly, as the engine decides; after the trigger
// whitespace between tokens is allowed, as in any JSON; calls of another shape stop the reading (nothing more comes
// out: neither words() nor, before a name was written, calls()).
class AnswerStream {
  public:
    AnswerPiece feed(std::string_view text);
    bool words() const { return phase_ == Phase::Words; } // the answer is words (it turned away from the trigger)
    bool calls() const { return calls_; }                   // the answer is calls (the first one's name is written)
    bool complete() const { return phase_ == Phase::Done; } // the calls' object closed

  private:
    enum class Phase : uint8_t {
        Trigger, Words, CallsBracket, Tokens, NameQuote, Name, Args, CallClose, AfterCall, Close, Done, Other
    };
    void byte(uint8_t b, AnswerPiece &out);
    bool punct(uint8_t b, char want, Phase next); // whitespace, or `want` then `next`; else Other
    std::string release_whole();
    void expect(std::string_view a, std::string_view b, std::string_view c, Phase next); // tokens, then `next`
    AnswerPiece::Call &call_piece(AnswerPiece &out);

    Phase phase_ = Phase::Trigger;
    Phase after_ = Phase::Trigger; // Tokens: where they lead
    bool calls_ = false;           // a call's name was written (the phase may have gone on to Other since)
    std::string key_;             // Name: the name so far
    std::array<std::string_view, 3> tokens_; // Tokens: to match in turn, whitespace allowed between them
    size_t token_ = 0, at_ = 0;   // Trigger: its bytes matched; Tokens: the token under way, and its bytes matched
    std::string held_; // Trigger: the bytes so far; Words, Args: a partial UTF-8 character
    size_t index_ = 0;            // the call under way
    int depth_ = 0;               // Args: open containers
    bool in_string_ = false, escaped_ = false; // Args: inside a string, after its backslash
};

} // namespace zaya
