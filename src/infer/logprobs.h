// Log-probabilities of tokens under the model (the OpenAI API's `logprobs`): the log-softmax of the raw logits —
// before the repetition penalty, temperature and cuts that sampling applies, as vLLM reports them by default.
#pragma once
#include <cstdint>
#include <vector>

namespace zaya {

struct TokenLogprob {
    int32_t token = -1;
    float logprob = 0;
};

// One position: the token there, its log-probability, and the most likely tokens (most likely first; ties: lower
// id first).
struct TokenLogprobs {
    int32_t token = -1;
    float logprob = 0;
    std::vector<TokenLogprob> top;
};

// Most alternatives a request may ask for (OpenAI's chat API allows 20).
inline constexpr int64_t kMaxTopLogprobs = 20;

// log softmax(logits[V])[token] and the `top` most likely tokens. `idx` is scratch (resized to V when top > 0).
TokenLogprobs token_logprobs(const float *logits, int64_t V, int32_t token, int64_t top, std::vector<int32_t> &idx);

} // namespace zaya
