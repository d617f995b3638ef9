#include "infer/evaluate_generation.h"

#include "core/error.h"
#include "infer/answer_formats.h"

#include <cmath>
#include <optional>

namespace zaya {

namespace {

std::string trimmed(const std::string &s) {
    const size_t a = s.find_first_not_of(" \t\r\n"), b = s.find_last_not_of(" \t\r\n");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

} // namespace

std::string extract_answer(const std::string &completion, const std::regex *re) {
    if (!re) return trimmed(completion);
    std::string found;
    for (auto it = std::sregex_iterator(completion.begin(), completion.end(), *re); it != std::sregex_iterator(); ++it)
        found = (*it).size() > 1 ? (*it)[1].str() : (*it)[0].str();
    return trimmed(found);
}

GenerationEvalResult evaluate_generation(Engine &engine, const std::vector<GenerationItem> &items,
                                         const GenerationEvalOptions &o, Communicator &comm,
                                         const std::function<void(int64_t, int64_t)> &progress) {
    const Tokenizer *tok = engine.tokenizer();
    if (!tok)
        fail("generation eval needs the model's tokenizer (tokenizer.model or tokenizer.json next to it, or "
             "--tokenizer)");
    std::optional<std::regex> re;
    if (!o.answer_regex.empty()) {
        try {
            re.emplace(o.answer_regex, std::regex::ECMAScript);
        } catch (const std::regex_error &e) {
            fail("--answer-regex '{}' is not a valid regular expression: {}", o.answer_regex, e.what());
        }
    }
    SampleOptions so = o.sample;
    if (so.stop_tokens.empty()) so.stop_tokens = engine.default_stop_tokens();
    if (o.chat)
        for (std::string &stop : chat_stop_strings(*tok)) so.stop_strings.push_back(std::move(stop));
    const int32_t bos = int32_t(engine.model().config.bos_token_id);
    GenerationEvalResult r;
    for (size_t i = size_t(comm.rank()); i < items.size(); i += size_t(comm.size())) r.item.push_back(i);
    r.completions.resize(r.item.size());
    std::vector<int64_t> generated(r.item.size(), 0);
    int64_t done = 0;
    std::vector<uint8_t> opens(r.item.size(), 0); // with reasoning: the prompt opened the model's reasoning
    for (size_t k = 0; k < r.item.size(); ++k) {
        std::vector<int32_t> prompt = text_prompt(*tok, items[r.item[k]].prompt, o.chat, o.system, bos);
        if (o.chat && o.reasoning) opens[k] = prompt_ids_open_reasoning(*tok, prompt, *o.reasoning);
        engine.submit(std::move(prompt), so, {}, [&, k](const Completion &c) {
            if (c.finish_reason == "error") fail("item {}: generation failed: {}", r.item[k], c.error);
            r.completions[k] = c.text;
            generated[k] = int64_t(c.tokens.size());
            if (progress) progress(++done, int64_t(r.item.size()));
        });
    }
    engine.run_until_idle();
    double counts[3] = {double(r.item.size()), 0, 0}; // items, right, tokens
    for (size_t k = 0; k < r.item.size(); ++k) {
        const std::string answer = o.chat && o.reasoning
                                       ? split_reasoning(r.completions[k], *o.reasoning, opens[k] != 0).content
                                       : r.completions[k];
        r.extracted.push_back(extract_answer(answer, re ? &*re : nullptr));
        r.correct.push_back(r.extracted.back() == trimmed(items[r.item[k]].answer));
        counts[1] += double(r.correct.back());
        counts[2] += double(generated[k]);
    }
    comm.allreduce_sum(counts, 3);
    r.items = int64_t(counts[0]);
    r.right = int64_t(counts[1]);
    r.tokens = int64_t(counts[2]);
    const double n = counts[0];
    r.exact_match = counts[1] / n;
    r.exact_match_stderr = n > 1 ? std::sqrt(r.exact_match * (1 - r.exact_match) / (n - 1)) : 0.0;
    return r;
}

} // namespace zaya
