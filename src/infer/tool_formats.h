// Tool calls that a model writes in its own chat format, read as vLLM's tool parsers read them: each call in a block
// between tags, after words or between them, the calls and the words both read from a whole answer or as it streams.
//   zaya_xml (Zyphra's ZAYA1-8B), qwen3_coder:   <zyphra_tool_call> (or <tool_call>)
//                                                <function=NAME>
//                                                <parameter=KEY>
//                                                VALUE (any text, "<" included, up to </parameter>)
//                                                </parameter>
//                                                </function>
//                                                </zyphra_tool_call> (or </tool_call>)
//     each value converted by the type its tool's `parameters` schema gives the property (a string when not known);
//   hermes (Qwen2.5, Qwen3, Hermes):             <tool_call>{"name": NAME, "arguments": {...}}</tool_call>
// A call is given whole once its block closes (or, cut short by the end of the text, from what was written of it); a
// block that holds no call is words, as written. zaya's own JSON object (infer/tool_calls.h) is read there, not here.
#pragma once
#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya {

// A tool a request offers (OpenAI's `tools`, read by infer/tool_calls.h's parse_tools).
struct ToolSpec {
    std::string name, description;
    nlohmann::ordered_json parameters; // a JSON Schema of the arguments (an object); {"type": "object"} if not given
};

// What a piece of an answer adds: words (the text as written, but for what may yet begin calls: zaya's object
// (infer/tool_calls.h) holds whitespace at its end and a part of its trigger until the text goes on otherwise, a
// tagged format a part of its opening tag), or calls begun (index, name) and the bytes of their arguments (the
// arguments' JSON text as written), in order; whole UTF-8 characters only.
struct AnswerPiece {
    struct Call {
        size_t index = 0;
        std::string name;      // non-empty: the call begins here (OpenAI's first delta of a call: id, type, name)
        std::string arguments; // the arguments' text this piece adds
    };
    std::string words;
    std::vector<Call> calls;
};

// The ways a model writes its tool calls. Json: zaya's own object (infer/tool_calls.h, not handled here).
enum class ToolFormat : uint8_t { Json, ZayaXml, Qwen3Coder, Hermes };
const char *tool_format_name(ToolFormat f);                         // "json", "zaya_xml", "qwen3_coder", "hermes"
std::optional<ToolFormat> tool_format_named(std::string_view name); // the inverse; nullopt for an unknown name
// The format a chat template's text writes calls in: "<zyphra_tool_call>" → ZayaXml; else "<tool_call>" and
// "<function=" → Qwen3Coder; else "<tool_call>" (but not GLM's "<arg_key>" pairs in it) → Hermes; else nullopt.
std::optional<ToolFormat> tool_format_of_template(std::string_view source);
// A tagged format's opening and closing tags ("<zyphra_tool_call>", "</zyphra_tool_call>"; "<tool_call>",
// "</tool_call>"); two empty ones for Json.
std::pair<std::string_view, std::string_view> tool_call_tags(ToolFormat f);

// An answer in a tagged format read as it is written: feed the text piece by piece, then finish(). Words are the text
// before the first call, outside the blocks (text after a call is not the answer's: zaya's own object is read so,
// and vLLM's hermes parser), released once they cannot begin an opening tag, but for whitespace at their end (held:
// dropped before a call) and a UTF-8 character begun. In the XML formats a call begins (index 0, 1, ..., its name)
// once its <function=NAME> is written, and its arguments' JSON text follows a parameter at a time, each once its
// value is closed ('{"city":"Paris"', then ',"days":3', then '}' at </function>), as vLLM streams them. A Hermes call
// written {"name": NAME, "arguments": {...}} begins once its head is written, and its arguments follow as they come
// (as written, without the whitespace between their tokens: no conversion); a block in another form (no arguments,
// arguments as a JSON text) comes whole in the piece whose text closes it, or is words. The pieces add up to the
// same words and calls however the text is cut. Built with Json, the reader reads no calls: all the text is words.
class TaggedCallReader {
  public:
    TaggedCallReader(ToolFormat f, std::vector<ToolSpec> tools);
    AnswerPiece feed(std::string_view text);
    // The end of the text: the words held, and a block left open read as far as it goes (its calls begun, with the
    // parameters written so far; or, none begun, its text as words).
    AnswerPiece finish();
    bool calls() const { return index_ > 0; } // at least one call was read

  private:
    // How far a block's text goes: more may come (Open), its closing tag was read (Closed), the answer ended (Cut).
    enum class Reach : uint8_t { Open, Closed, Cut };
    bool open_block(AnswerPiece &out);  // outside a block: words up to an opening tag, which begins one
    bool close_block(AnswerPiece &out); // inside: up to the closing tag, which ends the block
    void end_block(size_t limit, Reach reach, AnswerPiece &out); // the block's calls read, or its text as words
    void read_xml(size_t limit, Reach reach, AnswerPiece &out);   // an XML block's calls, as far as they are written
    void read_hermes(size_t limit, Reach reach, AnswerPiece &out); // a Hermes block's call, as far as it is written
    void add_arguments(std::string text, AnswerPiece &out);       // to the call under way
    void words(std::string_view text, AnswerPiece &out);          // text outside blocks, whitespace held

    ToolFormat format_;
    std::vector<ToolSpec> tools_;
    std::string_view open_, close_; // the tags
    std::string text_;              // outside a block: the text held (a part of the tag, a character begun); inside:
                                    // the block's text after its opening tag
    std::string space_;             // whitespace at the words' end, held
    bool in_block_ = false;
    size_t searched_ = 0; // inside a block: the bytes of text_ without the closing tag's start
    size_t index_ = 0;    // the calls begun
    // An XML block read as it comes: where in text_ reading goes on, a function and a parameter under way (its name,
    // its value's start), whether the function has parameters yet and the tool it calls, whether the block has begun
    // a call.
    size_t xml_at_ = 0, value_at_ = 0, scanned_ = 0; // (scanned_: a value's bytes searched for its end, but a tag's
                                                     // length)
    bool in_function_ = false, in_parameter_ = false, parameters_ = false, block_calls_ = false;
    std::string parameter_;
    const ToolSpec *tool_ = nullptr;
    // A Hermes block read as it comes: its head not yet read, its arguments' object under way (where reading goes
    // on, its depth, inside a string, after a backslash), after the object, or not in that form (read whole).
    enum class HermesPhase : uint8_t { Head, Arguments, After, Whole };
    HermesPhase hermes_ = HermesPhase::Head;
    size_t arguments_at_ = 0, arguments_depth_ = 0;
    bool in_string_ = false, escaped_ = false;
};

// `from`'s calls after `into`'s, a call under way at the end of `into` continued by `from`'s first piece of it.
void append_calls(std::vector<AnswerPiece::Call> &into, std::vector<AnswerPiece::Call> from);

// A whole answer read at once: the same as feeding `text` in one piece and then finish(), the pieces merged.
struct TaggedAnswer {
    std::vector<AnswerPiece::Call> calls;
    std::string content; // the words (without the whitespace at their end when there are calls)
};
TaggedAnswer read_tagged_answer(ToolFormat f, const std::vector<ToolSpec> &tools, std::string_view text);

} // namespace zaya

