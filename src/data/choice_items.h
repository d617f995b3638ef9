// Multiple-choice benchmark items (HellaSwag, ARC, PIQA, MMLU, … as lm-evaluation-harness scores them): a
// context, candidate continuations, and the index of the right one. JSONL, one item per line:
//   {"context": "The capital of France is", "choices": [" Paris", " Rome", " Lima"], "answer": 0}
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

// Every item of the file; errors name the file, the line and the field. Blank lines are skipped.
std::vector<ChoiceItem> load_choice_items(const std::string &path);

} // namespace zaya
