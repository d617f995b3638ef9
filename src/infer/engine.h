// The generation engine: many requests, one model, one decoder. Each step feeds every active sequence at once —
// one token for each decoding sequence plus chunks of the prompts still in prefill, up to a budget of prompt tokens
// per step (EngineOptions::prefill_chunk) — so concurrent requests share every weight read instead of queueing
// behind each other (continuous batching).
//
// submit() and cancel() may be called from any thread; step() / run_until_idle() / serve_forever() run the model
// on the calling thread, which is also where the callbacks run.
#pragma once
#include "data/tokenizer.h"
#include "infer/draft.h"
#include "infer/engine_decoder.h"
#include "infer/json_constraint.h"
#include "infer/logprobs.h"
#include "infer/prefix_cache.h"
#include "infer/sample.h"
#include "infer/text_stream.h"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

struct EngineOptions {
    int64_t max_batch = 16;      // sequences decoded together (at most 8 on the GPU: its decoder's slots)
    // Prompt tokens fed per step; 0: the device's — default_prefill_chunk(device) while other sequences decode,
    // and when the step feeds no other sequence, on the CPU kCpuSolePrefillChunk (engine_decoder.h; nothing waits on
    // the larger piece), on the GPU the same. A value set here is used for both.
    int64_t prefill_chunk = 0;
    std::string device = "cpu";  // cpu | cuda
    int64_t max_context = 0;     // tokens per sequence (prompt + generated); 0: EngineDecoderOptions' default
    std::optional<DType> kv_dtype{}; // the KV cache's element; unset: the device's default (EngineDecoderOptions)
    std::optional<cpu::MatmulPrecision> precision{}; // cpu: the linears' inputs; unset: EngineDecoderOptions' default
    // Bytes of finished sequences kept for later prompts that begin with the same tokens (infer/prefix_cache.h);
    // 0: none. On the GPU finished sequences stay in their device slots until a request needs the slot (this
    // bounds only their host bookkeeping), and a prompt resumes one only where it continues all of it.
    size_t prefix_cache_bytes = 0;
    int64_t prefix_cache_stride = 64; // the state is kept every this many tokens: where a shared prefix can resume
    // Speculative decoding by prompt lookup (infer/draft.h; lookup.tokens 0: off): a decoding sequence whose last
    // tokens occurred before feeds the tokens that followed them with its last one, and keeps those its rows draw
    // alike — decoding's tokens (bit for bit on the few-row paths: docs/inference.md), in fewer steps where the text
    // repeats itself (or, with lookup.history, repeats a recent request's). A request's drafts are as long as its
    // last one earned (taken whole: 2 more, up to lookup.tokens; else what it took plus one). CPU only (the draft is
    // cut back where it differs; the GPU decoder's sequences cannot be).
    LookupOptions lookup{};
    // cpu: batch-invariant decoding (Decoder's batch_invariant): a request's tokens and log-probabilities are the
    // same bits alone or beside others, whatever its prompt's chunks and drafts; prompts read slower
    // (docs/inference.md).
    bool batch_invariant = false;
};

struct Completion {
    std::vector<int32_t> tokens; // generated ids (stop token excluded)
    std::string text;            // their text (before any stop string), empty without a tokenizer
    std::string finish_reason;   // "stop" (stop token or string), "length" (max tokens or context), "cancelled",
                                 // "error" (then `error` says what failed)
    std::string error;
    int64_t prompt_tokens = 0;
    int64_t cached_tokens = 0; // of them, resumed from the prefix cache rather than computed
    std::vector<TokenLogprobs> logprobs;        // one per generated token (SampleOptions::logprobs ≥ 0)
    std::vector<TokenLogprobs> prompt_logprobs; // one per prompt token after the first (SampleOptions::prompt_logprobs)
    int64_t draft_tokens = 0, accepted_tokens = 0; // speculative decoding: tokens drafted, and those drawn alike
    int64_t draft_steps = 0;                        // ... and the steps that fed a draft
    double prefill_seconds = 0, decode_seconds = 0; // wall time from submit to first token, then to the end
};

class Engine {
  public:
    // Called for each new token with the text it releases (may be empty while text is held back) and the completion
    // so far (its tokens and log-probabilities up to this one); at the end, with token −1, for text held back.
    using OnToken = std::function<void(int32_t token, const std::string &text, const Completion &so_far)>;
    using OnDone = std::function<void(const Completion &)>;
    // Called after each step that fed part of the prompt, with the prompt tokens computed so far of those to compute
    // (the prompt's, less any resumed from the prefix cache; the last call has fed == total, just before the first
    // token): progress through a long prompt.
    using OnPrompt = std::function<void(int64_t fed, int64_t total)>;

    Engine(std::unique_ptr<InferModel> model, std::optional<Tokenizer> tokenizer, EngineOptions opts = {});
    ~Engine();

    const InferModel &model() const { return *model_; }
    const Tokenizer *tokenizer() const { return tok_ ? &*tok_ : nullptr; }
    int64_t max_batch() const { return opts_.max_batch; }     // as run: capped by what the decoder holds
    int64_t max_context() const { return max_context_; }      // tokens per sequence
    int64_t prefill_chunk() const { return opts_.prefill_chunk; } // prompt tokens per step, as run
    int64_t sole_prefill_chunk() const { return sole_prefill_chunk_; } // ... when the step feeds nothing else
    std::string device() const { return decoder_->device(); } // "cpu" or the GPU's description
    DType kv_dtype() const { return decoder_->kv_dtype(); }     // the KV cache's element
    std::string matmul_inputs() const { return decoder_->matmul_inputs(); } // fp32|bf16|int8 (cuda: fp32|bf16)
    const LookupOptions &lookup() const { return opts_.lookup; }              // speculative decoding's drafts
    bool batch_invariant() const { return decoder_->batch_invariant(); }
    // The prefix cache's figures as of the last request that finished (any thread); nothing when it is off
    // (EngineOptions::prefix_cache_bytes 0).
    struct PrefixCacheStats {
        int64_t entries = 0, bytes = 0, max_bytes = 0;
        int64_t hits = 0, tokens_reused = 0; // prompts that resumed from it, and the tokens they did not compute
    };
    std::optional<PrefixCacheStats> prefix_cache_stats() const;

    // Totals over the requests finished so far (any thread): what a server's /metrics reports.
    struct Totals {
        int64_t stop = 0, length = 0, cancelled = 0, error = 0;          // requests by finish reason
        int64_t prompt_tokens = 0, cached_tokens = 0, generated_tokens = 0; // cached: resumed, not computed
        double prefill_seconds = 0, decode_seconds = 0;                   // Completion's, summed
        int64_t draft_tokens = 0, accepted_tokens = 0;                    // speculative decoding's
    };
    Totals totals() const;
    // Stop ids used when a request gives none: the config's EOS, every EOS the model directory's config.json and
    // generation_config.json list, the tokenizer's EOS and <end_of_turn>.
    std::vector<int32_t> default_stop_tokens() const;

    // Queues a request; validates the options and the prompt (non-empty, ids in the vocabulary, shorter than the
    // context) and throws zaya::Error before queueing anything. Returns the request id. max_new_tokens 0 ends
    // after the prompt (scoring it).
    uint64_t submit(std::vector<int32_t> prompt, const SampleOptions &opts, OnToken on_token, OnDone on_done,
                    OnPrompt on_prompt = {});
    void cancel(uint64_t id); // finishes it with reason "cancelled" at the next step

    bool step();            // one batched forward; false if there was nothing to do
    void run_until_idle();  // steps until no request is left
    void serve_forever();   // steps, sleeping while idle, until shutdown()
    void shutdown();

    int64_t active() const; // requests queued or running
    // The most sequences one forward has fed so far (shows concurrent requests really were batched).
    int64_t max_batch_seen() const { return max_batch_seen_.load(); }

  private:
    struct Request;
    void admit();
    int64_t scored_chunk() const { return opts_.prefill_chunk < 512 ? opts_.prefill_chunk : 512; }
    void finish(Request &r, const std::string &reason);
    // Draws r's next token from a row of logits (greedy: the decoder's argmax, or −1), hands it on, and returns the
    // reason r finishes with, if it does; `length`: the tokens in r's cache before the token drawn is fed.
    std::optional<std::string> take_token(Request &r, const float *logits, int32_t greedy, int64_t length);
    void start_sequence(Request &r);
    void keep_prefix(Request &r, const std::string &reason);

    std::unique_ptr<InferModel> model_;
    std::optional<Tokenizer> tok_;
    EngineOptions opts_;
    std::unique_ptr<EngineDecoder> decoder_;
    std::unique_ptr<PrefixCache> prefix_;
    PrefixCacheStats prefix_stats_; // under mu_
    Totals totals_;                  // under mu_
    int64_t max_context_ = 0;
    int64_t sole_prefill_chunk_ = 0; // prompt tokens fed by a step that feeds no other sequence
    std::vector<float> logits_;
    std::vector<float> masked_; // [V] a JSON-mode request's logits with the tokens it cannot take at −∞
    std::shared_ptr<const TokenTable> json_tokens_; // built for the first JSON-mode request
    std::vector<float> scored_rows_; // [scored_chunk(), V]: a prompt chunk's logits (its log-probabilities asked)
    std::vector<float> draft_rows_;  // a speculative step's logits, [Σ rows, V]
    std::vector<std::vector<int32_t>> lookup_history_; // the last lookup.history finished requests' tokens (oldest
                                                       // first): what drafts may copy
    std::vector<int32_t> greedy_, top_idx_;
    std::vector<std::unique_ptr<Request>> running_;
    std::deque<std::unique_ptr<Request>> queued_;
    std::vector<uint64_t> cancelled_;
    mutable std::mutex mu_;
    std::condition_variable wake_;
    std::atomic<bool> shutdown_{false};
    std::atomic<int64_t> max_batch_seen_{0};
    std::atomic<int64_t> running_count_{0}; // running_.size() for other threads (active())
    uint64_t next_id_ = 1;
};

// Generates for one prompt on a private engine loop (the CLI's path): blocks until done.
Completion generate_one(Engine &engine, std::vector<int32_t> prompt, const SampleOptions &opts,
                        const Engine::OnToken &on_token = {}, const Engine::OnPrompt &on_prompt = {});

} // namespace zaya
