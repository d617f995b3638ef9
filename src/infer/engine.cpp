#include "infer/engine.h"

#include "core/clock.h"
#include "core/error.h"
#include "core/profile.h"

#include <algorithm>
#include <chrono>

namespace zaya {

struct Engine::Request {
    uint64_t id = 0;
    std::vector<int32_t> prompt;
    SampleOptions opts;
    OnToken on_token;
    OnDone on_done;
    OnPrompt on_prompt;
    SequenceCache cache;
    std::optional<Sampler> sampler;
    std::optional<TextStream> text;
    std::optional<JsonConstraint> json; // JSON mode
    int64_t fed = 0;  // prompt tokens in the cache
    int32_t next = -1; // the sampled token to feed next (decoding)
    std::vector<int32_t> feed; // a speculative step's chunk: next, then the draft
    int64_t drafted = 0;       // the draft's tokens in this step's chunk
    int64_t draft_limit = 0;   // the next draft's most tokens (adapted: see step()); 0 until the first
    Completion out;
    double t_submit = 0, t_first = 0;
    bool done = false;
};

Engine::Engine(std::unique_ptr<InferModel> model, std::optional<Tokenizer> tokenizer, EngineOptions opts)
    : model_(std::move(model)), tok_(std::move(tokenizer)), opts_(opts) {
    if (opts_.max_batch < 1) fail("max batch must be ≥ 1, got {}", opts_.max_batch);
    opts_.lookup.validate();
    if (opts_.prefill_chunk < 0)
        fail("prefill chunk must be ≥ 1 (0: the device's default), got {}", opts_.prefill_chunk);
    const bool chosen = opts_.prefill_chunk > 0;
    if (!chosen) opts_.prefill_chunk = default_prefill_chunk(opts_.device);
    sole_prefill_chunk_ = chosen || opts_.device != "cpu" ? opts_.prefill_chunk
                                                          : std::max(opts_.prefill_chunk, kCpuSolePrefillChunk);
    if (tok_ && tok_->vocab_size() > model_->config.vocab_size)
        fail("tokenizer '{}' has {} tokens but the model's vocabulary is {}", tok_->path(), tok_->vocab_size(),
             model_->config.vocab_size);
    decoder_ = make_engine_decoder(*model_,
                                   EngineDecoderOptions{opts_.device,
                                                        std::max(opts_.prefill_chunk +
                                                                     opts_.max_batch * (1 + opts_.lookup.tokens),
                                                                 sole_prefill_chunk_),
                                                        opts_.max_batch, opts_.max_context, opts_.kv_dtype,
                                                        opts_.precision, opts_.batch_invariant});
    opts_.max_batch = std::min(opts_.max_batch, decoder_->max_seqs());
    max_context_ = decoder_->max_length();
    if (opts_.lookup.tokens > 0 && !decoder_->host_cache())
        fail("speculative decoding runs on the CPU: the GPU decoder's sequences live in device slots, which are not "
             "cut back where a draft differs");
    if (opts_.prefix_cache_stride < 1) fail("prefix cache stride must be ≥ 1, got {}", opts_.prefix_cache_stride);
    if (opts_.prefix_cache_bytes > 0) prefix_ = std::make_unique<PrefixCache>(opts_.prefix_cache_bytes);
    prefix_stats_.max_bytes = int64_t(opts_.prefix_cache_bytes);
    logits_.resize(size_t(opts_.max_batch * model_->config.vocab_size));
    greedy_.resize(size_t(opts_.max_batch));
}

Engine::~Engine() = default;

std::vector<int32_t> Engine::default_stop_tokens() const {
    std::vector<int32_t> ids;
    auto add = [&](int64_t id) {
        if (id >= 0 && id < model_->config.vocab_size && std::find(ids.begin(), ids.end(), id) == ids.end())
            ids.push_back(int32_t(id));
    };
    add(model_->config.eos_token_id);
    for (const int64_t id : model_->eos_token_ids) add(id);
    if (tok_) {
        add(tok_->eos_id());
        for (const int32_t id : chat_end_ids(*tok_)) add(id);
    }
    return ids;
}

uint64_t Engine::submit(std::vector<int32_t> prompt, const SampleOptions &opts, OnToken on_token, OnDone on_done,
                        OnPrompt on_prompt) {
    const ZayaConfig &c = model_->config;
    opts.validate(c.vocab_size);
    if (prompt.empty()) fail("the prompt is empty");
    if (opts.json_mode() && !tok_)
        fail("JSON mode needs the model's tokenizer (the bytes of its tokens)");
    for (size_t i = 0; i < prompt.size(); ++i)
        if (prompt[i] < 0 || prompt[i] >= c.vocab_size)
            fail("prompt token {} at position {} is outside the vocabulary [0, {})", prompt[i], i, c.vocab_size);
    if (int64_t(prompt.size()) >= max_context_)
        fail("the prompt has {} tokens; the context length is {}", prompt.size(), max_context_);
    auto r = std::make_unique<Request>();
    r->prompt = std::move(prompt);
    r->opts = opts;
    r->on_token = std::move(on_token);
    r->on_done = std::move(on_done);
    r->on_prompt = std::move(on_prompt);
    r->out.prompt_tokens = int64_t(r->prompt.size());
    r->t_submit = monotonic_seconds();
    std::lock_guard lock(mu_);
    r->id = next_id_++;
    const uint64_t id = r->id;
    queued_.push_back(std::move(r));
    wake_.notify_all();
    return id;
}

void Engine::cancel(uint64_t id) {
    std::lock_guard lock(mu_);
    cancelled_.push_back(id);
    wake_.notify_all();
}

int64_t Engine::active() const {
    std::lock_guard lock(mu_);
    return int64_t(queued_.size()) + running_count_.load(); // running_ itself belongs to the engine thread
}

void Engine::admit() {
    // Under the lock only the hand-over; callbacks run after it, so one may call back into the engine.
    std::vector<uint64_t> cancelled;
    std::vector<std::unique_ptr<Request>> dropped, admitted;
    {
        std::lock_guard lock(mu_);
        cancelled.swap(cancelled_);
        for (uint64_t id : cancelled)
            for (auto it = queued_.begin(); it != queued_.end(); ++it)
                if ((*it)->id == id) {
                    dropped.push_back(std::move(*it));
                    queued_.erase(it);
                    break;
                }
        while (!queued_.empty() && int64_t(running_.size() + admitted.size()) < opts_.max_batch) {
            admitted.push_back(std::move(queued_.front()));
            queued_.pop_front();
        }
    }
    for (auto &r : dropped) finish(*r, "cancelled");
    for (uint64_t id : cancelled)
        for (auto &r : running_)
            if (r->id == id && !r->done) finish(*r, "cancelled");
    for (auto &r : admitted) {
        start_sequence(*r);
        r->sampler.emplace(r->opts, model_->config.vocab_size);
        for (int32_t t : r->prompt) r->sampler->observe(t, /*generated=*/false);
        if (tok_) r->text.emplace(*tok_, r->opts.stop_strings);
        if (r->opts.json_mode()) {
            if (!json_tokens_) json_tokens_ = std::make_shared<const TokenTable>(*tok_, model_->config.vocab_size);
            r->json.emplace(json_tokens_, r->opts.json_schema ? r->opts.json_schema : JsonSchema::any_object(),
                            r->opts.json_trigger, /*trigger_in_text=*/true,
                            r->opts.trigger_reasoning
                                ? std::optional<ContentGate>(ContentGate(*r->opts.trigger_reasoning,
                                                                         r->opts.starts_in_reasoning))
                                : std::nullopt);
        }
        running_.push_back(std::move(r));
    }
    running_count_ = int64_t(running_.size());
}

// A prompt that begins like a kept sequence starts from its cache; at least the prompt's last token is fed, for the
// first token's logits, and a prompt whose log-probabilities are asked for is fed whole, for every token's. Else a
// fresh sequence: on the GPU, kept sequences give their slots back, least recently used first, until one is free.
void Engine::start_sequence(Request &r) {
    std::optional<SequenceCache> hit;
    if (prefix_ && !r.opts.prompt_logprobs) hit = prefix_->resume(r.prompt, int64_t(r.prompt.size()) - 1);
    if (hit) {
        r.cache = std::move(*hit);
        r.fed = r.out.cached_tokens = r.cache.length;
    } else {
        while (!decoder_->can_start_sequence() && prefix_ && prefix_->drop_lru()) {
        }
        r.cache = decoder_->new_sequence();
    }
    // The CPU decoder keeps its state every stride tokens and at the prompt's end, where a later prompt sharing less
    // than all of it can resume (a chat's next turn always shares this prompt; its re-encoded answer may differ from
    // the ids generated); the GPU's sequences are only continued whole.
    if (prefix_ && decoder_->host_cache()) {
        r.cache.snapshot_every = opts_.prefix_cache_stride;
        r.cache.snapshot_at = int64_t(r.prompt.size());
    }
}

// A finished sequence's cache goes to the prefix cache under the tokens it holds: the prompt and the generated
// tokens fed back (the last one sampled never is). Not after an error: its cache may be half-written.
void Engine::keep_prefix(Request &r, const std::string &reason) {
    if (!prefix_ || reason == "error" || r.cache.length == 0) return;
    std::vector<int32_t> tokens = r.prompt;
    tokens.insert(tokens.end(), r.out.tokens.begin(), r.out.tokens.end());
    tokens.resize(size_t(r.cache.length));
    prefix_->insert(std::move(tokens), std::move(r.cache));
    std::lock_guard lock(mu_);
    prefix_stats_ = {int64_t(prefix_->entries()), int64_t(prefix_->bytes()), int64_t(prefix_->max_bytes()),
                     prefix_->hits(), prefix_->tokens_reused()};
}

std::optional<Engine::PrefixCacheStats> Engine::prefix_cache_stats() const {
    if (!prefix_) return std::nullopt;
    std::lock_guard lock(mu_);
    return prefix_stats_;
}

void Engine::finish(Request &r, const std::string &reason) {
    r.done = true;
    if (r.text) {
        try {
            if (reason != "stop" || !r.text->stopped()) {
                std::string rest = r.text->flush();
                if (!rest.empty() && r.on_token) r.on_token(-1, rest, r.out);
            }
        } catch (const std::exception &e) {
            r.out.error = e.what();
        }
        r.out.text = r.text->released();
    }
    r.out.finish_reason = reason;
    const double t = monotonic_seconds();
    if (r.t_first > 0) {
        r.out.prefill_seconds = r.t_first - r.t_submit;
        r.out.decode_seconds = t - r.t_first;
    }
    {
        std::lock_guard lock(mu_);
        Totals &n = totals_;
        (reason == "stop" ? n.stop : reason == "length" ? n.length : reason == "cancelled" ? n.cancelled : n.error)++;
        n.prompt_tokens += r.out.prompt_tokens;
        n.cached_tokens += r.out.cached_tokens;
        n.generated_tokens += int64_t(r.out.tokens.size());
        n.prefill_seconds += r.out.prefill_seconds;
        n.decode_seconds += r.out.decode_seconds;
        n.draft_tokens += r.out.draft_tokens;
        n.accepted_tokens += r.out.accepted_tokens;
    }
    if (r.on_done) r.on_done(r.out);
    if (opts_.lookup.tokens > 0 && opts_.lookup.history > 0 && reason != "error") { // what later drafts may copy
        if (int64_t(lookup_history_.size()) == opts_.lookup.history) lookup_history_.erase(lookup_history_.begin());
        std::vector<int32_t> text = r.prompt;
        text.insert(text.end(), r.out.tokens.begin(), r.out.tokens.end());
        lookup_history_.push_back(std::move(text));
    }
    keep_prefix(r, reason);
}

Engine::Totals Engine::totals() const {
    std::lock_guard lock(mu_);
    return totals_;
}

bool Engine::step() {
    // Finished requests leave before the queue is admitted (they would hold its places: requests that all finished
    // in one step left the queue waiting and run_until_idle() returning), and those admit() cancels after it.
    const auto finished = [](const auto &r) { return r->done; };
    std::erase_if(running_, finished);
    admit();
    std::erase_if(running_, finished);
    running_count_ = int64_t(running_.size());
    if (running_.empty()) return false;
    ZAYA_PROFILE("engine_step");
    const ZayaConfig &c = model_->config;
    const int64_t V = c.vocab_size;
    // Every decoding sequence feeds its last token; the sequences still in prefill feed chunks of their prompts, in
    // the order they came, up to the step's budget of prompt tokens: prefill_chunk, or with no sequence decoding
    // (the larger piece delays no one) sole_prefill_chunk_. Several short prompts arriving together so share one
    // pass over the weights instead of taking a step each. A scored prompt (its log-probabilities asked for) is
    // at most one per step, in chunks of at most scored_chunk(): its rows of logits are kept on the host.
    std::vector<SequenceCache *> seqs;
    std::vector<std::span<const int32_t>> chunks;
    std::vector<Request *> fed;
    const bool decoding = std::any_of(running_.begin(), running_.end(), [](const auto &r) {
        return r->fed >= int64_t(r->prompt.size());
    });
    int64_t budget = decoding ? opts_.prefill_chunk : sole_prefill_chunk_;
    size_t scored = SIZE_MAX; // the scored prompt's chunk, if any
    bool drafting = false;    // a decoding sequence feeds a draft
    int64_t scored_from = 0;  // its first token's position
    for (auto &rp : running_) {
        Request &r = *rp;
        if (r.fed < int64_t(r.prompt.size())) {
            const bool scores = r.opts.prompt_logprobs;
            if (budget == 0 || (scores && scored != SIZE_MAX)) continue;
            const int64_t n = std::min({budget, scores ? scored_chunk() : budget, int64_t(r.prompt.size()) - r.fed});
            if (scores) {
                scored = chunks.size();
                scored_from = r.fed;
            }
            chunks.emplace_back(r.prompt.data() + r.fed, size_t(n));
            r.fed += n;
            budget -= n;
        } else {
            // A draft (speculative decoding), as long as the answer and the context may still take it after the
            // token this step draws for certain, and the request's drafts have earned.
            if (r.draft_limit == 0) r.draft_limit = opts_.lookup.tokens;
            const int64_t limit = std::min({r.opts.max_new_tokens - int64_t(r.out.tokens.size()) - 1,
                                            max_context_ - r.cache.length - 2, r.draft_limit});
            const std::vector<int32_t> draft =
                lookup_draft(r.prompt, r.out.tokens, opts_.lookup, limit, lookup_history_);
            r.drafted = int64_t(draft.size());
            if (r.drafted == 0) {
                chunks.emplace_back(&r.next, 1);
            } else {
                r.feed.assign(1, r.next);
                r.feed.insert(r.feed.end(), draft.begin(), draft.end());
                r.cache.draft_from = r.cache.length + 1; // the states a cut may go back to
                chunks.emplace_back(r.feed);
                drafting = true;
            }
        }
        seqs.push_back(&r.cache);
        fed.push_back(&r);
    }
    // When every sequence picks greedily and none reports log-probabilities, the decoder gives the argmax alone (on
    // the GPU: 4 bytes per sequence downloaded instead of V floats).
    const bool all_greedy =
        scored == SIZE_MAX && !drafting && std::all_of(fed.begin(), fed.end(), [](const Request *r) {
            return r->sampler->greedy() && r->opts.logprobs < 0 && (!r->json || !r->json->masks());
        });
    // Each request's row of logits (a draft's first: the rest follow it), and the scored prompt's rows.
    std::vector<size_t> first_row(fed.size());
    for (size_t i = 0; i < fed.size(); ++i) first_row[i] = i;
    const float *logits_at = logits_.data(), *scored_at = nullptr;
    try {
        if (drafting) { // the drafts' every row, the scored prompt's every row, every other chunk's last
            std::vector<int64_t> rows(fed.size());
            size_t total = 0;
            for (size_t i = 0; i < fed.size(); ++i) {
                rows[i] = i == scored || fed[i]->drafted > 0 ? int64_t(chunks[i].size()) : 1;
                first_row[i] = total;
                total += size_t(rows[i]);
            }
            draft_rows_.resize(total * size_t(V));
            decoder_->forward_rows(seqs, chunks, rows, draft_rows_.data());
            logits_at = draft_rows_.data();
            if (scored != SIZE_MAX) scored_at = logits_at + first_row[scored] * size_t(V);
            for (size_t i = 0; i < fed.size(); ++i) // a prompt chunk's row: its last
                if (fed[i]->drafted == 0) first_row[i] += size_t(rows[i]) - 1;
        } else if (scored != SIZE_MAX) {
            scored_rows_.resize(size_t(scored_chunk() * V));
            scored_at = scored_rows_.data();
            decoder_->forward_scored(seqs, chunks, logits_.data(), scored, scored_rows_.data());
        } else {
            decoder_->forward(seqs, chunks, all_greedy ? nullptr : logits_.data(), greedy_.data());
        }
    } catch (const std::exception &e) { // fail these requests, keep serving the next ones
        for (Request *r : fed) {
            r->out.error = e.what();
            finish(*r, "error");
        }
        return true;
    }
    max_batch_seen_ = std::max(max_batch_seen_.load(), int64_t(seqs.size()));
    if (scored != SIZE_MAX) { // row j of the chunk predicts the prompt's token at scored_from + j + 1
        Request &r = *fed[scored];
        const int64_t P = int64_t(r.prompt.size());
        for (int64_t p = scored_from + 1; p < std::min(r.fed + 1, P); ++p)
            r.out.prompt_logprobs.push_back(token_logprobs(scored_at + (p - scored_from - 1) * V, V,
                                                           r.prompt[size_t(p)], r.opts.logprobs, top_idx_));
    }
    for (size_t i = 0; i < fed.size(); ++i) {
        Request &r = *fed[i];
        const bool decodes = chunks[i].data() == &r.next || r.drafted > 0;
        if (r.on_prompt && !decodes) // the tokens computed, not those resumed from a cache
            r.on_prompt(r.fed - r.out.cached_tokens, int64_t(r.prompt.size()) - r.out.cached_tokens);
        if (r.fed < int64_t(r.prompt.size())) continue; // prompt not finished: no token yet
        if (r.t_first == 0) r.t_first = monotonic_seconds();
        if (r.opts.max_new_tokens == 0) { // only the prompt was asked for (its log-probabilities, say)
            finish(r, "length");
            continue;
        }
        // Row j follows the last token and the draft's first j tokens: its token is drawn while the draft matches
        // what the rows before drew, and the cache is cut back to the tokens drawn alike.
        const float *rows = logits_at + first_row[i] * size_t(V);
        const int64_t before = r.cache.length - r.drafted; // the cache's length without the draft
        std::optional<std::string> reason;
        int64_t j = 0;
        for (;; ++j) {
            reason = take_token(r, rows + j * V, all_greedy ? greedy_[i] : -1, before + j);
            if (reason || j == r.drafted || r.next != r.feed[size_t(j + 1)]) break;
        }
        if (r.drafted > 0) {
            r.out.draft_tokens += r.drafted;
            r.out.accepted_tokens += j;
            ++r.out.draft_steps;
            // Each drafted token costs its expert's weights in every layer, taken or not: a draft taken whole lets
            // the next one grow by 2 (to lookup.tokens), one cut short makes the next as long as what it earned
            // plus one (transformers' "heuristic" schedule grows alike, but shrinks by 1 only).
            r.draft_limit = j == r.drafted ? std::min(opts_.lookup.tokens, r.draft_limit + 2) : j + 1;
            r.drafted = 0;
            try {
                r.cache.cut_back(before + j);
            } catch (const std::exception &e) { // (its state not kept: a bug, but this request's, not the engine's)
                r.out.error = e.what();
                reason = "error";
            }
        }
        if (reason) finish(r, *reason);
    }
    return true;
}

std::optional<std::string> Engine::take_token(Request &r, const float *logits, int32_t greedy, int64_t length) {
    const int64_t V = model_->config.vocab_size;
    int32_t t = -1;
    if (r.json && r.json->masks()) { // drawn from the tokens that continue the JSON text; log-probabilities stay
                                     // the model's
        masked_.assign(logits, logits + V);
        if (r.json->mask(masked_.data()) == 0) {
            r.out.error = "JSON mode: no token of the vocabulary continues the JSON text";
            return "error";
        }
        t = r.sampler->sample(masked_.data());
    } else {
        t = greedy >= 0 ? greedy : r.sampler->sample(logits);
    }
    if (r.json) {
        try {
            r.json->advance(t); // (a lazy constraint reads free text too: the trigger may begin anywhere)
        } catch (const std::exception &e) { // a token at −∞ drawn: a bug, but one request's, not the engine's
            r.out.error = e.what();
            return "error";
        }
    }
    // A stop token ends the text, except in JSON mode, where only tokens that continue the JSON are drawn and the
    // text ends as its value closes: a stop id that is an ordinary piece there (a model whose eos_token_id names
    // one) is part of the JSON, not the end of an unclosed value. (A lazy constraint's text ends as any text does
    // until the schema holds it.)
    const auto &stops = r.opts.stop_tokens;
    if (!(r.json && r.json->held()) && std::find(stops.begin(), stops.end(), t) != stops.end()) return "stop";
    r.sampler->observe(t);
    r.out.tokens.push_back(t);
    if (r.opts.logprobs >= 0) r.out.logprobs.push_back(token_logprobs(logits, V, t, r.opts.logprobs, top_idx_));
    r.next = t;
    try {
        std::string text = r.text ? r.text->push(t) : std::string();
        if (r.on_token) r.on_token(t, text, r.out);
    } catch (const std::exception &e) {
        r.out.error = e.what();
        return "error";
    }
    if ((r.text && r.text->stopped()) || (r.json && r.json->complete())) return "stop";
    if (int64_t(r.out.tokens.size()) >= r.opts.max_new_tokens || length + 1 >= max_context_) return "length";
    return std::nullopt;
}

void Engine::run_until_idle() {
    while (step()) { // false once nothing is running or queued (step() admits the queue first)
    }
}

void Engine::serve_forever() {
    while (!shutdown_) {
        if (step()) continue;
        std::unique_lock lock(mu_);
        wake_.wait_for(lock, std::chrono::milliseconds(200),
                       [&] { return shutdown_ || !queued_.empty() || !cancelled_.empty(); });
    }
}

void Engine::shutdown() {
    shutdown_ = true;
    wake_.notify_all();
}

Completion generate_one(Engine &engine, std::vector<int32_t> prompt, const SampleOptions &opts,
                        const Engine::OnToken &on_token, const Engine::OnPrompt &on_prompt) {
    Completion result;
    engine.submit(std::move(prompt), opts, on_token, [&](const Completion &c) { result = c; }, on_prompt);
    engine.run_until_idle();
    return result;
}

} // namespace zaya
