// Multiple-choice scoring as lm-evaluation-harness does it: each choice's log-likelihood as a continuation of the
// item's context (the sum of its tokens' log-probabilities, from the training forward pass), the item counted right
// when the right choice's is the highest (acc) and when it is the highest per character of the choice (acc_norm).
#pragma once
#include "data/eval_items.h"
#include "data/tokenizer.h"
#include "dist/comm.h"
#include "model/activations.h"
#include "model/params.h"

#include <cstdint>
#include <functional>
#include <vector>

namespace zaya {

struct ChoiceEvalResult {
    int64_t items = 0, choices = 0; // scored, over all ranks
    int64_t tokens = 0;             // forward-pass tokens, over all ranks
    int64_t truncated = 0;          // choices whose context was cut from the left to fit max_len
    double acc = 0, acc_norm = 0, acc_stderr = 0, acc_norm_stderr = 0; // stderr: √(p(1−p)/(n−1)), as the harness
    std::vector<std::vector<double>> loglik; // [item][choice] of this rank's items (item i on rank i mod ranks)
    std::vector<int64_t> pred, pred_norm;    // the choice each of them picks: by log-likelihood, and per character
};

// A choice as one sequence: [BOS] context continuation, and how many of its last tokens are the continuation's.
// The context and continuation are encoded together and split where the context's own encoding ends; a context's
// trailing spaces move to the continuation (both as the harness does).
struct ChoiceSequence {
    std::vector<int32_t> tokens;
    int64_t continuation = 0;
};
ChoiceSequence choice_sequence(const Tokenizer &tok, int32_t bos, const std::string &context,
                               const std::string &continuation);

// Each forward pass packs choices up to `max_tokens` input tokens and `max_seqs` sequences (what acts was planned
// for); a choice longer than `max_len` input tokens loses its context's first tokens. Item i is scored by rank
// i mod comm.size(); the counts are summed over the ranks (a collective). `progress` hears (items done on this
// rank, its items).
ChoiceEvalResult evaluate_choices(const Model &m, const Tokenizer &tok, const std::vector<ChoiceItem> &items,
                                  Activations &acts, int64_t max_tokens, int64_t max_seqs, int64_t max_len,
                                  Communicator &comm, const std::function<void(int64_t, int64_t)> &progress = {});

} // namespace zaya
