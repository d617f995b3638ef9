// libFuzzer target: parse_api_request (and parse_responses_request) must turn any request body into a request or an
// ApiError (a 4xx), never crash, read out of bounds or throw anything else. The first byte picks /v1/completions,
// /v1/chat/completions or /v1/responses.
// The body is also read as a model's answer to tools, in the format the first byte picks (zaya's JSON object, or
// a model's own: zaya_xml, qwen3_coder, hermes), after a <think> block split off or not: read_chat_answer whole,
// and a ChatAnswerStream in two pieces, must say the same (reasoning, words, each call's name and arguments), throw
// nothing, and give valid UTF-8 for valid UTF-8 (the server's JSON writer throws on anything else); the engine's
// ContentGate must release exactly the split's content.
#include "core/utf8.h"
#include "infer/chat_answer.h"
#include "infer/openai_api.h"
#include "infer/responses_api.h"
#include "infer/tool_calls.h"

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const bool chat = data[0] & 1, responses = (data[0] & 6) == 6;
    const std::string body(reinterpret_cast<const char *>(data) + 1, size - 1);
    try {
        zaya::ApiRequest r = responses ? zaya::parse_responses_request(body, 4096).api
                                       : zaya::parse_api_request(body, chat, 4096);
        r.sample.validate(); // whatever was accepted must be a valid sampling request
    } catch (const zaya::ApiError &e) {
        if (e.status < 400 || e.status >= 500) __builtin_trap();
    }
    zaya::ApiRequest r;
    r.tools.choice = zaya::ApiTools::Choice::Auto;
    r.tools.format = zaya::ToolFormat((data[0] >> 3) % 4);
    r.tools.tools = {{"f", "", {{"type", "object"}, {"properties", {{"n", {{"type", "integer"}}},
                                                                    {"o", {{"type", "object"}}},
                                                                    {"b", {{"type", "boolean"}}}}}}}};
    if (data[0] & 32) r.reasoning = zaya::ReasoningTags{};
    r.starts_in_reasoning = data[0] & 64;
    const zaya::ChatAnswer whole = zaya::read_chat_answer(r, body, "stop", "0_0");
    const zaya::ToolAnswer &a = whole.answer;
    zaya::ChatAnswerStream stream(r);
    const size_t cut = data[0] % (body.size() + 1);
    std::string words, reasoning;
    nlohmann::json calls = nlohmann::json::array();
    auto take = [&](const zaya::ChatPiece &piece) {
        const zaya::AnswerPiece &p = piece.answer;
        if (zaya::is_utf8(body) && (!zaya::is_utf8(p.words) || !zaya::is_utf8(piece.reasoning)))
            __builtin_trap(); // whole characters only
        words += p.words;
        reasoning += piece.reasoning;
        for (const nlohmann::json &d : zaya::call_deltas(p, "0_0")) {
            const size_t k = d["index"].get<size_t>();
            const bool begins = d["function"].contains("name");
            if (begins != (k == calls.size())) __builtin_trap(); // each call begins once, in order, with its name
            if (begins) calls.push_back({{"name", d["function"]["name"]}, {"arguments", ""}});
            const std::string &piece_args = d["function"]["arguments"].get_ref<const std::string &>();
            if (zaya::is_utf8(body) && !zaya::is_utf8(piece_args)) __builtin_trap(); // whole characters only
            calls[k]["arguments"].get_ref<std::string &>() += piece_args;
        }
    };
    for (const std::string_view piece : {std::string_view(body).substr(0, cut), std::string_view(body).substr(cut)})
        take(stream.feed(piece));
    take(stream.finish());
    if (words != a.content || reasoning != whole.reasoning) __builtin_trap();
    if (calls.empty() != a.tool_calls.is_null() || (!calls.empty() && calls.size() != a.tool_calls.size()))
        __builtin_trap();
    for (size_t k = 0; !calls.empty() && k < calls.size(); ++k)
        if (calls[k]["name"] != a.tool_calls[k]["function"]["name"] ||
            calls[k]["arguments"] != a.tool_calls[k]["function"]["arguments"])
            __builtin_trap();
    if (zaya::is_utf8(body) && (!zaya::is_utf8(a.content) || !zaya::is_utf8(words))) __builtin_trap();
    if (r.reasoning) { // the engine's gate releases the splitter's content, byte for byte, once it is decided
        zaya::ContentGate gate(*r.reasoning, r.starts_in_reasoning);
        std::string content;
        for (const char c : body) gate.feed(uint8_t(c), content);
        const std::string split = zaya::split_reasoning(body, *r.reasoning, r.starts_in_reasoning).content;
        const std::string undecided = r.starts_in_reasoning ? "" : gate.held(); // the content, should it end here
        if (gate.in_content() ? content != split : !content.empty() || split != undecided) __builtin_trap();
    }
    return 0;
}
