#include "infer/responses_api.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace zaya {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

[[noreturn]] void refuse(const std::string &param, const std::string &message) { throw ApiError(400, message, param); }

bool given(const ordered_json &j, const char *key) { return j.contains(key) && !j[key].is_null(); }

// A string member, refused naming `where.key` when absent (required) or not a string.
std::string text_member(const ordered_json &j, const char *key, const std::string &where) {
    if (!given(j, key) || !j[key].is_string())
        refuse(where + "." + key, fmt::format("'{}.{}' must be a string", where, key));
    return j[key].get<std::string>();
}

// A message's content: a string, or text parts (input_text, output_text) joined.
std::string item_text(const ordered_json &content, const std::string &where) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) refuse(where, fmt::format("'{}' must be a string or an array of text parts", where));
    std::string text;
    for (size_t k = 0; k < content.size(); ++k) {
        const ordered_json &part = content[k];
        const std::string at = fmt::format("{}[{}]", where, k);
        if (!part.is_object() || !part.contains("type") ||
            (part["type"] != "input_text" && part["type"] != "output_text" && part["type"] != "text"))
            refuse(at, fmt::format("'{}': only text parts (input_text, output_text) are supported", at));
        text += text_member(part, "text", at);
    }
    return text;
}

// A message as a listed input item (GET .../input_items): its text as one part, input_text (the assistant's
// output_text).
json listed_message(const std::string &role, const std::string &text) {
    const char *kind = role == "assistant" ? "output_text" : "input_text";
    return {{"type", "message"},
            {"role", role},
            {"content", json::array({{{"type", kind}, {"text", text}}})},
            {"status", "completed"}};
}

// A reasoning item's text as a listed input item (and, with an id and status, as an output item: reasoning_item).
json listed_reasoning(const std::string &text) {
    return {{"type", "reasoning"},
            {"summary", json::array()},
            {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})},
            {"status", "completed"}};
}

// The chat request's messages for `input`, appended to `messages`; where[k] names the Responses field message k
// came from, for refusals. `items` gets the input as Responses' items (messages with one text part, function calls
// and their outputs, each "completed"), for GET /v1/responses/{id}/input_items.
void input_messages(const ordered_json &input, ordered_json &messages, std::vector<std::string> &where, json &items) {
    if (input.is_string()) {
        messages.push_back({{"role", "user"}, {"content", input}});
        where.push_back("input");
        items.push_back(listed_message("user", input.get<std::string>()));
        return;
    }
    if (!input.is_array() || input.empty()) refuse("input", "'input' must be a string or a non-empty array of items");
    bool joins = false; // the last item was the assistant's (words or a call): a function_call joins its turn
    ordered_json reasoning; // a reasoning item's text, for the assistant's turn that follows it
    auto reasoned = [&](ordered_json &message) {
        if (!reasoning.is_null()) message["reasoning_content"] = std::move(reasoning);
        reasoning = nullptr;
    };
    for (size_t i = 0; i < input.size(); ++i) {
        const ordered_json &item = input[i];
        const std::string at = fmt::format("input[{}]", i);
        if (!item.is_object()) refuse(at, fmt::format("'{}' must be an object", at));
        const std::string type = given(item, "type") ? text_member(item, "type", at) : "message";
        const bool follows = joins;
        joins = false;
        if (type == "message") {
            const std::string role = text_member(item, "role", at);
            if (role != "user" && role != "assistant" && role != "system" && role != "developer")
                refuse(at + ".role",
                       fmt::format("'{}.role' must be user, assistant, system or developer, got '{}'", at, role));
            const std::string text =
                item_text(item.contains("content") ? item["content"] : ordered_json(), at + ".content");
            messages.push_back({{"role", role}, {"content", text}});
            if (role == "assistant") reasoned(messages.back());
            else reasoning = nullptr; // (a reasoning item goes with the answer right after it, or with none)
            items.push_back(listed_message(role, text));
            joins = role == "assistant";
        } else if (type == "function_call") {
            const std::string id = text_member(item, "call_id", at), name = text_member(item, "name", at),
                              arguments = text_member(item, "arguments", at);
            const ordered_json call = {
                {"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
            items.push_back({{"type", type},
                             {"call_id", id},
                             {"name", name},
                             {"arguments", arguments},
                             {"status", "completed"}});
            joins = true;
            if (follows) {
                messages.back()["tool_calls"].push_back(call);
                reasoning = nullptr;
                continue;
            }
            messages.push_back({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", {call}}});
            reasoned(messages.back());
            where.push_back(at);
            continue;
        } else if (type == "reasoning") { // an earlier answer's reasoning (its text, as this server gives it)
            std::string text;
            if (given(item, "content")) {
                if (!item["content"].is_array())
                    refuse(at + ".content", fmt::format("'{}.content' must be an array of reasoning_text parts", at));
                for (const ordered_json &part : item["content"])
                    if (part.is_object() && part.contains("text") && part["text"].is_string())
                        text += part["text"].get<std::string>();
            }
            reasoning = text;
            items.push_back(listed_reasoning(text));
            continue;
        } else if (type == "function_call_output") {
            const std::string id = text_member(item, "call_id", at);
            const std::string output =
                item_text(item.contains("output") ? item["output"] : ordered_json(), at + ".output");
            messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", output}});
            reasoning = nullptr;
            items.push_back({{"type", type}, {"call_id", id}, {"output", output}, {"status", "completed"}});
        } else {
            refuse(at + ".type", fmt::format("'{}.type' '{}' is not supported (message, function_call, "
                                             "function_call_output, reasoning)",
                                             at, type));
        }
        where.push_back(at);
    }
}

// Responses' function tools ({"type": "function", "name", "description", "parameters", "strict"}) in chat's form.
ordered_json chat_tools(const ordered_json &tools) {
    if (!tools.is_array()) refuse("tools", "'tools' must be an array");
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const ordered_json &t = tools[i];
        const std::string at = fmt::format("tools[{}]", i);
        if (!t.is_object() || !t.contains("type") || !t["type"].is_string())
            refuse(at, fmt::format("'{}' must be an object with a 'type'", at));
        if (t["type"] != "function")
            refuse(at + ".type", fmt::format("'{}.type' '{}': only function tools are supported (zaya hosts no "
                                             "tools)",
                                             at, t["type"].get<std::string>()));
        ordered_json f = ordered_json::object();
        for (const char *key : {"name", "description", "parameters", "strict"})
            if (t.contains(key)) f[key] = t[key];
        out.push_back({{"type", "function"}, {"function", f}});
    }
    return out;
}

ordered_json chat_tool_choice(const ordered_json &c) {
    if (c.is_string()) return c;
    if (c.is_object() && c.contains("type") && c["type"] == "function" && c.contains("name"))
        return {{"type", "function"}, {"function", {{"name", c["name"]}}}};
    refuse("tool_choice",
           "'tool_choice' must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}");
}

// Responses' text.format ({"type": "text" | "json_object" | "json_schema", "name", "schema", "strict"}) as chat's
// response_format.
ordered_json chat_response_format(const ordered_json &text) {
    if (!text.is_object()) refuse("text", "'text' must be an object");
    if (!given(text, "format")) return nullptr;
    const ordered_json &f = text["format"];
    if (!f.is_object() || !f.contains("type") || !f["type"].is_string())
        refuse("text.format", "'text.format' must be an object with a 'type'");
    if (f["type"] != "json_schema") return {{"type", f["type"]}};
    ordered_json schema = ordered_json::object();
    for (const char *key : {"name", "schema", "strict", "description"})
        if (f.contains(key)) schema[key] = f[key];
    return {{"type", "json_schema"}, {"json_schema", schema}};
}

void replace_all(std::string &s, const std::string &from, const std::string &to) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size()) s.replace(at, from.size(), to);
}

// A refusal of the chat request, in the Responses request's names.
ApiError in_responses_names(ApiError e, const std::vector<std::string> &where) {
    for (std::string *s : {&e.param, &e.message}) {
        for (size_t k = where.size(); k-- > 0;) replace_all(*s, fmt::format("messages[{}]", k), where[k]);
        replace_all(*s, "'messages'", "'input'");
        if (*s == "messages") *s = "input";
        replace_all(*s, ".function.", ".");
        replace_all(*s, "max_tokens", "max_output_tokens");
        replace_all(*s, "response_format.json_schema.", "text.format.");
        replace_all(*s, "response_format", "text.format");
    }
    return e;
}

// `include`: "message.output_text.logprobs" asks for the words' log-probabilities; the others name what zaya has
// none of (hosted tools' results, images, encrypted reasoning), so they are taken and add nothing.
bool included_logprobs(const ordered_json &j) {
    static const std::set<std::string> kNothingToAdd = {
        "code_interpreter_call.outputs", "computer_call_output.output.image_url", "file_search_call.results",
        "message.input_image.image_url", "reasoning.encrypted_content", "web_search_call.action.sources",
        "web_search_call.results"};
    if (!given(j, "include")) return false;
    if (!j["include"].is_array()) refuse("include", "'include' must be an array of strings");
    bool logprobs = false;
    for (size_t i = 0; i < j["include"].size(); ++i) {
        const ordered_json &v = j["include"][i];
        const std::string at = fmt::format("include[{}]", i);
        if (!v.is_string()) refuse(at, fmt::format("'{}' must be a string", at));
        if (v == "message.output_text.logprobs") logprobs = true;
        else if (!kNothingToAdd.count(v.get<std::string>()))
            refuse(at, fmt::format("'{}' '{}' is not supported (message.output_text.logprobs)", at,
                                   v.get<std::string>()));
    }
    return logprobs;
}

std::string number_of(const std::string &id) { return id.substr(id.find('_') + 1); }

// The text part of a message item; with `logprobs` (an array: asked for) those of its tokens.
json text_part(const std::string &text, const json &logprobs) {
    json part = {{"type", "output_text"}, {"text", text}, {"annotations", json::array()}};
    if (!logprobs.is_null()) part["logprobs"] = logprobs;
    return part;
}

json message_item(const std::string &id, const std::string &text, const char *status,
                  const json &logprobs = nullptr) {
    return {{"type", "message"},
            {"id", "msg_" + number_of(id)},
            {"status", status},
            {"role", "assistant"},
            {"content", json::array({text_part(text, logprobs)})}};
}

json call_item(const std::string &id, size_t k, const json &call_id, const json &name, const json &arguments,
               const char *status) {
    return {{"type", "function_call"}, {"id", fmt::format("fc_{}_{}", number_of(id), k)},
            {"call_id", call_id},      {"name", name},
            {"arguments", arguments},  {"status", status}};
}

// A reasoning item (the model's reasoning, split off its answer: infer/reasoning.h), as OpenAI's reasoning models
// give one but with its text ("reasoning_text"), as vLLM gives it.
json reasoning_item(const std::string &id, const std::string &text, const char *status) {
    json item = listed_reasoning(text);
    item["id"] = "rs_" + number_of(id);
    item["status"] = status;
    return item;
}

// The Response object around `output`.
json response_object(const json &echoed, const std::string &id, int64_t created, const std::string &model,
                     const char *status, json output, const Completion *c) {
    json out = {{"id", id},         {"object", "response"},       {"created_at", created},
                {"status", status}, {"error", nullptr},           {"incomplete_details", nullptr},
                {"model", model},   {"output", std::move(output)}};
    if (c && c->finish_reason == "length") out["incomplete_details"] = {{"reason", "max_output_tokens"}};
    for (const auto &[key, value] : echoed.items()) out[key] = value;
    out["usage"] = nullptr;
    if (c)
        out["usage"] = {{"input_tokens", c->prompt_tokens},
                        {"input_tokens_details", {{"cached_tokens", c->cached_tokens}}},
                        {"output_tokens", int64_t(c->tokens.size())},
                        {"output_tokens_details", {{"reasoning_tokens", 0}}},
                        {"total_tokens", c->prompt_tokens + int64_t(c->tokens.size())}};
    return out;
}

} // namespace

ResponsesRequest parse_responses_request(const std::string &body, int64_t max_context,
                                         const PreviousResponse &previous, ToolFormat tool_format) {
    const ordered_json j = parse_request_body<ordered_json>(body);
    if (given(j, "conversation"))
        refuse("conversation", "'conversation': zaya keeps no conversation objects; use 'previous_response_id' or "
                               "send the whole conversation in 'input'");
    if (given(j, "background") && j["background"] != false)
        refuse("background", "'background' responses are not supported");
    if (!given(j, "input")) refuse("input", "'input' is required");
    ResponsesRequest q;
    if (given(j, "store")) {
        if (!j["store"].is_boolean()) refuse("store", "'store' must be a boolean");
        q.store = j["store"].get<bool>();
    }
    std::vector<std::string> where; // the Responses field each chat message comes from
    if (given(j, "previous_response_id")) {
        if (!j["previous_response_id"].is_string())
            refuse("previous_response_id", "'previous_response_id' must be a string");
        const std::string id = j["previous_response_id"].get<std::string>();
        const std::optional<EarlierResponse> earlier = previous ? previous(id) : std::nullopt;
        if (!earlier)
            throw ApiError(404,
                           fmt::format("'previous_response_id': no stored response '{}' (stored with \"store\": true, "
                                       "kept in memory until the server stops or its --responses-store-mb fills)",
                                       id),
                           "previous_response_id", "invalid_request_error", "previous_response_not_found");
        q.conversation = earlier->conversation;
        q.earlier_items = earlier->items;
        where.assign(q.conversation.size(), "previous_response_id");
    }
    input_messages(j["input"], q.conversation, where, q.input_items);
    // The instructions are the system turn; a system or developer message that begins the conversation joins them.
    ordered_json messages = q.conversation;
    if (given(j, "instructions")) {
        if (!j["instructions"].is_string()) refuse("instructions", "'instructions' must be a string");
        const std::string instructions = j["instructions"].get<std::string>();
        const std::string first = messages.empty() ? "" : messages[0]["role"].get<std::string>();
        if (first == "system" || first == "developer") {
            messages[0]["content"] = instructions + "\n\n" + messages[0]["content"].get<std::string>();
            where[0] = "instructions";
        } else {
            messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"content", instructions}});
            where.insert(where.begin(), "instructions");
        }
    }
    ordered_json chat = ordered_json::object();
    chat["messages"] = messages;
    for (const char *key : {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed", "top_k", "min_p",
                            "stop", "repetition_penalty", "frequency_penalty", "presence_penalty", "logit_bias"})
        if (j.contains(key)) chat[key] = j[key];
    if (j.contains("max_output_tokens")) chat["max_tokens"] = j["max_output_tokens"];
    if (given(j, "tools")) chat["tools"] = chat_tools(j["tools"]);
    if (given(j, "tool_choice")) chat["tool_choice"] = chat_tool_choice(j["tool_choice"]);
    if (given(j, "text"))
        if (ordered_json f = chat_response_format(j["text"]); !f.is_null()) chat["response_format"] = f;
    if (given(j, "top_logprobs")) {
        const ordered_json &k = j["top_logprobs"];
        if (!k.is_number_integer() || k.get<int64_t>() < 0 || k.get<int64_t>() > kMaxTopLogprobs)
            refuse("top_logprobs", fmt::format("'top_logprobs' must be an integer from 0 to {}", kMaxTopLogprobs));
    }
    if (included_logprobs(j)) {
        chat["logprobs"] = true;
        chat["top_logprobs"] = given(j, "top_logprobs") ? j["top_logprobs"] : ordered_json(0);
    }
    if (given(j, "truncation")) {
        if (j["truncation"] != "auto" && j["truncation"] != "disabled")
            refuse("truncation", "'truncation' must be 'auto' or 'disabled'");
        q.truncate = j["truncation"] == "auto";
    }
    try {
        q.api = parse_api_request(chat.dump(), /*chat=*/true, max_context, tool_format);
    } catch (const ApiError &e) {
        throw in_responses_names(e, where);
    }
    const ApiRequest &r = q.api;
    q.echoed = {
        {"instructions", given(j, "instructions") ? json(j["instructions"]) : json(nullptr)},
        {"max_output_tokens", given(j, "max_output_tokens") ? json(j["max_output_tokens"]) : json(nullptr)},
        {"previous_response_id", given(j, "previous_response_id") ? json(j["previous_response_id"]) : json(nullptr)},
        {"temperature", given(j, "temperature") ? json(j["temperature"]) : json(1.0)},
        {"top_p", given(j, "top_p") ? json(j["top_p"]) : json(1.0)},
        {"tools", given(j, "tools") ? json(j["tools"]) : json::array()},
        {"tool_choice", given(j, "tool_choice") ? json(j["tool_choice"]) : json(r.tools.active() ? "auto" : "none")},
        {"parallel_tool_calls", r.tools.parallel},
        {"store", q.store},
        {"top_logprobs", given(j, "top_logprobs") ? json(j["top_logprobs"]) : json(nullptr)},
        {"truncation", q.truncate ? "auto" : "disabled"},
        {"text",
         given(j, "text") && given(j["text"], "format") ? json(j["text"]) : json{{"format", {{"type", "text"}}}}}};
    return q;
}

ordered_json answered_conversation(const ResponsesRequest &q, const json &response) {
    ordered_json conversation = q.conversation;
    ordered_json answer = {{"role", "assistant"}, {"content", nullptr}}; // its words and calls: one turn
    for (const json &item : response["output"]) {
        if (item["type"] == "reasoning")
            answer["reasoning_content"] = item["content"][0]["text"];
        else if (item["type"] == "message")
            answer["content"] = item["content"][0]["text"];
        else if (item["type"] == "function_call")
            answer["tool_calls"].push_back({{"id", item["call_id"]},
                                            {"type", "function"},
                                            {"function", {{"name", item["name"]}, {"arguments", item["arguments"]}}}});
    }
    conversation.push_back(answer);
    return conversation;
}

EarlierResponse earlier_response(const ordered_json &conversation, const json &listed_items, const json &response) {
    EarlierResponse e{conversation, listed_items};
    for (const json &item : response["output"]) e.items.push_back(item);
    return e;
}

json listed_input_items(const ResponsesRequest &q, const std::string &response_id) {
    json listed = q.earlier_items;
    for (size_t k = 0; k < q.input_items.size(); ++k) {
        const json &item = q.input_items[k];
        const std::string type = item["type"];
        const char *kind = type == "message"         ? "msg"
                           : type == "function_call" ? "fc"
                           : type == "reasoning"     ? "rs"
                                                     : "fco";
        json with_id = {{"id", fmt::format("{}_{}_in{}", kind, number_of(response_id), k)}};
        for (const auto &[key, value] : item.items()) with_id[key] = value;
        listed.push_back(with_id);
    }
    return listed;
}

json input_items_page(const json &items, const std::string &response_id, const std::string &limit,
                      const std::string &order, const std::string &after) {
    int64_t n = 20;
    if (!limit.empty()) {
        size_t used = 0;
        try {
            n = std::stoll(limit, &used);
        } catch (const std::exception &) {
            used = 0;
        }
        if (used != limit.size() || n < 1 || n > 100)
            throw ApiError(400, fmt::format("'limit' must be an integer from 1 to 100, got '{}'", limit), "limit");
    }
    if (!order.empty() && order != "asc" && order != "desc")
        throw ApiError(400, fmt::format("'order' must be 'asc' or 'desc', got '{}'", order), "order");
    const bool ascending = order == "asc";
    json listed = json::array(); // in the order asked for
    for (size_t k = 0; k < items.size(); ++k) listed.push_back(items[ascending ? k : items.size() - 1 - k]);
    size_t from = 0;
    if (!after.empty()) {
        while (from < listed.size() && listed[from]["id"] != after) ++from;
        if (from == listed.size())
            throw ApiError(400, fmt::format("'after': response '{}' has no input item '{}'", response_id, after),
                           "after");
        ++from;
    }
    json data = json::array();
    for (size_t k = from; k < listed.size() && int64_t(data.size()) < n; ++k) data.push_back(listed[k]);
    return {{"object", "list"},
            {"data", data},
            {"first_id", data.empty() ? json(nullptr) : data.front()["id"]},
            {"last_id", data.empty() ? json(nullptr) : data.back()["id"]},
            {"has_more", from + data.size() < listed.size()}};
}

void drop_turns_to_fit(ApiRequest &r, const std::function<bool(const ApiRequest &)> &fits) {
    const auto first = size_t(!r.messages.empty() && r.messages[0].role == "system"); // the system turn stays
    const size_t droppable = r.messages.size() > first ? r.messages.size() - first - 1 : 0; // and the last one
    auto dropped = [&](size_t k) {
        ApiRequest fewer = r;
        const auto from = fewer.messages.begin() + std::ptrdiff_t(first);
        fewer.messages.erase(from, from + std::ptrdiff_t(k));
        return fewer;
    };
    size_t lo = 0, hi = droppable; // the fewest in [lo, hi] that fit: bisection
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (fits(dropped(mid))) hi = mid;
        else lo = mid + 1;
    }
    r = dropped(lo);
}

void WordLogprobs::add(std::span<const TokenLogprobs> lps, const SpellToken &spell) {
    for (const TokenLogprobs &lp : lps) {
        entries_.emplace_back(end_, api_logprobs(true, {&lp, 1}, spell, nullptr)["content"][0]);
        end_ += entries_.back().second["bytes"].size(); // (its bytes, one number each)
    }
}

json WordLogprobs::take(size_t covered) {
    json out = json::array();
    for (; taken_ < entries_.size() && entries_[taken_].first < covered; ++taken_)
        out.push_back(std::move(entries_[taken_].second));
    return out;
}

json responses_response(const ApiRequest &r, const json &echoed, const std::string &id, int64_t created,
                        const std::string &model, const Completion &c, const SpellToken &spell) {
    const bool cut = c.finish_reason == "length";
    json output = json::array();
    const ChatAnswer ca = read_chat_answer(r, c.text, c.finish_reason, tool_call_prefix(id, 0));
    const ToolAnswer &a = ca.answer;
    const bool calls = !a.tool_calls.is_null();
    if (!ca.reasoning.empty()) output.push_back(reasoning_item(id, ca.reasoning, "completed"));
    json logprobs = nullptr;
    if (r.sample.logprobs >= 0) { // the words' tokens (the reasoning's come before them)
        WordLogprobs words;
        words.add(c.logprobs, spell);
        words.take(ca.content_start);
        logprobs = words.take(ca.content_start + a.content.size());
    }
    if (!calls || !a.content.empty()) // words, then the calls they lead to
        output.push_back(message_item(id, a.content, cut && !calls ? "incomplete" : "completed", logprobs));
    for (size_t k = 0; calls && k < a.tool_calls.size(); ++k) {
        const json &call = a.tool_calls[k];
        output.push_back(call_item(id, k, call["id"], call["function"]["name"], call["function"]["arguments"],
                                   cut && k + 1 == a.tool_calls.size() ? "incomplete" : "completed"));
    }
    return response_object(echoed, id, created, model, cut ? "incomplete" : "completed", output, &c);
}

ResponsesStream::ResponsesStream(ApiRequest r, json echoed, std::string id, int64_t created, std::string model,
                                 SpellToken spell)
    : r_(std::move(r)), echoed_(std::move(echoed)), id_(std::move(id)), model_(std::move(model)), created_(created),
      spell_(std::move(spell)), answer_(r_) {}

json ResponsesStream::event(const char *type, json fields) {
    json e = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto &[key, value] : fields.items()) e[key] = std::move(value);
    return e;
}

json ResponsesStream::snapshot(const char *status) const {
    return response_object(echoed_, id_, created_, model_, status, output_, nullptr);
}

std::vector<json> ResponsesStream::open() {
    return {event("response.created", {{"response", snapshot("in_progress")}}),
            event("response.in_progress", {{"response", snapshot("in_progress")}})};
}

void ResponsesStream::open_message(std::vector<json> &out) {
    if (item_open_ && output_.back()["type"] == "message") return;
    close_item(out); // (the reasoning before the words)
    const json logprobs = r_.sample.logprobs >= 0 ? json::array() : json(nullptr);
    output_.push_back(message_item(id_, "", "in_progress", logprobs));
    json added = output_.back();
    added["content"] = json::array();
    out.push_back(event("response.output_item.added", {{"output_index", output_.size() - 1}, {"item", added}}));
    out.push_back(event("response.content_part.added", {{"item_id", output_.back()["id"]},
                                                        {"output_index", output_.size() - 1},
                                                        {"content_index", 0},
                                                        {"part", text_part("", logprobs)}}));
    item_open_ = true;
}

void ResponsesStream::add_words(const std::string &words, std::vector<json> &out) {
    open_message(out);
    if (words.empty()) return;
    // The words' tokens: those after the reasoning's, whose text comes before them (content_start: the words have
    // begun, so it is known).
    const size_t base = answer_.content_start();
    if (words_ == 0 && base > 0) logprobs_.take(base);
    words_ += words.size();
    json &part = output_.back()["content"][0];
    part["text"].get_ref<std::string &>() += words;
    json logprobs = json::array();
    if (r_.sample.logprobs >= 0) {
        logprobs = logprobs_.take(base + words_);
        for (const json &e : logprobs) part["logprobs"].push_back(e);
    }
    out.push_back(event("response.output_text.delta", {{"item_id", output_.back()["id"]},
                                                       {"output_index", output_.size() - 1},
                                                       {"content_index", 0},
                                                       {"delta", words},
                                                       {"logprobs", logprobs}}));
}

std::vector<json> ResponsesStream::feed(const std::string &text, std::span<const TokenLogprobs> logprobs) {
    std::vector<json> out;
    if (r_.sample.logprobs >= 0) logprobs_.add(logprobs, spell_);
    const ChatPiece piece = answer_.feed(text);
    add_reasoning(piece.reasoning, out);
    if (!piece.answer.words.empty()) add_words(piece.answer.words, out);
    add_calls(piece.answer, out);
    return out;
}

void ResponsesStream::add_reasoning(const std::string &text, std::vector<json> &out) {
    if (text.empty()) return;
    if (!item_open_ || output_.back()["type"] != "reasoning") {
        close_item(out);
        output_.push_back(reasoning_item(id_, "", "in_progress"));
        json added = output_.back();
        added["content"] = json::array();
        out.push_back(event("response.output_item.added", {{"output_index", output_.size() - 1}, {"item", added}}));
        out.push_back(event("response.content_part.added", {{"item_id", added["id"]},
                                                            {"output_index", output_.size() - 1},
                                                            {"content_index", 0},
                                                            {"part", output_.back()["content"][0]}}));
        item_open_ = true;
    }
    output_.back()["content"][0]["text"].get_ref<std::string &>() += text;
    out.push_back(event("response.reasoning_text.delta", {{"item_id", output_.back()["id"]},
                                                          {"output_index", output_.size() - 1},
                                                          {"content_index", 0},
                                                          {"delta", text}}));
}

void ResponsesStream::add_calls(const AnswerPiece &piece, std::vector<json> &out) {
    for (const json &d : call_deltas(piece, tool_call_prefix(id_, 0))) {
        if (d.contains("id")) { // a call begins: the one before is done
            close_item(out);
            output_.push_back(
                call_item(id_, d["index"].get<size_t>(), d["id"], d["function"]["name"], "", "in_progress"));
            out.push_back(
                event("response.output_item.added", {{"output_index", output_.size() - 1}, {"item", output_.back()}}));
            item_open_ = true;
        }
        const std::string &delta = d["function"]["arguments"].get_ref<const std::string &>();
        if (delta.empty()) continue;
        output_.back()["arguments"].get_ref<std::string &>() += delta;
        out.push_back(
            event("response.function_call_arguments.delta",
                  {{"item_id", output_.back()["id"]}, {"output_index", output_.size() - 1}, {"delta", delta}}));
    }
}

void ResponsesStream::close_item(std::vector<json> &out) {
    if (!item_open_) return;
    item_open_ = false;
    json &item = output_.back();
    const size_t index = output_.size() - 1;
    if (item["type"] == "reasoning") {
        const json &part = item["content"][0];
        out.push_back(event("response.reasoning_text.done", {{"item_id", item["id"]},
                                                             {"output_index", index},
                                                             {"content_index", 0},
                                                             {"text", part["text"]}}));
        out.push_back(event(
            "response.content_part.done",
            {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
    } else if (item["type"] == "message") {
        const json &part = item["content"][0];
        out.push_back(event("response.output_text.done",
                            {{"item_id", item["id"]},
                             {"output_index", index},
                             {"content_index", 0},
                             {"text", part["text"]},
                             {"logprobs", part.contains("logprobs") ? part["logprobs"] : json::array()}}));
        out.push_back(event(
            "response.content_part.done",
            {{"item_id", item["id"]}, {"output_index", index}, {"content_index", 0}, {"part", part}}));
    } else {
        out.push_back(event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                                      {"output_index", index},
                                                                      {"name", item["name"]},
                                                                      {"arguments", item["arguments"]}}));
    }
    if (item["status"] == "in_progress") item["status"] = "completed";
    out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
}

std::vector<json> ResponsesStream::finish(const Completion &c) {
    std::vector<json> out;
    const json final_response = responses_response(r_, echoed_, id_, created_, model_, c, spell_);
    const json &items = final_response["output"];
    // The words the stream held back (what might have begun calls), and the message of an answer without any.
    const ChatPiece held = answer_.finish();
    add_reasoning(held.reasoning, out);
    const bool answered = std::any_of(output_.begin(), output_.end(), [](const json &item) {
        return item["type"] != "reasoning";
    });
    if (!held.answer.words.empty() || (!answered && held.answer.calls.empty())) add_words(held.answer.words, out);
    add_calls(held.answer, out); // (a model's own format: a call cut short)
    if (!output_.empty() && output_.size() == items.size()) output_.back()["status"] = items.back()["status"];
    close_item(out);
    const bool cut = final_response["status"] == "incomplete";
    out.push_back(event(cut ? "response.incomplete" : "response.completed", {{"response", final_response}}));
    return out;
}

} // namespace zaya
