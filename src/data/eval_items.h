// Benchmark items, JSONL, one item per line (`zaya eval --choices` and `--generate`):
// - multiple choice (HellaSwag, ARC, PIQA, MMLU, … as lm-evaluation-harness scores them): a context, candidate
//   continuations, and the index of the right one:
//   {"context": "The capital of France is", "choices": [" Paris", " Rome", " Lima"], "answer": 0}
// - generation (GSM8K, … scored by exact match): a prompt and the answer a greedy completion should give:
//   {"prompt": "Question: What is 2 + 3?\nAnswer:", "answer": "5"}
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

struct ChoiceItem {
    std::string context;
    std::vector<std::string> choices; // at least 2, none empty
    int64_t answer = 0;               // index into choices
};

struct GenerationItem {
    std::string prompt, answer;
};

// Every item of the file; errors name the file, the line and the field. Blank lines are skipped.
std::vector<ChoiceItem> load_choice_items(const std::string &path);
std::vector<GenerationItem> load_generation_items(const std::string &path);

} // namespace zaya
