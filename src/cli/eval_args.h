// zaya eval's options (cmd_eval.cpp), shared with its multiple-choice and generation modes (eval_choices.cpp,
// eval_generate.cpp).
#pragma once
#include "data/tokenizer.h"
#include "dist/comm.h"

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace zaya::cli {

struct EvalArgs {
    std::string model, data, device = "cpu", precision = "fp32", packing = "chunks";
    int64_t seq = 256, batch = 8, batches = 0, by_position = 0, context_parallel = 1;
    double rope_theta = 0;
    bool json = false, doc_mask = false;
    // --choices: multiple-choice items scored instead of the validation loss; --generate: items completed and
    // scored by exact match.
    std::string choices, generate, tokenizer;
    int64_t batch_tokens = 4096, limit = 0;
    int64_t max_tokens = 256;
    size_t prefix_cache_bytes = 0; // --generate: the engine's (EngineOptions::prefix_cache_bytes)
    std::string quantize = "none";  // --generate: none | int8 (InferModel::quantize_i8)
    std::vector<std::string> stops;
    std::string answer_regex, system, out;
    std::string chat_template; // --generate --chat: a Jinja file or "builtin" (InferModelArgs::chat_template)
    std::string reasoning_parser = "auto"; // --generate --chat: a thinking model's markers (resolve_reasoning)
    bool chat = false;
    bool batch_invariant = false; // --generate: EngineOptions::batch_invariant
};

// Progress on stderr ("\reval: batch 3/40") when `on` (a terminal, no --json): the evaluations' callback.
inline std::function<void(int64_t, int64_t)> eval_progress(bool on, const char *unit) {
    if (!on) return {};
    return [unit](int64_t done, int64_t total) {
        std::fprintf(stderr, "\reval: %s %lld/%lld", unit, (long long)done, (long long)total);
    };
}

// The benchmarks' tokenizer: --tokenizer, else the model directory's tokenizer.model or .json, or a checkpoint's
// run's data's (as zaya generate finds it); fails saying to give --tokenizer when there is none.
Tokenizer eval_tokenizer(const EvalArgs &a);

// zaya eval MODEL --choices FILE: accuracy on multiple-choice items (train/evaluate_choices.h).
void run_eval_choices(const EvalArgs &a, Communicator &comm);
// zaya eval MODEL --generate FILE: exact match of completions (infer/evaluate_generation.h).
void run_eval_generate(const EvalArgs &a, Communicator &comm);

} // namespace zaya::cli
