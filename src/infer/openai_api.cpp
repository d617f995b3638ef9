#include "infer/openai_api.h"

#include "core/error.h"
#include "core/json_depth.h"
#include "core/utf8.h"
#include "data/hf_chat_template.h"
#include "infer/chat_answer.h"
#include "infer/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

namespace zaya {

using nlohmann::json;

json ApiError::body() const {
    return {{"error",
             {{"message", message},
              {"type", type},
              {"param", param.empty() ? json(nullptr) : json(param)},
              {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

namespace {

[[noreturn]] void bad(const std::string &param, const std::string &message) { throw ApiError(400, message, param); }

double number(const json &j, const char *key, double lo, double hi) {
    const json &v = j.at(key);
    if (!v.is_number()) bad(key, std::string("'") + key + "' must be a number");
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi))
        bad(key, std::string("'") + key + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " +
                     v.dump());
    return x;
}

int64_t integer(const json &j, const char *key, int64_t lo, int64_t hi) {
    const json &v = j.at(key);
    if (!v.is_number_integer()) bad(key, std::string("'") + key + "' must be an integer");
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())
                          ? std::numeric_limits<int64_t>::max()
                          : v.get<int64_t>();
    if (x < lo || x > hi)
        bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "], got " + v.dump());
    return x;
}

bool has(const json &j, const char *key) { return j.contains(key) && !j.at(key).is_null(); }

bool boolean(const json &j, const char *key) {
    if (!j.at(key).is_boolean()) bad(key, std::string("'") + key + "' must be a boolean");
    return j.at(key).get<bool>();
}

constexpr size_t kMaxPrompts = 256;   // per completions request
constexpr int64_t kMaxChoices = 256; // prompts × n per request
constexpr size_t kMaxBodyDepth = 512; // JSON levels: room for a schema of JsonSchema's own limit (core/json_depth.h)

// {"token id": bias, ...}, as OpenAI: ids as strings, biases in [-100, 100].
void parse_logit_bias(const json &b, SampleOptions &o) {
    if (!b.is_object()) bad("logit_bias", "'logit_bias' must be an object of token ids to biases");
    for (const auto &[key, value] : b.items()) {
        const bool digits = !key.empty() && key.size() <= 9 && std::all_of(key.begin(), key.end(), [](char c) {
            return c >= '0' && c <= '9';
        });
        if (!digits) bad("logit_bias", "'logit_bias' keys must be token ids, got '" + key + "'");
        if (!value.is_number() || !(value.get<double>() >= -100 && value.get<double>() <= 100))
            bad("logit_bias", "'logit_bias' values must be numbers in [-100, 100], got " + value.dump());
        o.logit_bias.emplace_back(int32_t(std::stol(key)), float(value.get<double>()));
    }
}

std::vector<int32_t> token_ids(const json &a, const char *param) {
    std::vector<int32_t> ids;
    for (const json &t : a) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
            bad(param, std::string("'") + param + "' token ids must be non-negative integers");
        ids.push_back(int32_t(t.get<int64_t>()));
    }
    return ids;
}

// OpenAI's prompt forms: a string, an array of token ids, or an array of those (a choice each).
void parse_prompts(const json &p, ApiRequest &r) {
    const char *form = "'prompt' must be a string, an array of token ids, or an array of those";
    auto one = [&](const json &x) {
        ApiPrompt prompt;
        if (x.is_string()) prompt.text = x.get<std::string>();
        else if (x.is_array() && !x.empty()) prompt.ids = token_ids(x, "prompt");
        else bad("prompt", form);
        r.prompts.push_back(std::move(prompt));
    };
    if (!p.is_array()) return one(p);
    if (p.empty()) bad("prompt", form);
    if (p[0].is_number_integer()) return one(p);
    if (p.size() > kMaxPrompts)
        bad("prompt",
            "at most " + std::to_string(kMaxPrompts) + " prompts per request, got " + std::to_string(p.size()));
    for (const json &x : p) one(x);
}

// A message's text: a string, or an array of text parts; null (nothing) only where `may_be_null`.
std::string message_content(const json &msg, const std::string &where, bool may_be_null) {
    const json &c = msg.contains("content") ? msg["content"] : json();
    if (c.is_null() && may_be_null) return "";
    if (c.is_string()) return c.get<std::string>();
    if (!c.is_array()) bad(where + ".content", where + ".content must be a string or an array of text parts");
    std::string content;
    for (const json &part : c) { // [{"type": "text", "text": "..."}, ...]
        // (json == "text" compares without converting: a "type" of another JSON type is just not text.)
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text") ||
            !part["text"].is_string())
            bad(where + ".content", where + ".content: only text content parts are supported");
        content += part["text"].get<std::string>();
    }
    return content;
}

// A message as a model's own chat template reads it (ChatMessage::fields): an assistant's calls with their
// arguments as objects, a tool's result with its tool_call_id and the tool's name (the message's, else that of the
// call it answers). `call_names` learns the calls' ids.
// `call_id`: a tool result's tool_call_id.
ChatMessage native_message(const json &msg, const std::string &role, std::string content, const std::string &where,
                           const std::string &call_id, std::map<std::string, std::string> &call_names) {
    ChatMessage out{role == "developer" ? "system" : role, std::move(content)};
    if (role == "assistant" && has(msg, "tool_calls")) {
        out.fields["tool_calls"] = template_tool_calls(msg["tool_calls"], where + ".tool_calls");
        for (const auto &c : out.fields["tool_calls"])
            if (c.contains("id")) call_names[c["id"].get<std::string>()] = c["function"]["name"].get<std::string>();
    }
    if (role == "tool") {
        out.fields["tool_call_id"] = call_id;
        if (has(msg, "name") && msg["name"].is_string()) out.fields["name"] = msg["name"];
        else if (const auto name = call_names.find(call_id); name != call_names.end())
            out.fields["name"] = name->second;
    }
    return out;
}

} // namespace

std::vector<ChatMessage> chat_messages(const json &m, const ApiTools &tools) {
    if (!m.is_array() || m.empty()) bad("messages", "'messages' must be a non-empty array");
    std::vector<ChatMessage> out;
    std::map<std::string, std::string> call_names; // tool_call_id → the tool's name, from the assistant turns
    bool results = false;                          // the last message added holds tools' results
    for (size_t i = 0; i < m.size(); ++i) {
        const json &msg = m[i];
        const std::string where = "messages[" + std::to_string(i) + "]";
        if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
            bad(where + ".role", where + " must be an object with a string 'role'");
        const std::string role = msg["role"].get<std::string>();
        if (role != "system" && role != "user" && role != "assistant" && role != "developer" && role != "tool")
            bad(where + ".role",
                where + ": unsupported role '" + role + "' (system, developer, user, assistant, tool)");
        if ((role == "system" || role == "developer") && i > 0)
            bad(where + ".role", where + ": a system message may only come first");
        const bool calls = role == "assistant" && has(msg, "tool_calls");
        std::string content = message_content(msg, where, calls);
        // An earlier answer's reasoning (reasoning_content, as this server returns it, or reasoning, vLLM's newer
        // name for it, which this server returns too) goes to a model's own template as reasoning_content, which it
        // may write or drop; the built-in format has no place for it.
        nlohmann::ordered_json reasoning = nullptr;
        for (const char *key : {"reasoning_content", "reasoning"})
            if (role == "assistant" && reasoning.is_null() && has(msg, key)) {
                if (!msg[key].is_string()) bad(where + "." + key, where + "." + key + " must be a string");
                reasoning = msg[key];
            }
        if (role == "tool" && (!has(msg, "tool_call_id") || !msg["tool_call_id"].is_string()))
            bad(where + ".tool_call_id", where + " (a tool's result) needs a string 'tool_call_id'");
        const std::string call_id = role == "tool" ? msg["tool_call_id"].get<std::string>() : "";
        if (tools.native()) { // the model's own template writes calls and results
            out.push_back(native_message(msg, role, std::move(content), where, call_id, call_names));
            if (!reasoning.is_null()) out.back().fields["reasoning_content"] = reasoning;
            continue;
        }
        if (calls) {
            content = written_tool_calls(content, msg["tool_calls"], where + ".tool_calls");
            for (const json &c : msg["tool_calls"])
                if (c.contains("id") && c["id"].is_string())
                    call_names[c["id"].get<std::string>()] = c["function"]["name"].get<std::string>();
        }
        if (role == "tool") {
            const auto name = call_names.find(call_id);
            content = written_tool_result(call_id, name == call_names.end() ? "" : name->second, content);
            if (results) {
                out.back().content += "\n\n" + content;
                continue;
            }
        }
        results = role == "tool";
        out.push_back({role == "developer" ? "system" : role == "tool" ? "user" : role, content});
        if (!reasoning.is_null()) out.back().fields["reasoning_content"] = reasoning;
    }
    if (const std::string instructions = tools_instructions(tools); !instructions.empty()) {
        if (out[0].role == "system") out[0].content += "\n\n" + instructions;
        else out.insert(out.begin(), ChatMessage{"system", instructions});
    }
    return out;
}

namespace {

// Completions: `logprobs` k and `echo`; chat: `logprobs` true and `top_logprobs` k.
void parse_logprobs(const json &j, ApiRequest &r) {
    SampleOptions &o = r.sample;
    if (r.chat) {
        if (has(j, "echo") && boolean(j, "echo")) bad("echo", "'echo' applies to /v1/completions");
        const bool on = has(j, "logprobs") && boolean(j, "logprobs");
        if (on) o.logprobs = 0;
        if (has(j, "top_logprobs")) {
            if (!on) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
            o.logprobs = integer(j, "top_logprobs", 0, kMaxTopLogprobs);
        }
        return;
    }
    if (has(j, "echo")) r.echo = boolean(j, "echo");
    if (has(j, "logprobs") && !(j["logprobs"].is_boolean() && !j["logprobs"].get<bool>()))
        o.logprobs = integer(j, "logprobs", 0, kMaxTopLogprobs);
    if (has(j, "top_logprobs")) bad("top_logprobs", "'top_logprobs' applies to chat; completions take 'logprobs': k");
    o.prompt_logprobs = r.echo && o.logprobs >= 0;
}

// {"type": "text"} (the default), {"type": "json_object"} (JSON mode: infer/json_constraint.h) or {"type":
// "json_schema", "json_schema": {"name": ..., "schema": {...}}} (infer/json_schema.h). The schema is read again from
// the body as an ordered_json: its properties are written in the order it gives them.
void parse_response_format(const json &f, const std::string &body, SampleOptions &o) {
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
        bad("response_format",
            "'response_format' must be an object with a 'type': 'text', 'json_object' or 'json_schema'");
    const std::string type = f["type"].get<std::string>();
    if (type == "json_object") {
        o.json_object = true;
    } else if (type == "json_schema") {
        if (!f.contains("json_schema") || !f["json_schema"].is_object() || !f["json_schema"].contains("schema"))
            bad("response_format", "'response_format' of type 'json_schema' needs 'json_schema': {'schema': {...}}");
        try {
            const auto ordered = nlohmann::ordered_json::parse(body);
            o.json_schema = JsonSchema::compile(ordered["response_format"]["json_schema"]["schema"]);
        } catch (const Error &e) {
            bad("response_format", std::string("response_format.json_schema.") + e.what());
        }
    } else if (type != "text") {
        bad("response_format",
            "'response_format' type '" + type + "' is not supported (supported: 'text', 'json_object', 'json_schema')");
    }
}

} // namespace

template <class Json> Json parse_request_body(const std::string &body) {
    Json j;
    try {
        j = Json::parse(body);
    } catch (const json::exception &e) {
        bad("", std::string("request body is not valid JSON: ") + e.what());
    }
    if (!j.is_object()) bad("", "request body must be a JSON object");
    if (json_deeper_than(j, kMaxBodyDepth))
        bad("", fmt::format("request body nests deeper than {} levels", kMaxBodyDepth));
    return j;
}
template json parse_request_body<json>(const std::string &);
template nlohmann::ordered_json parse_request_body<nlohmann::ordered_json>(const std::string &);

ApiRequest parse_api_request(const std::string &body, bool chat, int64_t max_context, ToolFormat tool_format) {
    json j = parse_request_body<json>(body); // (not const: operator[] of a missing key asserts on a const json)
    ApiRequest r;
    r.chat = chat;
    if (has(j, "model")) {
        if (!j["model"].is_string()) bad("model", "'model' must be a string");
        r.model = j["model"].get<std::string>();
    }
    if (chat) {
        if (!j.contains("messages")) bad("messages", "'messages' is required");
        if (has_tool_fields(j))
            r.tools = parse_tools(nlohmann::ordered_json::parse(body)); // ordered: the parameters keep their order
        r.tools.format = tool_format;
        r.messages = chat_messages(j["messages"], r.tools);
        if (has(j, "chat_template_kwargs")) {
            r.chat_template_kwargs = nlohmann::ordered_json::parse(body)["chat_template_kwargs"]; // in its order
            try {
                check_chat_variables(r.chat_template_kwargs, "chat_template_kwargs");
            } catch (const Error &e) {
                bad("chat_template_kwargs", e.what());
            }
        }
        if (r.tools.native() && r.tools.active()) r.chat_template_kwargs["tools"] = template_tools(r.tools);
    } else {
        if (!j.contains("prompt")) bad("prompt", "'prompt' is required");
        parse_prompts(j["prompt"], r);
    }
    if (has(j, "stream")) r.stream = boolean(j, "stream");
    if (r.stream && r.prompts.size() > 1) bad("prompt", "a streamed request takes one prompt");
    SampleOptions &o = r.sample;
    o.temperature = 1.0; // OpenAI's defaults: plain sampling
    o.top_k = 0;
    o.max_new_tokens = chat ? max_context : 16;
    for (const char *key : {"max_tokens", "max_completion_tokens"})
        if (has(j, key)) o.max_new_tokens = integer(j, key, 0, max_context);
    if (has(j, "temperature")) o.temperature = number(j, "temperature", 0, 2);
    if (has(j, "top_p")) o.top_p = number(j, "top_p", 0, 1);
    if (o.top_p == 0) o.temperature = 0; // the limit of a vanishing nucleus: greedy
    if (o.top_p == 0) o.top_p = 1;
    if (has(j, "top_k")) o.top_k = integer(j, "top_k", 0, std::numeric_limits<int32_t>::max());
    if (has(j, "min_p")) o.min_p = number(j, "min_p", 0, 1);
    if (has(j, "repetition_penalty")) o.repetition_penalty = number(j, "repetition_penalty", 0.01, 100);
    if (has(j, "seed"))
        o.seed = uint64_t(integer(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    if (has(j, "frequency_penalty")) o.frequency_penalty = number(j, "frequency_penalty", -2, 2);
    if (has(j, "presence_penalty")) o.presence_penalty = number(j, "presence_penalty", -2, 2);
    if (has(j, "logit_bias")) parse_logit_bias(j["logit_bias"], o);
    if (has(j, "n")) r.n = integer(j, "n", 1, kMaxChoices);
    if (r.stream && r.n > 1) bad("n", "a streamed request takes n = 1");
    if (r.n * int64_t(std::max<size_t>(r.prompts.size(), 1)) > kMaxChoices)
        bad("n", "at most " + std::to_string(kMaxChoices) + " choices (prompts × n) per request");
    parse_logprobs(j, r);
    if (!chat)
        for (const char *key : {"tools", "tool_choice", "functions", "function_call"})
            if (has(j, key)) bad(key, std::string("'") + key + "' applies to /v1/chat/completions");
    if (has(j, "response_format")) parse_response_format(j["response_format"], body, o);
    if (r.tools.active()) {
        if (o.json_mode())
            bad("response_format", "'response_format' with tools is not supported (tools hold the answer to their "
                                   "own JSON form; use tool_choice 'none' for a JSON answer)");
        o.json_schema = tools_schema(r.tools);
        o.json_trigger = tools_trigger(r.tools);
    }
    if (has(j, "stop")) {
        const json &s = j["stop"];
        if (s.is_string()) o.stop_strings = {s.get<std::string>()};
        else if (s.is_array() && s.size() <= 16) {
            for (const json &x : s) {
                if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings");
                o.stop_strings.push_back(x.get<std::string>());
            }
        } else bad("stop", "'stop' must be a string or an array of at most 16 strings");
        for (const std::string &x : o.stop_strings)
            if (x.empty()) bad("stop", "'stop' strings must not be empty");
    }
    if (has(j, "stop_token_ids")) {
        if (!j["stop_token_ids"].is_array()) bad("stop_token_ids", "'stop_token_ids' must be an array of integers");
        o.stop_tokens = token_ids(j["stop_token_ids"], "stop_token_ids");
    }
    if (has(j, "user") && !j["user"].is_string()) bad("user", "'user' must be a string");
    return r;
}

namespace {

// "bytes:\xe2\x96" for bytes that are not whole UTF-8 characters (a byte piece of a longer character).
std::string shown(const TokenSpelling &t) {
    if (t.bytes.empty()) return t.name;
    if (is_utf8(t.bytes)) return t.bytes;
    std::string out = "bytes:";
    for (unsigned char c : t.bytes) out += fmt::format("\\x{:02x}", c);
    return out;
}

json byte_values(const std::string &b) {
    json a = json::array();
    for (unsigned char c : b) a.push_back(int(c));
    return a;
}

} // namespace

json api_logprobs(bool chat, std::span<const TokenLogprobs> lps, const SpellToken &spell, int64_t *offset,
                  int32_t unscored) {
    if (chat) {
        json content = json::array();
        for (const TokenLogprobs &lp : lps) {
            const TokenSpelling t = spell(lp.token);
            json top = json::array();
            for (const TokenLogprob &alt : lp.top) {
                const TokenSpelling a = spell(alt.token);
                top.push_back({{"token", shown(a)}, {"logprob", alt.logprob}, {"bytes", byte_values(a.bytes)}});
            }
            content.push_back({{"token", shown(t)}, {"logprob", lp.logprob}, {"bytes", byte_values(t.bytes)},
                               {"top_logprobs", top}});
        }
        return {{"content", content}};
    }
    json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
    auto add = [&](int32_t token, const TokenLogprobs *lp) {
        const TokenSpelling t = spell(token);
        tokens.push_back(shown(t));
        offsets.push_back(*offset);
        *offset += utf8_characters(t.bytes);
        if (!lp) {
            token_lps.push_back(nullptr);
            tops.push_back(nullptr);
            return;
        }
        token_lps.push_back(lp->logprob);
        json top = json::object(); // the k most likely and the chosen token, as OpenAI's legacy API
        for (const TokenLogprob &alt : lp->top) top[shown(spell(alt.token))] = alt.logprob;
        top[shown(t)] = lp->logprob;
        tops.push_back(top);
    };
    if (unscored >= 0) add(unscored, nullptr);
    for (const TokenLogprobs &lp : lps) add(lp.token, &lp);
    return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

namespace {
// OpenAI's usage object; cached_tokens are the prompt tokens resumed from the prefix cache.
json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached_tokens) {
    return {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}
} // namespace

std::string tool_call_prefix(const std::string &response_id, size_t choice) {
    return fmt::format("{}_{}", response_id.substr(response_id.find_first_of("-_") + 1), choice);
}

json completion_response(const ApiRequest &r, const std::string &id, int64_t created, const std::string &model,
                         const std::vector<ApiChoice> &choices, const SpellToken &spell) {
    json out = json::array();
    int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
    for (size_t i = 0; i < choices.size(); ++i) {
        const Completion &c = choices[i].completion;
        json choice = {{"index", i}, {"finish_reason", c.finish_reason}};
        const bool lp = r.sample.logprobs >= 0;
        if (r.chat) { // the answer read back: its reasoning apart, then words, calls, or words then calls
            const ChatAnswer ca = read_chat_answer(r, c.text, c.finish_reason, tool_call_prefix(id, i));
            const ToolAnswer &a = ca.answer;
            choice["finish_reason"] = a.finish_reason;
            const bool words = a.tool_calls.is_null() || !a.content.empty(); // (calls alone: content null)
            choice["message"] = {{"role", "assistant"}, {"content", words ? json(a.content) : json()}};
            if (r.reasoning) // (null when the answer has none; under both names, as vLLM gives it)
                for (const char *key : {"reasoning_content", "reasoning"})
                    choice["message"][key] = ca.reasoning.empty() ? json() : json(ca.reasoning);
            if (!a.tool_calls.is_null()) choice["message"]["tool_calls"] = a.tool_calls;
            choice["logprobs"] = lp ? api_logprobs(true, c.logprobs, spell, nullptr) : json(nullptr);
        } else {
            choice["text"] = r.echo ? choices[i].echo_text + c.text : c.text;
            json logprobs = nullptr;
            if (lp) { // with echo the prompt's entries first: its first token unscored, then one per token
                int64_t offset = 0;
                if (r.echo) {
                    std::vector<TokenLogprobs> all = c.prompt_logprobs;
                    all.insert(all.end(), c.logprobs.begin(), c.logprobs.end());
                    logprobs = api_logprobs(false, all, spell, &offset, choices[i].prompt.at(0));
                } else {
                    logprobs = api_logprobs(false, c.logprobs, spell, &offset);
                }
            }
            choice["logprobs"] = logprobs;
        }
        choice["token_ids"] = c.tokens; // zaya extension: the generated ids
        out.push_back(choice);
        prompt_tokens += c.prompt_tokens;
        cached_tokens += c.cached_tokens;
        completion_tokens += int64_t(c.tokens.size());
    }
    return {{"id", id},
            {"object", r.chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", out},
            {"usage", usage_json(prompt_tokens, completion_tokens, cached_tokens)}};
}

json stream_chunk(const ApiRequest &r, const std::string &id, int64_t created, const std::string &model,
                  const std::string &delta, const Completion *final_c, const json &logprobs) {
    json choice = {{"index", 0}, {"finish_reason", final_c ? json(final_c->finish_reason) : json(nullptr)}};
    if (r.chat) choice["delta"] = final_c ? json::object() : json{{"content", delta}};
    else choice["text"] = delta;
    choice["logprobs"] = logprobs;
    json chunk = {{"id", id},
                  {"object", r.chat ? "chat.completion.chunk" : "text_completion"},
                  {"created", created},
                  {"model", model},
                  {"choices", json::array({choice})}};
    if (final_c)
        chunk["usage"] = usage_json(final_c->prompt_tokens, int64_t(final_c->tokens.size()), final_c->cached_tokens);
    return chunk;
}

} // namespace zaya
