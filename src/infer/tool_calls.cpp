#include "infer/tool_calls.h"

#include "core/error.h"
#include "core/json_depth.h"
#include "core/utf8.h"
#include "infer/json_constraint.h"
#include "infer/json_grammar.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace zaya {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

constexpr size_t kMaxArgumentDepth = 256; // an earlier call's arguments, in JSON levels

[[noreturn]] void refuse_tool(const std::string &param, const std::string &message) {
    throw ApiError(400, message, param);
}

// OpenAI's rule for a function's name: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'.
bool tool_name_ok(const std::string &name) {
    if (name.empty() || name.size() > 64) return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    return true;
}

// A string member of an object, or "" when absent; refused naming `where` when present and not a string.
std::string string_member(const ordered_json &j, const char *key, const std::string &where) {
    if (!j.contains(key) || j[key].is_null()) return "";
    if (!j[key].is_string()) refuse_tool(where + "." + key, fmt::format("'{}.{}' must be a string", where, key));
    return j[key].get<std::string>();
}

// A tool's parameters, compiled alone so that a refusal names its place in them.
void check_parameters(const ordered_json &parameters, const std::string &where) {
    try {
        JsonSchema::compile(parameters);
    } catch (const Error &e) {
        std::string what = e.what(); // "schema.properties.x: ..." or "schema: ..."
        if (what.rfind("schema", 0) == 0) what = what.substr(6);
        refuse_tool(where, where + what);
    }
}

ToolSpec parse_tool(const ordered_json &t, size_t i) {
    const std::string where = fmt::format("tools[{}]", i);
    if (!t.is_object() || !t.contains("type") || t["type"] != "function")
        refuse_tool(where, fmt::format("'{}' must be an object with \"type\": \"function\" (the only kind of tool)",
                                       where));
    if (!t.contains("function") || !t["function"].is_object())
        refuse_tool(where + ".function", fmt::format("'{}.function' must be an object", where));
    const ordered_json &f = t["function"];
    const std::string fwhere = where + ".function";
    ToolSpec spec;
    spec.name = string_member(f, "name", fwhere);
    if (!tool_name_ok(spec.name))
        refuse_tool(fwhere + ".name", fmt::format("'{}.name' must be 1 to 64 letters, digits, '_' or '-', got '{}'",
                                                  fwhere, spec.name));
    spec.description = string_member(f, "description", fwhere);
    const bool given =
        f.contains("parameters") && !f["parameters"].is_null() && f["parameters"] != ordered_json::object();
    if (given && !f["parameters"].is_object())
        refuse_tool(fwhere + ".parameters", fmt::format("'{}.parameters' must be a JSON Schema object", fwhere));
    spec.parameters =
        given ? f["parameters"] : ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
    check_parameters(spec.parameters, fwhere + ".parameters");
    return spec;
}

// The tool_choice forms: "none", "auto", "required", {"type": "function", "function": {"name": ...}}.
void parse_choice(const ordered_json &c, ApiTools &t) {
    if (c.is_string()) {
        const std::string s = c.get<std::string>();
        if (s == "none") t.choice = ApiTools::Choice::None;
        else if (s == "auto") t.choice = ApiTools::Choice::Auto;
        else if (s == "required") t.choice = ApiTools::Choice::Required;
        else
            refuse_tool("tool_choice",
                        "'tool_choice' must be 'none', 'auto', 'required' or a function, got '" + s + "'");
        return;
    }
    if (!c.is_object() || !c.contains("type") || c["type"] != "function" || !c.contains("function") ||
        !c["function"].is_object() || !c["function"].contains("name") || !c["function"]["name"].is_string())
        refuse_tool("tool_choice",
                    "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"function\": "
                    "{\"name\": ...}}");
    t.choice = ApiTools::Choice::Named;
    t.named = c["function"]["name"].get<std::string>();
    for (const ToolSpec &s : t.tools)
        if (s.name == t.named) return;
    refuse_tool("tool_choice", "'tool_choice' names '" + t.named + "', which is not among the tools");
}

// A copy of a tool's parameters placed at #/$defs/<def> of a larger schema: its references to itself ("#",
// "#/...") made to point there. Walked as a schema: the maps of names to schemas (properties, $defs, ...) by their
// values — a property may be named "enum" or "$ref" — and values (const, enum, default, examples) left as they are.
ordered_json relocated(const ordered_json &schema, const std::string &def) {
    if (!schema.is_object()) return schema; // true, false
    static const std::set<std::string> kMaps = {"properties", "patternProperties", "$defs", "definitions",
                                                "dependentSchemas"};
    static const std::set<std::string> kLists = {"anyOf", "oneOf", "allOf", "prefixItems"};
    static const std::set<std::string> kSchemas = {"items", "additionalProperties", "propertyNames", "not", "contains",
                                                   "if", "then", "else", "additionalItems", "unevaluatedProperties",
                                                   "unevaluatedItems"};
    ordered_json out = ordered_json::object();
    for (const auto &[key, value] : schema.items()) {
        if (key == "$ref" && value.is_string() && value.get<std::string>().rfind('#', 0) == 0) {
            out[key] = "#/$defs/" + def + value.get<std::string>().substr(1);
        } else if (kMaps.count(key) && value.is_object()) {
            out[key] = ordered_json::object();
            for (const auto &[name, sub] : value.items()) out[key][name] = relocated(sub, def);
        } else if ((kLists.count(key) || kSchemas.count(key)) && value.is_array()) { // (draft 4's items list too)
            out[key] = ordered_json::array();
            for (const ordered_json &sub : value) out[key].push_back(relocated(sub, def));
        } else if (kSchemas.count(key)) {
            out[key] = relocated(value, def);
        } else {
            out[key] = value; // annotations, values, counts, patterns: no references in them
        }
    }
    return out;
}

} // namespace

ApiTools parse_tools(const ordered_json &body) {
    ApiTools t;
    for (const char *legacy : {"functions", "function_call"})
        if (body.contains(legacy) && !body[legacy].is_null())
            refuse_tool(legacy, fmt::format("'{}' is OpenAI's deprecated form: use 'tools' and 'tool_choice'", legacy));
    const bool listed = body.contains("tools") && !body["tools"].is_null();
    if (listed) {
        const ordered_json &tools = body["tools"];
        if (!tools.is_array() || tools.empty()) refuse_tool("tools", "'tools' must be a non-empty array of tools");
        if (tools.size() > 128) refuse_tool("tools", fmt::format("at most 128 tools, got {}", tools.size()));
        std::set<std::string> names;
        for (size_t i = 0; i < tools.size(); ++i) {
            t.tools.push_back(parse_tool(tools[i], i));
            if (!names.insert(t.tools.back().name).second)
                refuse_tool(fmt::format("tools[{}].function.name", i),
                            fmt::format("two tools are named '{}'", t.tools.back().name));
        }
        t.choice = ApiTools::Choice::Auto;
    }
    if (body.contains("tool_choice") && !body["tool_choice"].is_null()) {
        const ordered_json &c = body["tool_choice"];
        if (!listed && !(c.is_string() && c == "none"))
            refuse_tool("tool_choice", "'tool_choice' needs 'tools'");
        parse_choice(c, t);
    }
    if (body.contains("parallel_tool_calls") && !body["parallel_tool_calls"].is_null()) {
        if (!body["parallel_tool_calls"].is_boolean())
            refuse_tool("parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        t.parallel = body["parallel_tool_calls"].get<bool>();
    }
    return t;
}

std::string tools_instructions(const ApiTools &t) {
    if (!t.active() || t.native()) return "";
    std::string s = "You can call tools. Each one, with a JSON Schema of its arguments:\n";
    for (const ToolSpec &tool : t.tools) {
        ordered_json line = {{"name", tool.name}};
        if (!tool.description.empty()) line["description"] = tool.description;
        line["parameters"] = tool.parameters;
        s += line.dump() + "\n";
    }
    // (The forms as the answer must write them: without spaces.)
    const std::string calls = fmt::format("{{\"tool_calls\":[{{\"name\":{},\"arguments\":{{...}}}}]}}",
                                          t.choice == ApiTools::Choice::Named ? json(t.named).dump() : "...");
    const std::string how_many = t.parallel ? "one or more calls" : "exactly one call";
    if (t.choice == ApiTools::Choice::Auto)
        s += fmt::format("\nTo call tools, write this JSON object, after your words if you have some for the user: {} "
                         "({}; their results come back in the next turn). Otherwise answer in words.",
                         calls, how_many);
    else if (t.choice == ApiTools::Choice::Named)
        s += fmt::format("\nAnswer with one JSON object: {} to call {} (its result comes back in the next turn).",
                         calls, t.named);
    else
        s += fmt::format("\nAnswer with one JSON object: {} to call the tools ({}; their results come back in the "
                         "next turn).",
                         calls, how_many);
    return s;
}

ordered_json template_tools(const ApiTools &t) {
    if (!t.active()) return nullptr;
    ordered_json list = ordered_json::array();
    for (const ToolSpec &tool : t.tools) {
        ordered_json f = {{"name", tool.name}};
        if (!tool.description.empty()) f["description"] = tool.description;
        f["parameters"] = tool.parameters;
        list.push_back({{"type", "function"}, {"function", std::move(f)}});
    }
    return list;
}

std::shared_ptr<const JsonSchema> tools_schema(const ApiTools &t) {
    if (t.answer_format() != ToolFormat::Json) return nullptr;
    ordered_json defs = ordered_json::object(), calls = ordered_json::array();
    for (size_t i = 0; i < t.tools.size(); ++i) {
        const ToolSpec &tool = t.tools[i];
        if (t.choice == ApiTools::Choice::Named && tool.name != t.named) continue;
        const std::string def = fmt::format("tool_{}", i);
        defs[def] = relocated(tool.parameters, def);
        const ordered_json properties = {{"name", {{"const", tool.name}}}, {"arguments", {{"$ref", "#/$defs/" + def}}}};
        calls.push_back({{"type", "object"},
                         {"properties", properties},
                         {"required", {"name", "arguments"}},
                         {"additionalProperties", false}});
    }
    ordered_json list = {{"type", "array"},
                         {"items", calls.size() == 1 ? calls[0] : ordered_json{{"anyOf", calls}}},
                         {"minItems", 1}};
    if (!t.parallel) list["maxItems"] = 1;
    ordered_json root = {{"type", "object"},
                         {"properties", {{"tool_calls", list}}},
                         {"required", {"tool_calls"}},
                         {"additionalProperties", false}};
    root["$defs"] = defs;
    try {
        return JsonSchema::compile(root, /*compact=*/true);
    } catch (const Error &e) { // each tool's parameters compiled alone: only limits over all of them are left
        refuse_tool("tools", std::string("the tools together: ") + e.what());
    }
}

std::string tools_trigger(const ApiTools &t) {
    return t.choice == ApiTools::Choice::Auto && !t.native() ? std::string(kToolCallsTrigger) : std::string();
}

namespace {

// An earlier assistant turn's calls read: [{"name", "arguments" (an object)}] and each one's id ("" when none).
ordered_json read_earlier_calls(const json &calls, const std::string &where, std::vector<std::string> *ids) {
    if (!calls.is_array() || calls.empty())
        refuse_tool(where, fmt::format("'{}' must be a non-empty array of tool calls", where));
    ordered_json list = ordered_json::array();
    for (size_t k = 0; k < calls.size(); ++k) {
        const json &c = calls[k];
        const std::string at = fmt::format("{}[{}]", where, k);
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
            !c["function"].contains("name") || !c["function"]["name"].is_string())
            refuse_tool(at, fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                                        "\"arguments\": ...}}}}",
                                        at));
        const json &f = c["function"];
        ordered_json arguments = ordered_json::object();
        if (f.contains("arguments") && !f["arguments"].is_null()) {
            if (!f["arguments"].is_string())
                refuse_tool(at + ".function.arguments", fmt::format("'{}.function.arguments' must be a JSON text", at));
            try {
                arguments = ordered_json::parse(f["arguments"].get<std::string>());
            } catch (const json::exception &) {
                refuse_tool(at + ".function.arguments",
                            fmt::format("'{}.function.arguments' is not valid JSON: {}", at, f["arguments"].dump()));
            }
            if (json_deeper_than(arguments, kMaxArgumentDepth)) // (copies and dumps recurse: core/json_depth.h)
                refuse_tool(at + ".function.arguments",
                            fmt::format("'{}.function.arguments' nests deeper than {} levels", at, kMaxArgumentDepth));
        }
        list.push_back({{"name", f["name"]}, {"arguments", arguments}});
        if (ids) ids->push_back(c.contains("id") && c["id"].is_string() ? c["id"].get<std::string>() : "");
    }
    return list;
}

} // namespace

std::string written_tool_calls(const std::string &content, const json &calls, const std::string &where) {
    const std::string object = ordered_json{{"tool_calls", read_earlier_calls(calls, where, nullptr)}}.dump();
    return content.empty() ? object : content + "\n" + object;
}

ordered_json template_tool_calls(const json &calls, const std::string &where) {
    std::vector<std::string> ids;
    const ordered_json list = read_earlier_calls(calls, where, &ids);
    ordered_json out = ordered_json::array();
    for (size_t k = 0; k < list.size(); ++k) {
        ordered_json call = ordered_json::object();
        if (!ids[k].empty()) call["id"] = ids[k];
        call["type"] = "function";
        call["function"] = list[k];
        out.push_back(std::move(call));
    }
    return out;
}

std::string written_tool_result(const std::string &id, const std::string &name, const std::string &content) {
    return fmt::format("The call {} of {} returned:\n{}", id, name.empty() ? "a tool" : name, content);
}

ToolAnswer read_tool_answer(const ApiTools &t, const std::string &text, const std::string &finish_reason,
                            const std::string &id_prefix) {
    ToolAnswer a;
    AnswerStream s(t);
    AnswerPiece piece = s.feed(text);
    AnswerPiece last = s.finish(); // (a tagged format's calls cut short end here)
    a.content = piece.words + last.words;
    append_calls(piece.calls, std::move(last.calls));
    a.finish_reason = s.finish_reason(finish_reason);
    if (s.calls()) { // one piece: each call's delta is the whole call
        a.tool_calls = call_deltas(piece, id_prefix);
        for (json &c : a.tool_calls) c.erase("index");
    }
    return a;
}

json call_deltas(const AnswerPiece &piece, const std::string &id_prefix) {
    json deltas = json::array();
    for (const AnswerPiece::Call &c : piece.calls) {
        json d = {{"index", c.index}};
        if (!c.name.empty()) {
            d["id"] = fmt::format("call_{}_{}", id_prefix, c.index);
            d["type"] = "function";
            d["function"] = {{"name", c.name}, {"arguments", c.arguments}};
        } else {
            d["function"] = {{"arguments", c.arguments}};
        }
        deltas.push_back(d);
    }
    return deltas;
}

bool AnswerStream::punct(uint8_t b, char want, Phase next) {
    if (json_whitespace(b)) return true;
    phase_ = b == uint8_t(want) ? next : Phase::Other;
    return phase_ != Phase::Other;
}

AnswerPiece::Call &AnswerStream::call_piece(AnswerPiece &out) {
    if (out.calls.empty() || out.calls.back().index != index_) out.calls.push_back({index_, "", ""});
    return out.calls.back();
}

namespace {

// How many of the bytes are whole UTF-8 characters: all but a character begun at their end (a JSON writer refuses
// a piece of one).
size_t whole_length(std::string_view s) {
    size_t k = s.size();
    while (k > 0 && (uint8_t(s[k - 1]) & 0xc0) == 0x80) --k; // back to the last character's lead byte
    return k > 0 && s.size() - (k - 1) < utf8_length(uint8_t(s[k - 1])) ? k - 1 : s.size();
}

} // namespace

AnswerStream::AnswerStream(const ApiTools &t) : parallel_(t.parallel) {
    if (t.answer_format() != ToolFormat::Json)
        tagged_ = std::make_shared<TaggedCallReader>(t.answer_format(), t.tools);
}

AnswerPiece AnswerStream::tagged_piece(AnswerPiece p) const {
    if (!parallel_) std::erase_if(p.calls, [](const AnswerPiece::Call &c) { return c.index > 0; });
    return p;
}

AnswerPiece AnswerStream::feed(std::string_view text) {
    if (tagged_) return tagged_piece(tagged_->feed(text));
    AnswerPiece out;
    for (size_t i = 0; i < text.size(); ++i) {
        if (phase_ == Phase::Other) { // no more calls: the rest is kept only as words, before a call's name
            if (!calls_) words_.append(text.substr(i));
            break;
        }
        byte(uint8_t(text[i]), out);
    }
    if (phase_ == Phase::Words) release_words(out);
    if (phase_ == Phase::Args) {
        const size_t whole = whole_length(held_);
        if (whole > 0) call_piece(out).arguments += held_.substr(0, whole);
        held_.erase(0, whole);
    }
    return out;
}

std::string AnswerStream::finish_reason(const std::string &engine_reason) const {
    return complete() && engine_reason == "stop" ? "tool_calls" : engine_reason;
}

AnswerPiece AnswerStream::finish() {
    if (tagged_) return tagged_piece(tagged_->finish());
    AnswerPiece out;
    if (!calls_) out.words = std::move(words_);
    words_.clear();
    return out;
}

// All but what may yet begin calls: the part of the trigger the text ends with, the whitespace before it, and a
// character begun.
void AnswerStream::release_words(AnswerPiece &out) {
    const size_t end = words_end(matched_);
    const size_t whole = whole_length(std::string_view(words_).substr(0, end));
    out.words.append(words_, 0, whole);
    if (whole > 0) words_.erase(0, whole);
    space_begin_ = end - whole; // the whitespace held, stepped over whole next time
    space_end_ = words_.size() - matched_;
}

void AnswerStream::expect(std::string_view a, std::string_view b, std::string_view c, Phase next) {
    tokens_ = {a, b, c};
    token_ = at_ = 0;
    after_ = next;
    phase_ = Phase::Tokens;
}

// Where the words may end: before the last `tail` bytes held and the whitespace before them. (The whitespace held
// by the last release is known: a long run of it, fed a little at a time, is read in linear time.)
size_t AnswerStream::words_end(size_t tail) const {
    size_t end = words_.size() - tail;
    while (end > 0 && json_whitespace(uint8_t(words_[end - 1])))
        end = end == space_end_ && space_begin_ < space_end_ ? space_begin_ : end - 1;
    return end;
}

// Words, then perhaps {"tool_calls":[{"name":"..","arguments":{..}},..]}: the trigger exactly (the bytes the engine
// decides by), then whitespace allowed between tokens. Until a call's name is written every byte is kept in words_,
// for finish() to give back as words if none is.
void AnswerStream::byte(uint8_t b, AnswerPiece &out) {
    if (!calls_) words_ += char(b);
    switch (phase_) {
    case Phase::Words:
        if (trigger_step(kToolCallsTrigger, matched_, b)) { // the words end before it, and the whitespace before it
            const size_t end = words_end(kToolCallsTrigger.size());
            out.words += words_.substr(0, end);
            words_.erase(0, end);
            phase_ = Phase::CallsBracket;
        }
        return;
    case Phase::CallsBracket:
        if (b == '[') expect("{", "\"name\"", ":", Phase::NameQuote);
        else if (!json_whitespace(b)) phase_ = Phase::Other;
        return;
    case Phase::Tokens:
        if (at_ == 0 && json_whitespace(b)) return;
        if (b != uint8_t(tokens_[token_][at_])) {
            phase_ = Phase::Other;
        } else if (++at_ == tokens_[token_].size()) {
            at_ = 0;
            if (++token_ == tokens_.size()) phase_ = after_;
        }
        return;
    case Phase::NameQuote:
        if (punct(b, '"', Phase::Name)) key_.clear();
        return;
    case Phase::Name:
        if (b != '"') {
            key_ += char(b);
            if (key_.size() > 64) phase_ = Phase::Other;
            return;
        }
        calls_ = true;
        words_.clear();
        call_piece(out).name = key_;
        depth_ = 0, in_string_ = escaped_ = false;
        expect(",", "\"arguments\"", ":", Phase::Args);
        return;
    case Phase::Args:
        if (depth_ == 0 && json_whitespace(b)) return; // before the value
        if (depth_ == 0 && b != '{' && b != '[') {
            phase_ = Phase::Other; // the arguments are an object
            return;
        }
        held_ += char(b);
        if (in_string_) {
            if (escaped_) escaped_ = false;
            else if (b == '\\') escaped_ = true;
            else if (b == '"') in_string_ = false;
        } else if (b == '"') {
            in_string_ = true;
        } else if (b == '{' || b == '[') {
            ++depth_;
        } else if ((b == '}' || b == ']') && --depth_ == 0) {
            call_piece(out).arguments += held_;
            held_.clear();
            phase_ = Phase::CallClose;
        }
        return;
    case Phase::CallClose: punct(b, '}', Phase::AfterCall); return;
    case Phase::AfterCall:
        if (b == ',') ++index_, expect("{", "\"name\"", ":", Phase::NameQuote);
        else punct(b, ']', Phase::Close);
        return;
    case Phase::Close: punct(b, '}', Phase::Done); return;
    case Phase::Done:
        if (!json_whitespace(b)) phase_ = Phase::Other;
        return;
    case Phase::Other: return;
    }
}

} // namespace zaya
