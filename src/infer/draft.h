// Prompt lookup, the draft of speculative decoding without a draft model (vLLM's "ngram" method, llama.cpp's
// lookup decoding): text that repeats itself — code being edited, a document quoted or summarised, a list's
// pattern — goes on as it did the last time its latest tokens were written. The engine (infer/engine.h) feeds the
// draft with the sequence's last token in one forward and keeps the tokens drawn from each row while they match
// it: each token is drawn from the model's distribution as decoding token by token draws it, in fewer steps (bit
// for bit where the step's rows take the few-row paths: docs/inference.md).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace zaya {

struct LookupOptions {
    int64_t tokens = 0;    // the most tokens a draft proposes; 0: no speculation
    int64_t min_ngram = 2; // the fewest last tokens that must have occurred before
    int64_t max_ngram = 4; // the most tried (longest first)
    // Finished requests (prompt and answer) a draft may also copy, the latest first, where the context's own text
    // has no occurrence: an agent's calls and a client's structured answers repeat across requests (vLLM's suffix
    // decoding reads past requests alike). 0: the request's own text only.
    int64_t history = 0;
    void validate() const; // throws zaya::Error naming the value out of range
};

// The tokens that followed the latest earlier occurrence of the context's last n tokens, for n from max_ngram down
// to min_ngram (the first n that occurs), at most min(limit, o.tokens) of them (past the context's end the copy
// reads itself, as a repeating pattern goes on); empty when none occurs. The context is `first` then `second` (a
// prompt and the tokens generated after it), read in place. For each n, where the context has no earlier occurrence,
// the latest occurrence in `history`'s texts (the last text first) that a token follows, and what follows it there.
std::vector<int32_t> lookup_draft(std::span<const int32_t> first, std::span<const int32_t> second,
                                  const LookupOptions &o, int64_t limit,
                                  std::span<const std::vector<int32_t>> history = {});

} // namespace zaya
