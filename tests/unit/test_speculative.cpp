// Speculative decoding by prompt lookup (infer/draft.h): the draft is the tokens that followed the context's last
// n-gram the last time it occurred; the decoder gives a draft's every row and a sequence cut back after it
// continues exactly as the full forward; the engine draws with drafts exactly what it draws without.
#include "decode_helpers.h"
#include "infer/draft.h"
#include "infer/engine.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace zaya {
namespace {

using test::decode_config;
using test::perturbed_model;
using test::random_tokens;

std::vector<int32_t> draft_of(const std::vector<int32_t> &first, const std::vector<int32_t> &second,
                              LookupOptions o, int64_t limit = 100) {
    return lookup_draft(first, second, o, limit);
}

TEST(LookupDraft, FollowsTheLatestEarlierOccurrenceOfTheLongestNgram) {
    const LookupOptions o{.tokens = 3, .min_ngram = 1, .max_ngram = 3};
    // "1 2" occurs twice before the end: the latest one's continuation (9 8 7), not the first's (5 6 7).
    EXPECT_EQ(draft_of({1, 2, 5, 6, 7, 1, 2, 9, 8, 7, 3}, {4, 1, 2}, o), (std::vector<int32_t>{9, 8, 7}));
    // The longest n first: "3 1 2" occurred (after 0) though "1 2" occurred later.
    EXPECT_EQ(draft_of({0, 3, 1, 2, 4, 4, 4, 1, 2, 6, 6}, {3, 1, 2}, o), (std::vector<int32_t>{4, 4, 4}));
    // Split across the prompt and the tokens generated: read as one context.
    EXPECT_EQ(draft_of({7, 8}, {9, 1, 7, 8}, o), (std::vector<int32_t>{9, 1, 7}));
    EXPECT_EQ(draft_of({7}, {8, 9, 1, 7, 8}, o), (std::vector<int32_t>{9, 1, 7}));
    // At most o.tokens, at most the limit.
    EXPECT_EQ(draft_of({5, 1, 2, 3, 4, 5}, {}, o), (std::vector<int32_t>{1, 2, 3}));
    EXPECT_EQ(draft_of({5, 1, 2, 3, 4, 5}, {}, o, 2), (std::vector<int32_t>{1, 2}));
    EXPECT_TRUE(draft_of({5, 1, 2, 3, 4, 5}, {}, o, 0).empty());
    // Nothing occurred before, or only shorter than min_ngram.
    EXPECT_TRUE(draft_of({1, 2, 3, 4}, {5}, o).empty());
    EXPECT_TRUE(draft_of({1, 2, 3, 9, 2}, {}, LookupOptions{.tokens = 3, .min_ngram = 2, .max_ngram = 3}).empty());
    EXPECT_TRUE(draft_of({}, {1}, o).empty());
    EXPECT_TRUE(draft_of({1, 2}, {}, LookupOptions{}).empty()); // tokens 0: off
}

// A repeating pattern goes on past the context's end: a loop of p tokens drafts as many as asked, in its order.
TEST(LookupDraft, ALoopDraftsPastTheContextsEnd) {
    const LookupOptions o{.tokens = 7, .min_ngram = 2, .max_ngram = 4};
    EXPECT_EQ(draft_of({4, 4, 4}, {}, o), (std::vector<int32_t>(7, 4)));
    EXPECT_EQ(draft_of({9, 1, 2, 3, 1, 2, 3}, {1, 2}, o), (std::vector<int32_t>{3, 1, 2, 3, 1, 2, 3}));
}

// Past requests' texts: read where the context has no occurrence of an n-gram of that length, the latest text
// first, the copy ending with its text.
TEST(LookupDraft, CopiesRecentRequestsWhereTheContextHasNoMatch) {
    const LookupOptions o{.tokens = 4, .min_ngram = 1, .max_ngram = 2, .history = 2};
    const std::vector<std::vector<int32_t>> history = {{1, 2, 30, 31, 32, 33, 34}, {9, 1, 2, 40, 41}, {7, 7}};
    // "1 2" is nowhere before in the context: the latest text holding it (the second), to its end.
    EXPECT_EQ(lookup_draft(std::vector<int32_t>{5, 6}, std::vector<int32_t>{1, 2}, o, 10, history),
              (std::vector<int32_t>{40, 41}));
    // Only the first holds "2 30": its continuation, up to the draft's length.
    EXPECT_EQ(lookup_draft(std::vector<int32_t>{2}, std::vector<int32_t>{30}, o, 10, history),
              (std::vector<int32_t>{31, 32, 33, 34}));
    // The context's own occurrence first, for the same n.
    EXPECT_EQ(lookup_draft(std::vector<int32_t>{1, 2, 8, 5}, std::vector<int32_t>{1, 2}, o, 10, history),
              (std::vector<int32_t>{8, 5, 1, 2}));
    // A longer n in the history beats a shorter one in the context: "1 2" there, only "2" here.
    EXPECT_EQ(lookup_draft(std::vector<int32_t>{2, 8, 5}, std::vector<int32_t>{1, 2}, o, 10, history),
              (std::vector<int32_t>{40, 41}));
    // An occurrence that ends its text has nothing to copy.
    EXPECT_TRUE(lookup_draft(std::vector<int32_t>{3}, std::vector<int32_t>{7}, o, 10, {{{6, 7}}}).empty());
}

// lookup_draft against its definition read literally (for n from the longest: the latest earlier occurrence in the
// context, else in the history's texts, the last first), on random texts long enough for its search's blocks (64
// tokens), over small vocabularies (many occurrences, split across the prompt and the answer, across blocks) and a
// large one (few or none).
TEST(LookupDraft, EqualsTheReadingOfItsDefinition) {
    const auto reference = [](const std::vector<int32_t> &context, const LookupOptions &o, int64_t limit,
                              const std::vector<std::vector<int32_t>> &history) {
        const int64_t L = int64_t(context.size());
        limit = std::min(limit, o.tokens);
        // The latest start i with i + n < size (a token follows) whose n tokens are the context's last n; −1: none.
        const auto latest = [&](const std::vector<int32_t> &text, int64_t n) {
            for (int64_t i = int64_t(text.size()) - n - 1; i >= 0; --i)
                if (std::equal(text.begin() + i, text.begin() + i + n, context.end() - n)) return i;
            return int64_t(-1);
        };
        std::vector<int32_t> draft;
        if (limit <= 0) return draft;
        for (int64_t n = std::min(o.max_ngram, L - 1); n >= o.min_ngram; --n) {
            if (const int64_t i = latest(context, n); i >= 0) {
                for (int64_t j = i + n; int64_t(draft.size()) < limit; ++j)
                    draft.push_back(j < L ? context[size_t(j)] : draft[size_t(j - L)]);
                return draft;
            }
            for (auto text = history.rbegin(); text != history.rend(); ++text)
                if (const int64_t i = latest(*text, n); i >= 0)
                    return std::vector<int32_t>(text->begin() + i + n,
                                                text->begin() + std::min(int64_t(text->size()), i + n + limit));
        }
        return draft;
    };
    Rng rng(31, 0);
    const auto below = [&rng](int64_t n) { return int64_t(rng.next() % uint64_t(n)); };
    int drafted = 0, from_history = 0;
    for (int c = 0; c < 3000; ++c) {
        const int64_t vocab = c % 3 == 0 ? 1000 : 2 + below(5);
        const auto text = [&](int64_t n) {
            std::vector<int32_t> t(static_cast<size_t>(n));
            for (auto &v : t) v = int32_t(below(vocab));
            return t;
        };
        const std::vector<int32_t> context = text(below(300));
        const size_t split = size_t(below(int64_t(context.size()) + 1));
        const std::vector<int32_t> first(context.begin(), context.begin() + split), second(context.begin() + split,
                                                                                          context.end());
        std::vector<std::vector<int32_t>> history(size_t(below(3)));
        for (auto &h : history) h = text(below(200));
        LookupOptions o{.tokens = 1 + below(8), .min_ngram = 1 + below(3), .max_ngram = 1, .history = 2};
        o.max_ngram = o.min_ngram + below(4);
        const int64_t limit = below(10);
        const std::vector<int32_t> got = lookup_draft(first, second, o, limit, history);
        ASSERT_EQ(got, reference(context, o, limit, history))
            << "case " << c << ": context of " << context.size() << " (prompt " << split << "), n-grams "
            << o.min_ngram << ".." << o.max_ngram << ", limit " << limit << ", " << history.size() << " texts";
        drafted += !got.empty();
        from_history += !got.empty() && reference(context, o, limit, {}) != got;
    }
    EXPECT_GT(drafted, 1000); // (the cases draft, and some from the history)
    EXPECT_GT(from_history, 20);
}

TEST(LookupDraft, RefusesNgramsOutOfRange) {
    EXPECT_NE(test::error_of([] { LookupOptions{.tokens = -1}.validate(); }).find("-1"), std::string::npos);
    EXPECT_NE(test::error_of([] { LookupOptions{.tokens = 2, .min_ngram = 0}.validate(); }).find("shortest"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { LookupOptions{.tokens = 2, .min_ngram = 3, .max_ngram = 2}.validate(); })
                  .find("longest n-gram (2)"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { LookupOptions{.tokens = 2, .history = -3}.validate(); }).find("history"),
              std::string::npos);
}

// Two sequences fed together, each a chunk of several tokens with logits asked for its last few rows: the rows are
// those of the full forward; asking for more rows than the chunk has is refused.
TEST(Decoder, LogitsOfEachChunksLastRows) {
    const Model m = perturbed_model(decode_config(), 21);
    const int64_t V = m.config.vocab_size;
    auto im = InferModel::from_model(perturbed_model(decode_config(), 21), DType::F32);
    Decoder dec(*im, 16, 2);
    const std::vector<std::vector<int32_t>> tokens = {random_tokens(9, V, 1), random_tokens(6, V, 2)};
    SequenceCache seqs[2] = {dec.new_sequence(), dec.new_sequence()};
    SequenceCache *ptrs[2] = {&seqs[0], &seqs[1]};
    std::vector<std::span<const int32_t>> chunks = {tokens[0], tokens[1]};
    const int64_t rows[2] = {3, 6};
    std::vector<float> logits(9 * size_t(V));
    dec.forward(ptrs, chunks, logits.data(), rows);
    const std::vector<float> ref0 = test::full_logits(m, tokens[0]), ref1 = test::full_logits(m, tokens[1]);
    for (int64_t r = 0; r < 9; ++r) {
        const float *want = r < 3 ? ref0.data() + (6 + r) * V : ref1.data() + (r - 3) * V;
        for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(logits[size_t(r * V + v)], want[v], 1e-4) << "row " << r;
    }
    SequenceCache fresh = dec.new_sequence();
    SequenceCache *one[1] = {&fresh};
    const int64_t too_many[1] = {3};
    std::span<const int32_t> two(tokens[0].data(), 2);
    EXPECT_NE(test::error_of([&] {
                  dec.forward(one, std::span<const std::span<const int32_t>>(&two, 1), logits.data(), too_many);
              }).find("logits of 3 of its 2 tokens"),
              std::string::npos);
}

// A speculative step: the last token and a draft of 5 fed with draft_from set keep the state after each; cut back
// to any length from the last token's to the whole chunk's, the sequence continues exactly as the full forward of
// the tokens it keeps, and holds only the snapshots the prefix cache asked for.
TEST(SequenceCache, CutBackAfterADraftContinuesAsTheFullForward) {
    const Model m = perturbed_model(decode_config(), 17);
    const int64_t V = m.config.vocab_size;
    auto im = InferModel::from_model(perturbed_model(decode_config(), 17), DType::F32);
    Decoder dec(*im, 16, 1);
    const std::vector<int32_t> tokens = random_tokens(19, V, 3); // 8 before, 6 in the step, 5 after
    const std::vector<float> ref = test::full_logits(m, tokens);
    std::vector<float> logits(6 * size_t(V));
    for (int64_t keep = 0; keep <= 5; ++keep) {
        SequenceCache seq = dec.new_sequence();
        seq.snapshot_every = 4; // (as the engine's prefix cache asks)
        SequenceCache *one[1] = {&seq};
        std::span<const int32_t> head(tokens.data(), 8), step(tokens.data() + 8, 6);
        dec.forward(one, std::span<const std::span<const int32_t>>(&head, 1), logits.data());
        seq.draft_from = seq.length + 1;
        const int64_t rows[1] = {6};
        dec.forward(one, std::span<const std::span<const int32_t>>(&step, 1), logits.data(), rows);
        ASSERT_EQ(seq.length, 14);
        seq.cut_back(9 + keep);
        ASSERT_EQ(seq.length, 9 + keep);
        EXPECT_EQ(seq.draft_from, 0);
        std::vector<int64_t> kept;
        for (const SequenceState &s : seq.snapshots) kept.push_back(s.length);
        EXPECT_EQ(kept, 9 + keep >= 12 ? std::vector<int64_t>({4, 8, 12}) : std::vector<int64_t>({4, 8})) << keep;
        // Continued with the tokens after the kept ones: the full forward's rows.
        std::vector<int32_t> rest(tokens.begin() + 9 + keep, tokens.end());
        std::span<const int32_t> more(rest);
        const int64_t all[1] = {int64_t(rest.size())};
        std::vector<float> got(rest.size() * size_t(V));
        dec.forward(one, std::span<const std::span<const int32_t>>(&more, 1), got.data(), all);
        for (size_t i = 0; i < got.size(); ++i)
            ASSERT_NEAR(got[i], ref[size_t(9 + keep) * size_t(V) + i], 1e-4) << "kept " << keep << ", value " << i;
    }
    SequenceCache seq = dec.new_sequence();
    SequenceCache *one[1] = {&seq};
    std::span<const int32_t> head(tokens.data(), 8);
    dec.forward(one, std::span<const std::span<const int32_t>>(&head, 1), logits.data());
    EXPECT_NE(test::error_of([&] { seq.cut_back(5); }).find("no state kept at length 5"), std::string::npos);
    EXPECT_NE(test::error_of([&] { seq.cut_back(9); }).find("back to 9"), std::string::npos);
}

std::unique_ptr<InferModel> tiny_random_model() {
    Model m = Model::create(config_preset("tiny"));
    model_init_random(m, 3);
    return InferModel::from_model(std::move(m), DType::F32);
}

EngineOptions with_lookup(EngineOptions e, int64_t tokens) {
    e.lookup = LookupOptions{.tokens = tokens, .min_ngram = 1, .max_ngram = 3};
    return e;
}

// Requests that repeat themselves (prompts with a pattern; a random model's greedy answers fall into loops),
// greedy and sampled, with log-probabilities, several at once with prompts fed beside them, and a context that
// ends inside a draft: the same tokens and log-probabilities with drafts as without, in fewer steps.
TEST(Engine, SpeculativeDecodingDrawsWhatDecodingDraws) {
    const std::vector<std::vector<int32_t>> prompts = {
        {5, 17, 3, 5, 17, 3, 5, 17}, {9, 9, 9, 9}, {100, 200, 300, 400, 100, 200, 300}, {1, 2, 3, 4, 5, 6, 7, 8, 9}};
    std::vector<SampleOptions> opts(prompts.size());
    for (size_t i = 0; i < opts.size(); ++i) {
        opts[i].max_new_tokens = 40;
        opts[i].temperature = i % 2 == 0 ? 0.0 : 0.8;
        opts[i].seed = 7 + i;
        opts[i].logprobs = i == 1 ? 2 : -1;
    }
    const auto run = [&](EngineOptions eo, int64_t *steps) {
        Engine e(tiny_random_model(), std::nullopt, eo);
        std::vector<Completion> got(prompts.size());
        for (size_t i = 0; i < prompts.size(); ++i)
            e.submit(prompts[i], opts[i], {}, [&got, i](const Completion &c) { got[i] = c; });
        *steps = 0;
        while (e.step()) ++*steps;
        const Engine::Totals t = e.totals();
        int64_t drafted = 0, accepted = 0;
        for (const Completion &c : got) drafted += c.draft_tokens, accepted += c.accepted_tokens;
        EXPECT_EQ(t.draft_tokens, drafted);
        EXPECT_EQ(t.accepted_tokens, accepted);
        return got;
    };
    int64_t plain_steps = 0, spec_steps = 0;
    const EngineOptions base{.max_batch = 4, .prefill_chunk = 4};
    const std::vector<Completion> plain = run(base, &plain_steps);
    const std::vector<Completion> spec = run(with_lookup(base, 5), &spec_steps);
    int64_t accepted = 0;
    int whole = 0, refused = 0; // requests whose drafts were all taken, mostly refused
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(spec[i].tokens, plain[i].tokens) << "request " << i;
        EXPECT_EQ(spec[i].finish_reason, plain[i].finish_reason) << "request " << i;
        ASSERT_EQ(spec[i].logprobs.size(), plain[i].logprobs.size());
        for (size_t t = 0; t < plain[i].logprobs.size(); ++t) {
            EXPECT_EQ(spec[i].logprobs[t].token, plain[i].logprobs[t].token);
            EXPECT_NEAR(spec[i].logprobs[t].logprob, plain[i].logprobs[t].logprob, 1e-4);
        }
        EXPECT_EQ(plain[i].draft_tokens, 0);
        EXPECT_LE(spec[i].accepted_tokens, spec[i].draft_tokens);
        accepted += spec[i].accepted_tokens;
        // Drafts as long as the last one earned: the greedy answers' loops are drafted 5 at a time (less only where
        // the answer's end is near); a sampled answer's drafts, after one is refused, 1 or 2.
        const Completion &c = spec[i];
        if (c.accepted_tokens == c.draft_tokens) {
            EXPECT_GE(c.draft_tokens, 4 * c.draft_steps) << "request " << i;
            ++whole;
        } else if (2 * c.accepted_tokens < c.draft_tokens && c.draft_steps >= 4) {
            EXPECT_LT(c.draft_tokens, 2 * c.draft_steps) << "request " << i;
            ++refused;
        }
    }
    EXPECT_GE(whole, 1);
    EXPECT_GE(refused, 1);
    EXPECT_GT(accepted, 40); // (the greedy answers' loops; the sampled ones' drafts are mostly refused)
    // All greedy: every answer loops, and the requests take far fewer steps.
    for (SampleOptions &o : opts) o.temperature = 0;
    const std::vector<Completion> greedy = run(base, &plain_steps), greedy_spec = run(with_lookup(base, 5), &spec_steps);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(greedy_spec[i].tokens, greedy[i].tokens) << "request " << i;
    EXPECT_LT(2 * spec_steps, plain_steps);
    // The context ends inside what a draft would take: it stops where decoding stops.
    int64_t steps = 0;
    EngineOptions short_context = base;
    short_context.max_context = 20;
    const std::vector<Completion> a = run(short_context, &steps), b = run(with_lookup(short_context, 5), &steps);
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(b[i].tokens, a[i].tokens) << "request " << i;
        EXPECT_EQ(b[i].finish_reason, "length");
    }
}

// Text requests: JSON mode (the mask read at each row, after the tokens drawn before it) and stop strings (the text
// ends inside a draft's tokens): the same answers with drafts as without.
TEST(Engine, SpeculativeDecodingKeepsJsonModeAndStopStrings) {
    const Tokenizer &tok = test::small_tokenizer();
    const std::vector<int32_t> prompt = tok.encode("the quick brown fox, the quick brown fox, the quick brown");
    std::vector<SampleOptions> opts;
    for (int i = 0; i < 6; ++i) {
        SampleOptions o;
        o.max_new_tokens = 40;
        o.temperature = i < 3 ? 0.0 : 1.0;
        o.seed = 100 + uint64_t(i);
        if (i % 3 == 1) {
            o.json_object = true;
            if (i > 3) // (else greedy: a key of one character repeated, read with drafts under the JSON mask)
                for (const char *b : {"\"", "}", "]", ","}) o.logit_bias.push_back({tok.encode(b).at(0), 6.0f});
        }
        opts.push_back(o);
    }
    const auto run = [&](EngineOptions eo, std::vector<std::string> stop) {
        Engine e(tiny_random_model(), tok, eo);
        std::vector<Completion> got(opts.size());
        for (size_t i = 0; i < opts.size(); ++i) {
            SampleOptions o = opts[i];
            if (i % 3 == 2) o.stop_strings = stop;
            e.submit(prompt, o, {}, [&got, i](const Completion &c) { got[i] = c; });
        }
        e.run_until_idle();
        return got;
    };
    const EngineOptions base{.max_batch = 6, .prefill_chunk = 8};
    const std::vector<Completion> plain = run(base, {});
    // A stop string of the greedy request's answer's first 12 bytes: a random model's greedy answer loops, so drafts
    // are taken from its third token on, and the text ends inside a step's tokens.
    const std::string text = plain[2].text;
    ASSERT_GT(text.size(), 12u);
    const std::string stop = text.substr(0, 12);
    const std::vector<Completion> a = run(base, {stop}), b = run(with_lookup(base, 6), {stop});
    int64_t accepted = 0;
    for (size_t i = 0; i < opts.size(); ++i) {
        EXPECT_EQ(b[i].tokens, a[i].tokens) << "request " << i;
        EXPECT_EQ(b[i].text, a[i].text) << "request " << i;
        EXPECT_EQ(b[i].finish_reason, a[i].finish_reason) << "request " << i;
        accepted += b[i].accepted_tokens;
    }
    EXPECT_EQ(a[2].finish_reason, "stop");
    EXPECT_LT(a[2].text.size(), text.size());
    EXPECT_GT(accepted, 10);
}

// With the prefix cache on, a finished speculative request's sequence (cut back after its drafts) resumes a later
// prompt exactly as one computed from scratch would.
TEST(Engine, SpeculativeSequencesResumeFromThePrefixCache) {
    SampleOptions o;
    o.temperature = 0;
    o.max_new_tokens = 30;
    const std::vector<int32_t> prompt = {5, 17, 3, 5, 17, 3, 5, 17};
    EngineOptions eo = with_lookup(EngineOptions{.max_batch = 2, .prefill_chunk = 4}, 4);
    eo.prefix_cache_bytes = 64 << 20;
    eo.prefix_cache_stride = 4;
    Engine e(tiny_random_model(), std::nullopt, eo);
    const Completion first = generate_one(e, prompt, o);
    ASSERT_GT(first.accepted_tokens, 0);
    std::vector<int32_t> next = prompt;
    next.insert(next.end(), first.tokens.begin(), first.tokens.end());
    next.push_back(42);
    const Completion resumed = generate_one(e, next, o);
    EXPECT_GT(resumed.cached_tokens, int64_t(prompt.size()));
    Engine fresh(tiny_random_model(), std::nullopt, EngineOptions{.max_batch = 1, .prefill_chunk = 64});
    EXPECT_EQ(resumed.tokens, generate_one(fresh, next, o).tokens);
}

// A sampled request asked again with the same seed answers the same (and, from a random model, with no loop of its
// own to draft): with the last request kept (lookup.history), its drafts copy the first answer and nearly all are
// taken; without, hardly any. The answers are the same either way.
TEST(Engine, DraftsCopyARecentRequestsAnswer) {
    SampleOptions o;
    o.temperature = 0.9;
    o.seed = 11;
    o.max_new_tokens = 30;
    const std::vector<int32_t> prompt = {100, 200, 300, 400, 500, 7};
    std::vector<Completion> again;
    for (const int64_t history : {0, 1}) {
        EngineOptions eo{.max_batch = 2, .prefill_chunk = 8};
        eo.lookup = LookupOptions{.tokens = 6, .min_ngram = 2, .max_ngram = 3, .history = history};
        Engine e(tiny_random_model(), std::nullopt, eo);
        const Completion first = generate_one(e, prompt, o);
        again.push_back(generate_one(e, prompt, o));
        EXPECT_EQ(again.back().tokens, first.tokens);
    }
    EXPECT_EQ(again[0].tokens, again[1].tokens);
    EXPECT_LT(again[0].accepted_tokens, 5);
    // Every draft taken: the 29 tokens after the first (drawn from the prompt's step) come 7 a step, 6 drafted and
    // one drawn after them.
    EXPECT_EQ(again[1].accepted_tokens, again[1].draft_tokens);
    EXPECT_GE(again[1].accepted_tokens, 20);
    EXPECT_LE(again[1].draft_steps, 5);
}

// At ZAYA1-8B's width (2048: a draft's 5 or more rows sum the columns in chunks, one row whole) with bf16 weights,
// at both row precisions: drafts give decoding's log-probabilities bit for bit, greedy and sampled, since a dot pass
// sums a row the same whatever rows share it (weight_stream.h; AVX-512 kernels only).
TEST(Engine, SpeculativeDecodingIsBitExactAtWideRows) {
#if !defined(__AVX512F__)
    GTEST_SKIP() << "bit-exact drafts hold for the AVX-512 kernels; this build has the AVX2 ones";
#else
    ZayaConfig c = config_preset("tiny");
    c.hidden_size = 2048;
    c.num_hidden_layers = 1;
    c.layer_types = {LayerType::Hybrid};
    c.validate();
    const auto bf16_model = [&c] {
        Model m = Model::create(c);
        model_init_random(m, 5);
        return InferModel::from_model(std::move(m), DType::BF16);
    };
    const std::vector<int32_t> prompt = {100, 200, 300, 400, 500, 7};
    for (const auto precision : {cpu::MatmulPrecision::F32, cpu::MatmulPrecision::BF16}) {
        for (const double temperature : {0.0, 0.9}) {
            SampleOptions o;
            o.temperature = temperature;
            o.seed = 3;
            o.max_new_tokens = 40;
            o.logprobs = 1;
            std::vector<Completion> again; // the request asked a second time, without drafts and with
            for (const int64_t tokens : {0, 6, 14}) {
                EngineOptions eo{.max_batch = 1, .prefill_chunk = 8, .precision = precision};
                eo.lookup = LookupOptions{.tokens = tokens, .min_ngram = 2, .max_ngram = 3, .history = 1};
                Engine e(bf16_model(), std::nullopt, eo);
                generate_one(e, prompt, o);
                again.push_back(generate_one(e, prompt, o));
            }
            const Completion &plain = again[0];
            for (size_t k = 1; k < again.size(); ++k) {
                const Completion &drafted = again[k];
                EXPECT_GE(drafted.accepted_tokens, 25) << "temperature " << temperature;
                EXPECT_EQ(drafted.tokens, plain.tokens);
                ASSERT_EQ(drafted.logprobs.size(), plain.logprobs.size());
                for (size_t t = 0; t < plain.logprobs.size(); ++t)
                    EXPECT_EQ(drafted.logprobs[t].logprob, plain.logprobs[t].logprob)
                        << cpu::matmul_precision_name(precision) << " rows, temperature " << temperature
                        << ", drafts of up to " << (k == 1 ? 6 : 14) << ", token " << t;
            }
        }
    }
#endif
}

// Lookup options out of range are refused when the engine is made, naming the value.
TEST(Engine, SpeculationIsRefusedOutOfRange) {
    EXPECT_NE(test::error_of([] {
                  Engine(tiny_random_model(), std::nullopt,
                         EngineOptions{.lookup = LookupOptions{.tokens = 2, .min_ngram = 3, .max_ngram = 1}});
              }).find("longest n-gram (1)"),
              std::string::npos);
}

} // namespace
} // namespace zaya
