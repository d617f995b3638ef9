#include "infer/chat_answer.h"

namespace zaya {

void expect_reasoning(ApiRequest &r, const ReasoningTags &tags, bool starts_in_reasoning) {
    r.starts_in_reasoning = starts_in_reasoning;
    r.reasoning = tags;
    if (!r.sample.json_mode()) return;
    r.sample.trigger_reasoning = tags; // (held after the reasoning; a lazy trigger watched for after it)
    r.sample.starts_in_reasoning = starts_in_reasoning;
}

ChatAnswer read_chat_answer(const ApiRequest &r, const std::string &text, const std::string &finish_reason,
                            const std::string &id_prefix) {
    ChatAnswer a;
    ReasoningPiece p{"", text};
    if (r.reasoning) p = split_reasoning(text, *r.reasoning, r.starts_in_reasoning);
    a.reasoning = std::move(p.reasoning);
    a.content_start = text.size() - p.content.size(); // (the content is the text's end)
    if (r.tools.active()) {
        a.answer = read_tool_answer(r.tools, p.content, finish_reason, id_prefix);
    } else {
        a.answer.content = std::move(p.content);
        a.answer.finish_reason = finish_reason;
    }
    return a;
}

nlohmann::json chat_delta(const ChatPiece &piece, const std::string &id_prefix) {
    nlohmann::json delta = nlohmann::json::object();
    if (!piece.answer.words.empty() || (piece.reasoning.empty() && piece.answer.calls.empty()))
        delta["content"] = piece.answer.words;
    if (!piece.reasoning.empty()) // (under both names, as vLLM sends it: clients read one or the other)
        for (const char *key : {"reasoning_content", "reasoning"}) delta[key] = piece.reasoning;
    if (!piece.answer.calls.empty()) delta["tool_calls"] = call_deltas(piece.answer, id_prefix);
    return delta;
}

ChatAnswerStream::ChatAnswerStream(const ApiRequest &r) {
    if (r.reasoning) reasoning_.emplace(*r.reasoning, r.starts_in_reasoning);
    if (r.tools.active()) tools_.emplace(r.tools);
}

ChatPiece ChatAnswerStream::read(ReasoningPiece p, bool end) {
    ChatPiece out;
    out.reasoning = std::move(p.reasoning);
    if (!tools_) {
        out.answer.words = std::move(p.content);
        return out;
    }
    out.answer = tools_->feed(p.content);
    if (end) { // the words and calls the tools' reader held, after those this last piece gave
        AnswerPiece last = tools_->finish();
        out.answer.words += last.words;
        append_calls(out.answer.calls, std::move(last.calls));
    }
    return out;
}

ChatPiece ChatAnswerStream::feed(std::string_view text) {
    return read(reasoning_ ? reasoning_->feed(text) : ReasoningPiece{"", std::string(text)}, false);
}

ChatPiece ChatAnswerStream::finish() { return read(reasoning_ ? reasoning_->finish() : ReasoningPiece{}, true); }

std::string ChatAnswerStream::finish_reason(const std::string &engine_reason) const {
    return tools_ ? tools_->finish_reason(engine_reason) : engine_reason;
}

} // namespace zaya
