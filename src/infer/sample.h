// Choosing the next token from logits (the OpenAI / transformers sampling controls), reproducible from a seed.
//
// Order: logit bias → repetition penalty (as transformers) → frequency and presence penalties (as OpenAI and vLLM)
// → temperature → top-k → top-p → min-p → draw. temperature 0 is greedy (argmax of the biased, penalised logits;
// lowest id wins ties).
#pragma once
#include "infer/reasoning.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace zaya {

class JsonSchema;

struct SampleOptions {
    int64_t max_new_tokens = 128;
    double temperature = 0.8;        // 0: greedy
    int64_t top_k = 40;              // 0: no top-k cut
    double top_p = 1.0;              // nucleus: keep the smallest set with probability ≥ top_p (1: off)
    double min_p = 0.0;              // keep tokens with probability ≥ min_p × the top probability (0: off)
    double repetition_penalty = 1.0; // > 1 discourages tokens already in the prompt or output (CTRL / transformers)
    double frequency_penalty = 0.0;  // OpenAI's: minus this × how often a token was generated so far ([-2, 2])
    double presence_penalty = 0.0;   // OpenAI's: minus this once a token was generated ([-2, 2])
    std::vector<std::pair<int32_t, float>> logit_bias; // added to those tokens' logits ([-100, 100]; -100 bans)
    uint64_t seed = 1234;
    std::vector<int32_t> stop_tokens;      // end generation, not emitted (e.g. EOS)
    std::vector<std::string> stop_strings; // end generation when the text contains one; the text stops before it
    // Reported, not used to sample (infer/logprobs.h): the model's log-probabilities.
    int64_t logprobs = -1;        // −1: none; k ≥ 0: each generated token's and the k most likely there (k ≤ 20)
    bool prompt_logprobs = false; // also each prompt token's after the first (needs logprobs ≥ 0)
    // JSON mode (infer/json_constraint.h): only tokens that continue a JSON object are drawn — one of json_schema's
    // values when it is set — and generation ends when it closes. Needs the model's tokenizer (the tokens' bytes).
    bool json_object = false;
    std::shared_ptr<const JsonSchema> json_schema; // structured outputs (infer/json_schema.h); implies json_object
    // With json_schema, lazy (infer/json_constraint.h): the text is held to the schema only if it begins with this
    // (after whitespace); otherwise it is free. Tool calls under tool_choice "auto" (infer/tool_calls.h).
    std::string json_trigger;
    // In JSON mode: the answer's reasoning (infer/chat_answer.h splits it off), and whether the answer begins
    // inside it (the prompt opened the block). With json_trigger the trigger is not watched for in it (a thinking
    // model may write anything there; the server's reader takes calls from the content after it); without, the
    // answer may open a block at its start (or is inside one), free to its close, and is held to the schema from
    // there, or from its first byte when it opens none.
    std::optional<ReasoningTags> trigger_reasoning;
    bool starts_in_reasoning = false;
    bool json_mode() const { return json_object || json_schema != nullptr; }

    // Throws zaya::Error naming the field and value out of range; with vocab_size > 0, also a logit_bias token
    // outside [0, vocab_size).
    void validate(int64_t vocab_size = 0) const;
};

class Sampler {
  public:
    Sampler(const SampleOptions &o, int64_t vocab_size);
    // Tokens the penalties apply to: the repetition penalty's are the prompt's and every generated token (generated
    // false for the prompt's); the frequency and presence penalties count generated tokens only.
    void observe(int32_t token, bool generated = true);
    // The next token for logits[V]; advances the random state (not for greedy).
    int32_t sample(const float *logits);
    // Whether sample() is the plain argmax of the logits (temperature 0, no penalty or bias).
    bool greedy() const {
        return o_.temperature <= 0 && o_.repetition_penalty == 1.0 && o_.frequency_penalty == 0 &&
               o_.presence_penalty == 0 && o_.logit_bias.empty();
    }

  private:
    SampleOptions o_;
    int64_t V_;
    uint64_t rng_;
    std::unordered_set<int32_t> seen_;
    std::unordered_map<int32_t, int64_t> generated_; // token → times generated
    std::vector<float> work_;   // [V] penalised, tempered logits
    std::vector<int32_t> idx_;  // candidate ids
};

} // namespace zaya
