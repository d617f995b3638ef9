#include "infer/tool_formats.h"

#include "core/json_depth.h"
#include "core/utf8.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <tuple>

namespace zaya {

using nlohmann::ordered_json;

namespace {

// (The names here are distinctive: a unity build compiles this file with others, tool_calls.cpp among them.)
constexpr size_t kTaggedMaxDepth = 256; // a value's JSON levels: copies and dumps of deeper ones recurse too far
constexpr std::string_view kTaggedSpace = " \t\n\r";
constexpr std::string_view kFunctionTag = "<function=", kFunctionEnd = "</function>";
constexpr std::string_view kParameterTag = "<parameter=", kParameterEnd = "</parameter>";

std::string tagged_lowered(std::string_view s) {
    std::string out(s);
    for (char &c : out)
        if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
    return out;
}

std::string_view tagged_trimmed(std::string_view s) {
    const size_t first = s.find_first_not_of(kTaggedSpace);
    if (first == std::string_view::npos) return {};
    return s.substr(first, s.find_last_not_of(kTaggedSpace) - first + 1);
}

// A value as written between its tags, less the layout's newline after the opening tag and before the closing one.
std::string_view tagged_unwrapped(std::string_view v) {
    if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    return v;
}

// How many bytes at the end of `s` to hold: a proper prefix of `tag` (it may yet be written whole), else a UTF-8
// character begun (the words released are whole characters).
size_t tagged_held(std::string_view s, std::string_view tag) {
    for (size_t k = std::min(s.size(), tag.empty() ? 0 : tag.size() - 1); k > 0; --k)
        if (s.substr(s.size() - k) == tag.substr(0, k)) return k;
    size_t lead = s.size();
    while (lead > 0 && s.size() - lead < 4 && (uint8_t(s[lead - 1]) & 0xc0) == 0x80) --lead;
    if (lead == 0) return 0;
    const size_t begun = s.size() - (lead - 1);
    return begun < utf8_length(uint8_t(s[lead - 1])) ? begun : 0;
}

// A value cut short by the end of the text, less the start of a tag it ends with (the tag was being written).
std::string_view tagged_without_tag_start(std::string_view v, std::string_view close) {
    size_t cut = 0;
    for (std::string_view tag : {kParameterEnd, kParameterTag, kFunctionEnd, close})
        for (size_t k = std::min(v.size(), tag.size() - 1); k > cut; --k)
            if (v.substr(v.size() - k) == tag.substr(0, k)) cut = k;
    return v.substr(0, v.size() - cut);
}

// A number's text for from_chars: without the whitespace around it and a '+' (which from_chars refuses); empty when
// that leaves no number ("+-1").
std::string_view tagged_number_text(std::string_view s) {
    s = tagged_trimmed(s);
    if (s.empty() || s[0] != '+') return s;
    s.remove_prefix(1);
    return !s.empty() && (s[0] == '+' || s[0] == '-') ? std::string_view() : s;
}

// Python's int() of a text: an optional sign and digits, whitespace around.
std::optional<ordered_json> tagged_integer(std::string_view text) {
    const std::string_view s = tagged_number_text(text);
    const char *end = s.data() + s.size();
    int64_t i = 0;
    if (auto [p, ec] = std::from_chars(s.data(), end, i); ec == std::errc() && p == end) return ordered_json(i);
    uint64_t u = 0; // past int64's range (from_chars refuses a '-' here)
    if (auto [p, ec] = std::from_chars(s.data(), end, u); ec == std::errc() && p == end) return ordered_json(u);
    return std::nullopt;
}

// Python's float() of a text, as vLLM keeps it: an integer when integral ("3.0" → 3); infinities and NaN refused.
std::optional<ordered_json> tagged_number(std::string_view text) {
    const std::string_view s = tagged_number_text(text);
    const char *end = s.data() + s.size();
    double d = 0;
    if (auto [p, ec] = std::from_chars(s.data(), end, d); ec != std::errc() || p != end || !std::isfinite(d))
        return std::nullopt;
    if (d == std::trunc(d) && std::fabs(d) < 9.2e18) return ordered_json(int64_t(d));
    return ordered_json(d);
}

// A JSON value of a parameter's text (an object's or array's), nested no deeper than kTaggedMaxDepth.
std::optional<ordered_json> tagged_json(std::string_view s) {
    ordered_json j = ordered_json::parse(s, nullptr, false);
    if (j.is_discarded() || json_deeper_than(j, kTaggedMaxDepth)) return std::nullopt;
    return j;
}

// The JSON Schema type of a tool's parameter, lowered: of a list, the first but "null"; "string" when the tool, the
// parameter or its type is unknown.
std::string tagged_param_type(const ToolSpec *tool, const std::string &key) {
    if (!tool || !tool->parameters.is_object()) return "string";
    const auto props = tool->parameters.find("properties");
    if (props == tool->parameters.end() || !props->is_object()) return "string";
    const auto prop = props->find(key);
    if (prop == props->end() || !prop->is_object()) return "string";
    const auto type = prop->find("type");
    if (type == prop->end()) return "string";
    std::string t;
    if (type->is_string()) t = type->get<std::string>();
    else if (type->is_array())
        for (const ordered_json &one : *type)
            if (one.is_string() && tagged_lowered(tagged_trimmed(one.get<std::string>())) != "null") {
                t = one.get<std::string>();
                break;
            }
    t = tagged_lowered(tagged_trimmed(t));
    return t.empty() ? "string" : t;
}

// A parameter's text as the value of its type, as vLLM's qwen3_coder converts it; the text itself when it does not
// read as one.
ordered_json tagged_value(std::string_view text, const std::string &type) {
    const ordered_json as_written = std::string(text);
    if (tagged_lowered(text) == "null") return nullptr;
    const auto starts = [&](std::string_view p) { return type.starts_with(p); };
    if (type == "string" || type == "str" || type == "text" || type == "varchar" || type == "char" || type == "enum")
        return as_written;
    if (starts("int") || starts("uint") || starts("long") || starts("short") || starts("unsigned"))
        return tagged_integer(text).value_or(as_written);
    if (starts("num") || starts("float")) return tagged_number(text).value_or(as_written);
    if (type == "boolean" || type == "bool" || type == "binary") return tagged_lowered(text) == "true";
    if (type == "object" || type == "array" || starts("dict") || starts("list"))
        return tagged_json(text).value_or(as_written);
    return as_written;
}

std::string tagged_dump(const ordered_json &j) {
    return j.dump(-1, ' ', false, ordered_json::error_handler_t::replace); // UTF-8 kept; an invalid byte as U+FFFD
}

const ToolSpec *tagged_tool(const std::vector<ToolSpec> &tools, const std::string &name) {
    for (const ToolSpec &t : tools)
        if (t.name == name) return &t;
    return nullptr;
}

// The call of a hermes block: {"name": NAME, "arguments": OBJECT} (the object or a JSON text of it; none: {}).
std::vector<AnswerPiece::Call> tagged_hermes_calls(std::string_view body) {
    const std::optional<ordered_json> call = tagged_json(tagged_trimmed(body));
    if (!call || !call->is_object()) return {};
    const auto name = call->find("name"), given = call->find("arguments");
    if (name == call->end() || !name->is_string() || name->get_ref<const std::string &>().empty()) return {};
    std::optional<ordered_json> args = ordered_json::object();
    if (given != call->end() && given->is_string()) args = tagged_json(given->get_ref<const std::string &>());
    else if (given != call->end() && !given->is_null()) args = *given;
    if (!args || !args->is_object()) return {};
    return {{0, name->get<std::string>(), tagged_dump(*args)}};
}

// Whether a Hermes block's text begins {"name": "NAME", "arguments": { (whitespace between tokens), the form Hermes'
// templates write: then a call of that name whose arguments' object is copied as it comes. Partial while the text
// is a prefix of that form (up to kHermesHeadMax bytes); NoMatch otherwise (the block is read whole at its close).
enum class HermesHead : uint8_t { Partial, Match, NoMatch };
constexpr size_t kHermesHeadMax = 4096;

HermesHead hermes_head(std::string_view t, std::string &name, size_t &arguments_at) {
    size_t i = 0;
    const auto space = [&] {
        while (i < t.size() && kTaggedSpace.find(t[i]) != std::string_view::npos) ++i;
    };
    const HermesHead partial = t.size() > kHermesHeadMax ? HermesHead::NoMatch : HermesHead::Partial;
    const auto token = [&](std::string_view w) { // Match: read
        space();
        const size_t n = std::min(w.size(), t.size() - i);
        if (t.substr(i, n) != w.substr(0, n)) return HermesHead::NoMatch;
        if (n < w.size()) return partial;
        i += n;
        return HermesHead::Match;
    };
    for (std::string_view w : {"{", "\"name\"", ":"})
        if (const HermesHead r = token(w); r != HermesHead::Match) return r;
    space();
    if (i == t.size()) return partial;
    if (t[i] != '"') return HermesHead::NoMatch;
    size_t j = i + 1;
    while (j < t.size() && t[j] != '"') j += t[j] == '\\' ? 2 : 1;
    if (j >= t.size()) return partial;
    const ordered_json n = ordered_json::parse(t.substr(i, j + 1 - i), nullptr, false);
    if (!n.is_string() || n.get_ref<const std::string &>().empty()) return HermesHead::NoMatch;
    i = j + 1;
    for (std::string_view w : {",", "\"arguments\"", ":", "{"})
        if (const HermesHead r = token(w); r != HermesHead::Match) return r;
    name = n.get<std::string>();
    arguments_at = i - 1; // the object's '{'
    return HermesHead::Match;
}

} // namespace

const char *tool_format_name(ToolFormat f) {
    switch (f) {
    case ToolFormat::Json: return "json";
    case ToolFormat::ZayaXml: return "zaya_xml";
    case ToolFormat::Qwen3Coder: return "qwen3_coder";
    case ToolFormat::Hermes: return "hermes";
    }
    return "json";
}

std::optional<ToolFormat> tool_format_named(std::string_view name) {
    for (ToolFormat f : {ToolFormat::Json, ToolFormat::ZayaXml, ToolFormat::Qwen3Coder, ToolFormat::Hermes})
        if (name == tool_format_name(f)) return f;
    return std::nullopt;
}

std::optional<ToolFormat> tool_format_of_template(std::string_view source) {
    if (source.find("<zyphra_tool_call>") != std::string_view::npos) return ToolFormat::ZayaXml;
    if (source.find("<tool_call>") == std::string_view::npos) return std::nullopt;
    if (source.find(kFunctionTag) != std::string_view::npos) return ToolFormat::Qwen3Coder;
    // <tool_call> around something else than JSON: GLM-4.5's <arg_key>/<arg_value> pairs, none of these formats.
    if (source.find("<arg_key>") != std::string_view::npos) return std::nullopt;
    return ToolFormat::Hermes;
}

std::pair<std::string_view, std::string_view> tool_call_tags(ToolFormat f) {
    switch (f) {
    case ToolFormat::ZayaXml: return {"<zyphra_tool_call>", "</zyphra_tool_call>"};
    case ToolFormat::Qwen3Coder:
    case ToolFormat::Hermes: return {"<tool_call>", "</tool_call>"};
    case ToolFormat::Json: break;
    }
    return {};
}

TaggedCallReader::TaggedCallReader(ToolFormat f, std::vector<ToolSpec> tools) : format_(f), tools_(std::move(tools)) {
    std::tie(open_, close_) = tool_call_tags(f);
}

AnswerPiece TaggedCallReader::feed(std::string_view text) {
    AnswerPiece out;
    text_ += text;
    while (in_block_ ? close_block(out) : open_block(out)) {
    }
    return out;
}

AnswerPiece TaggedCallReader::finish() {
    AnswerPiece out;
    if (in_block_) end_block(text_.size(), Reach::Cut, out); // cut short
    else words(text_, out);
    text_.clear();
    in_block_ = false;
    if (!calls()) out.words += space_; // (after calls, the whitespace that ends the answer is the layout's)
    space_.clear();
    return out;
}

bool TaggedCallReader::open_block(AnswerPiece &out) {
    const size_t at = open_.empty() ? std::string::npos : text_.find(open_);
    if (at == std::string::npos) {
        const size_t release = text_.size() - tagged_held(text_, open_);
        words(std::string_view(text_).substr(0, release), out);
        text_.erase(0, release);
        return false;
    }
    words(std::string_view(text_).substr(0, at), out);
    text_.erase(0, at + open_.size());
    in_block_ = true;
    searched_ = xml_at_ = 0;
    in_function_ = in_parameter_ = block_calls_ = false;
    hermes_ = HermesPhase::Head;
    arguments_at_ = arguments_depth_ = 0;
    in_string_ = escaped_ = false;
    return true;
}

bool TaggedCallReader::close_block(AnswerPiece &out) {
    const size_t at = text_.find(close_, searched_);
    if (at == std::string::npos) { // searched again only from where the tag may have begun
        searched_ = text_.size() < close_.size() ? 0 : text_.size() - close_.size() + 1;
        if (format_ == ToolFormat::Hermes) read_hermes(text_.size(), Reach::Open, out);
        else read_xml(text_.size(), Reach::Open, out);
        return false;
    }
    end_block(at, Reach::Closed, out);
    text_.erase(0, at + close_.size());
    in_block_ = false;
    return true;
}

// The block's text up to `limit` read: its calls (from where reading stopped; a Hermes block not in its streamed
// form, whole), or, when it began none, its text (the tags as written) as words.
void TaggedCallReader::end_block(size_t limit, Reach reach, AnswerPiece &out) {
    const std::string_view body = std::string_view(text_).substr(0, limit);
    if (format_ == ToolFormat::Hermes) {
        read_hermes(limit, reach, out);
        if (block_calls_) return;
        std::vector<AnswerPiece::Call> calls = tagged_hermes_calls(body);
        if (!calls.empty()) {
            space_.clear(); // the layout before the block
            calls[0].index = index_++;
            out.calls.push_back(std::move(calls[0]));
            return;
        }
    } else {
        read_xml(limit, reach, out);
        if (block_calls_) return;
    }
    words(std::string(open_) + std::string(body) + (reach == Reach::Closed ? std::string(close_) : std::string()), out);
}

// An XML block's events up to `limit`, from where reading stopped: a function's start begins a call, a parameter's
// value closed adds it to the arguments, the function's end closes them. While more may come, what is not yet
// decided (a tag's name not ended, a value not closed) waits; at the block's end, the function and parameter under
// way end there (a value cut short by the answer's end without a tag begun at its end).
void TaggedCallReader::read_xml(size_t limit, Reach reach, AnswerPiece &out) {
    const std::string_view t = std::string_view(text_).substr(0, limit);
    const bool open = reach == Reach::Open;
    const auto find = [&](std::string_view tag, size_t from) { return t.find(tag, from); };
    while (true) {
        if (in_parameter_) { // the value ends at its closing tag, or (tolerated) at the next parameter or the end
            const size_t from = std::max(value_at_, scanned_);
            const size_t end =
                std::min({find(kParameterEnd, from), find(kParameterTag, from), find(kFunctionEnd, from)});
            if (end == std::string_view::npos && open) { // searched again only from where a tag may have begun
                if (t.size() >= kParameterEnd.size()) scanned_ = t.size() - kParameterEnd.size() + 1;
                return;
            }
            std::string_view value = t.substr(value_at_, end == std::string_view::npos ? end : end - value_at_);
            if (reach == Reach::Cut && end == std::string_view::npos) value = tagged_without_tag_start(value, close_);
            const ordered_json v = tagged_value(tagged_unwrapped(value), tagged_param_type(tool_, parameter_));
            add_arguments((parameters_ ? "," : "{") + tagged_dump(parameter_) + ":" + tagged_dump(v), out);
            parameters_ = true;
            in_parameter_ = false;
            xml_at_ = end == std::string_view::npos ? t.size()
                      : t.compare(end, kParameterEnd.size(), kParameterEnd) == 0 ? end + kParameterEnd.size()
                                                                                : end;
            continue;
        }
        if (in_function_) {
            const size_t param = find(kParameterTag, xml_at_), end = find(kFunctionEnd, xml_at_);
            const size_t gt = param == std::string_view::npos ? param : t.find('>', param + kParameterTag.size());
            if (param < end && gt != std::string_view::npos) { // a parameter begins
                parameter_ = std::string(t.substr(param + kParameterTag.size(), gt - param - kParameterTag.size()));
                in_parameter_ = true;
                value_at_ = xml_at_ = scanned_ = gt + 1;
                continue;
            }
            if (end == std::string_view::npos && open) { // the function goes on: wait at a parameter's tag begun
                const size_t tag = std::max(kParameterTag.size(), kFunctionEnd.size());
                if (param != std::string_view::npos) xml_at_ = param;
                else if (t.size() >= tag) xml_at_ = std::max(xml_at_, t.size() - tag + 1);
                return;
            }
            add_arguments(parameters_ ? "}" : "{}", out); // the function ends (at its tag, or the block's end)
            in_function_ = false;
            xml_at_ = end == std::string_view::npos ? t.size() : end + kFunctionEnd.size();
            continue;
        }
        const size_t at = find(kFunctionTag, xml_at_);
        const size_t gt = at == std::string_view::npos ? at : t.find('>', at + kFunctionTag.size());
        if (gt == std::string_view::npos) { // none yet, or its name not ended: wait there
            if (at != std::string_view::npos) xml_at_ = at;
            else if (t.size() >= kFunctionTag.size()) xml_at_ = std::max(xml_at_, t.size() - kFunctionTag.size() + 1);
            return;
        }
        const std::string name(t.substr(at + kFunctionTag.size(), gt - at - kFunctionTag.size()));
        xml_at_ = gt + 1;
        if (name.empty()) continue;
        if (!block_calls_) space_.clear(); // the layout before the block
        block_calls_ = in_function_ = true;
        parameters_ = false;
        tool_ = tagged_tool(tools_, name);
        out.calls.push_back({index_++, name, ""});
    }
}

// A Hermes block as far as it is written: once its head is, a call begins, and its arguments' object follows as
// written but for the whitespace between its tokens (and control characters inside strings, escaped), to the brace
// that closes it (what comes after is layout).
// While more may come, a part of the closing tag and a character begun wait; a block cut short ends its object
// where the text ends (less a part of the tag).
void TaggedCallReader::read_hermes(size_t limit, Reach reach, AnswerPiece &out) {
    const std::string_view t = std::string_view(text_).substr(0, limit);
    if (hermes_ == HermesPhase::Head) {
        std::string name;
        const HermesHead head = hermes_head(t, name, arguments_at_);
        if (head == HermesHead::Partial && reach == Reach::Open) return;
        if (head != HermesHead::Match) {
            hermes_ = HermesPhase::Whole;
            return;
        }
        if (!block_calls_) space_.clear(); // the layout before the block
        block_calls_ = true;
        hermes_ = HermesPhase::Arguments;
        out.calls.push_back({index_++, std::move(name), ""});
    }
    if (hermes_ != HermesPhase::Arguments) return;
    size_t end = t.size();
    if (reach == Reach::Open) end -= tagged_held(t, close_);
    else if (reach == Reach::Cut) end -= t.size() - tagged_without_tag_start(t, close_).size();
    std::string copied;
    for (; arguments_at_ < end && hermes_ == HermesPhase::Arguments; ++arguments_at_) {
        const char c = t[arguments_at_];
        if (in_string_) {
            if (uint8_t(c) < 0x20 && !escaped_) { // a raw control character (a newline in code): escaped, as JSON
                copied += fmt::format("\\u{:04x}", unsigned(uint8_t(c))); // has it (what a lenient reader takes)
                continue;
            }
            copied += c;
            if (escaped_) escaped_ = false;
            else if (c == '\\') escaped_ = true;
            else if (c == '"') in_string_ = false;
            continue;
        }
        if (kTaggedSpace.find(c) != std::string_view::npos) continue;
        copied += c;
        if (c == '"') in_string_ = true;
        else if (c == '{' || c == '[') ++arguments_depth_;
        else if ((c == '}' || c == ']') && arguments_depth_ > 0 && --arguments_depth_ == 0)
            hermes_ = HermesPhase::After;
    }
    if (!copied.empty()) add_arguments(std::move(copied), out);
}

void TaggedCallReader::add_arguments(std::string text, AnswerPiece &out) {
    if (out.calls.empty() || out.calls.back().index + 1 != index_) out.calls.push_back({index_ - 1, "", ""});
    out.calls.back().arguments += text;
}

void append_calls(std::vector<AnswerPiece::Call> &into, std::vector<AnswerPiece::Call> from) {
    for (AnswerPiece::Call &c : from) {
        if (!into.empty() && into.back().index == c.index && c.name.empty()) into.back().arguments += c.arguments;
        else into.push_back(std::move(c));
    }
}

// Words known to be words: released but for whitespace at their end, held until words follow it (or not released
// when a call does).
void TaggedCallReader::words(std::string_view text, AnswerPiece &out) {
    // The answer's words are those before its calls, as with zaya's own object (and vLLM's hermes parser): a model
    // that goes on after a call (a line of its layout, a stray word) adds nothing to say beside the calls.
    if (calls()) return;
    const size_t last = text.find_last_not_of(kTaggedSpace);
    if (last == std::string_view::npos) {
        space_ += text;
        return;
    }
    out.words += space_;
    out.words += text.substr(0, last + 1);
    space_.assign(text.substr(last + 1));
}

TaggedAnswer read_tagged_answer(ToolFormat f, const std::vector<ToolSpec> &tools, std::string_view text) {
    TaggedCallReader reader(f, tools);
    TaggedAnswer a;
    AnswerPiece first = reader.feed(text), last = reader.finish();
    a.content = first.words + last.words;
    a.calls = std::move(first.calls);
    append_calls(a.calls, std::move(last.calls));
    return a;
}

} // namespace zaya
