// Generative benchmarks scored by exact match (GSM8K, … as lm-evaluation-harness scores them): each prompt completed
// by the Engine (the items run as concurrent requests, batched), the answer taken from the completion (a thinking
// model's: from what follows its reasoning) by a regular expression — its last match, the first group if it has
// one — or, without one, the whole completion, and compared with the item's answer, both trimmed of surrounding
// whitespace.
#pragma once
#include "data/eval_items.h"
#include "dist/comm.h"
#include "infer/engine.h"
#include "infer/reasoning.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace zaya {

struct GenerationEvalOptions {
    SampleOptions sample;     // max_new_tokens, stop strings and tokens, temperature (greedy: 0)
    bool chat = false;        // each prompt as a user's turn in ZAYA1's chat format (its stop strings added)
    std::string system;       // with chat: a system message first
    std::string answer_regex; // ECMAScript; empty: the whole completion is the answer
    // With chat, a thinking model's reasoning markers (infer/reasoning.h): the answer is taken from what follows its
    // reasoning (none: from the whole completion).
    std::optional<ReasoningTags> reasoning;
};

struct GenerationEvalResult {
    int64_t items = 0, right = 0, tokens = 0; // over all ranks; tokens: generated
    double exact_match = 0, exact_match_stderr = 0; // stderr √(p(1−p)/(n−1)), as the harness
    // This rank's items (item i on rank i mod ranks), in order: their indices, completions and extracted answers.
    std::vector<size_t> item;
    std::vector<std::string> completions, extracted; // (the answer extracted from the completion after reasoning)
    std::vector<bool> correct;
};

// The answer in a completion: the last match of `re` (its first group when it has groups), "" when none matches;
// with no regex (null) the completion itself. Trimmed of surrounding whitespace.
std::string extract_answer(const std::string &completion, const std::regex *re);

// Needs the engine's tokenizer. Fails naming the pattern if answer_regex is not a valid ECMAScript regex. A
// collective over comm's ranks; `progress` hears (items done on this rank, its items).
GenerationEvalResult evaluate_generation(Engine &engine, const std::vector<GenerationItem> &items,
                                         const GenerationEvalOptions &o, Communicator &comm,
                                         const std::function<void(int64_t, int64_t)> &progress = {});

} // namespace zaya
