// Sampling controls, streamed text with stop strings, the chat format, and the batching engine.
#include "core/rng.h"
#include "infer/engine.h"
#include "model/init.h"
#include "test_helpers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>

namespace zaya {
namespace {

std::map<int32_t, int> histogram(const SampleOptions &o, const std::vector<float> &logits, int draws) {
    Sampler s(o, int64_t(logits.size()));
    std::map<int32_t, int> h;
    for (int i = 0; i < draws; ++i) ++h[s.sample(logits.data())];
    return h;
}

std::vector<float> log_probs(std::initializer_list<double> p) {
    std::vector<float> l;
    for (double x : p) l.push_back(float(std::log(x)));
    return l;
}

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
    SampleOptions o;
    o.temperature = 0;
    Sampler s(o, 4);
    std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
    EXPECT_EQ(s.sample(l.data()), 1);
}

TEST(Sampler, DrawsFollowTheDistribution) {
    SampleOptions o;
    o.temperature = 1.0;
    o.top_k = 0;
    const int n = 40000;
    auto h = histogram(o, log_probs({0.5, 0.3, 0.2}), n);
    EXPECT_NEAR(h[0] / double(n), 0.5, 0.015);
    EXPECT_NEAR(h[1] / double(n), 0.3, 0.015);
    EXPECT_NEAR(h[2] / double(n), 0.2, 0.015);
}

TEST(Sampler, TemperatureSharpens) {
    SampleOptions o;
    o.temperature = 0.5; // p ∝ p₀² → 25:9:4
    o.top_k = 0;
    const int n = 40000;
    auto h = histogram(o, log_probs({0.5, 0.3, 0.2}), n);
    EXPECT_NEAR(h[0] / double(n), 25.0 / 38, 0.015);
    EXPECT_NEAR(h[2] / double(n), 4.0 / 38, 0.015);
}

TEST(Sampler, TopKTopPMinPCut) {
    const auto l = log_probs({0.1, 0.5, 0.25, 0.15});
    SampleOptions o;
    o.temperature = 1.0;
    o.top_k = 2;
    auto h = histogram(o, l, 20000);
    EXPECT_EQ(h.count(0) + h.count(3), 0u);
    EXPECT_NEAR(h[1] / 20000.0, 2.0 / 3, 0.02);
    o.top_k = 0;
    o.top_p = 0.7; // 0.5 + 0.25 reaches 0.7: tokens 1 and 2
    h = histogram(o, l, 20000);
    EXPECT_EQ(h.count(0) + h.count(3), 0u);
    EXPECT_GT(h[2], 0);
    o.top_p = 1.0;
    o.min_p = 0.4; // keep p ≥ 0.2: tokens 1 and 2
    h = histogram(o, l, 20000);
    EXPECT_EQ(h.count(0) + h.count(3), 0u);
    EXPECT_NEAR(h[1] / 20000.0, 2.0 / 3, 0.02);
}

TEST(Sampler, RepetitionPenaltyOnSeenTokens) {
    SampleOptions o;
    o.temperature = 0;
    o.repetition_penalty = 1.2;
    Sampler s(o, 2);
    std::vector<float> pos = {2.0f, 1.9f}, neg = {-1.0f, -1.1f};
    EXPECT_EQ(s.sample(pos.data()), 0);
    s.observe(0);
    EXPECT_EQ(s.sample(pos.data()), 1); // 2.0 / 1.2 < 1.9
    EXPECT_EQ(s.sample(neg.data()), 1); // −1.0 · 1.2 < −1.1
}

TEST(Sampler, SameSeedSameDraws) {
    SampleOptions o;
    o.temperature = 1.0;
    o.top_k = 0;
    const auto l = log_probs({0.25, 0.25, 0.25, 0.25});
    auto draws = [&](uint64_t seed) {
        o.seed = seed;
        Sampler s(o, 4);
        std::vector<int32_t> d;
        for (int i = 0; i < 64; ++i) d.push_back(s.sample(l.data()));
        return d;
    };
    EXPECT_EQ(draws(7), draws(7));
    EXPECT_NE(draws(7), draws(8));
}

// OpenAI's penalties count generated tokens only (not the prompt's); logit_bias shifts or bans tokens.
TEST(Sampler, FrequencyPresencePenaltiesAndLogitBias) {
    SampleOptions o;
    o.temperature = 0;
    o.frequency_penalty = 0.04;
    const std::vector<float> l = {2.0f, 1.9f, 0.0f};
    Sampler f(o, 3);
    EXPECT_FALSE(f.greedy());
    f.observe(0, /*generated=*/false);
    f.observe(0, /*generated=*/false);
    f.observe(0, /*generated=*/false);
    EXPECT_EQ(f.sample(l.data()), 0); // the prompt's tokens are not counted
    f.observe(0);
    f.observe(0);
    EXPECT_EQ(f.sample(l.data()), 0); // 2.0 − 2 · 0.04 = 1.92 > 1.9
    f.observe(0);
    EXPECT_EQ(f.sample(l.data()), 1); // 2.0 − 3 · 0.04 = 1.88 < 1.9
    o.frequency_penalty = 0, o.presence_penalty = 0.2;
    Sampler p(o, 3);
    p.observe(0);
    EXPECT_EQ(p.sample(l.data()), 1); // 2.0 − 0.2 < 1.9
    p.observe(1);
    EXPECT_EQ(p.sample(l.data()), 0); // both present: 1.8 > 1.7
    o.presence_penalty = 0, o.logit_bias = {{2, 2.5f}};
    EXPECT_EQ(Sampler(o, 3).sample(l.data()), 2);
    o.logit_bias = {{0, -100.0f}};
    EXPECT_EQ(Sampler(o, 3).sample(l.data()), 1);
    o.logit_bias = {{3, 1.0f}};
    EXPECT_NE(test::error_of([&] { Sampler(o, 3); }).find("token 3 is outside the vocabulary"), std::string::npos);
}

TEST(Sampler, OptionsOutOfRangeAreNamed) {
    auto err = [](auto set) {
        SampleOptions o;
        set(o);
        return test::error_of([&] { o.validate(); });
    };
    EXPECT_NE(err([](SampleOptions &o) { o.top_p = 0; }).find("top_p"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.temperature = -1; }).find("temperature"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.min_p = 2; }).find("min_p"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.top_k = -3; }).find("top_k"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.repetition_penalty = 0; }).find("repetition_penalty"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.stop_strings = {""}; }).find("stop"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.frequency_penalty = 3; }).find("frequency_penalty"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.presence_penalty = -2.5; }).find("presence_penalty"), std::string::npos);
    EXPECT_NE(err([](SampleOptions &o) { o.logit_bias = {{1, 101.0f}}; }).find("logit_bias"), std::string::npos);
}

const Tokenizer &test_tokenizer() { return test::small_tokenizer(); }

// The bytes of each token spell decode()'s text, a byte piece one byte of a character; BOS adds nothing.
TEST(Tokenizer, TokenBytesSpellTheText) {
    const Tokenizer &tok = test_tokenizer();
    const std::string text = "the ☃ quick é fox\n  jumps";
    std::vector<int32_t> ids = tok.encode(text);
    ids.insert(ids.begin(), tok.bos_id());
    std::string spelled;
    size_t single_bytes = 0;
    for (int32_t id : ids) {
        const std::string b = tok.token_bytes(id);
        spelled += b;
        single_bytes += b.size() == 1 && (static_cast<unsigned char>(b[0]) & 0x80);
    }
    EXPECT_EQ(spelled, text);
    EXPECT_EQ(single_bytes, 5u); // ☃'s three byte pieces and é's two
    EXPECT_TRUE(tok.is_control(tok.bos_id()));
    EXPECT_TRUE(tok.token_bytes(tok.bos_id()).empty());
    EXPECT_FALSE(tok.is_control(ids[1]));
}

std::string stream_all(const std::string &text, std::vector<std::string> stops, bool *stopped = nullptr,
                       std::vector<std::string> *pieces = nullptr) {
    const Tokenizer &tok = test_tokenizer();
    TextStream ts(tok, std::move(stops));
    std::string out;
    for (int32_t id : tok.encode(text)) {
        std::string piece = ts.push(id);
        if (pieces) pieces->push_back(piece);
        out += piece;
        if (ts.stopped()) break;
    }
    if (stopped) *stopped = ts.stopped();
    return out + ts.flush();
}

TEST(TextStream, ReleasesWholeCharactersOnly) {
    const std::string text = "the fox é ☃ jumps";
    std::vector<std::string> pieces;
    EXPECT_EQ(stream_all(text, {}, nullptr, &pieces), text);
    for (const std::string &p : pieces) EXPECT_EQ(p.find("\xEF\xBF\xBD"), std::string::npos) << "released U+FFFD";
}

TEST(TextStream, StopStringEndsTheTextBeforeIt) {
    bool stopped = false;
    EXPECT_EQ(stream_all("the quick brown fox STOP here", {"STOP"}, &stopped), "the quick brown fox ");
    EXPECT_TRUE(stopped);
    // A held-back prefix of a stop string that does not complete is released at the end.
    EXPECT_EQ(stream_all("the lazy ST", {"STOP"}, &stopped), "the lazy ST");
    EXPECT_FALSE(stopped);
    // A stop string spanning several tokens.
    EXPECT_EQ(stream_all("jumps over the lazy dog", {"over the"}, &stopped), "jumps ");
    EXPECT_TRUE(stopped);
}

// The stream decodes each new token in a short window after the text it settled; what it releases, with the flush,
// is what decoding all the ids gives — for every kind of tokenizer: sentencepiece's, and tokenizer.json's of
// Gemma's kind and of Llama's (whose decoder drops the text's first space: the window's context takes it), and
// byte-level ones (GPT-2's and Llama 3's: a byte is a character of its own, decoded with from_utf8_lossy).
// Random ids, with characters spelled in byte pieces (2 to 4 of them) between them and now and then a lone byte;
// texts that decode to U+FFFD are not compared (a later byte can turn released characters into
// U+FFFD, which no stream can take back).
TEST(TextStream, ReleasesWhatDecodingAllIdsGives) {
    const std::string golden = test::golden_dir("tokenizer");
    const std::vector<Tokenizer> toks = {test_tokenizer(), Tokenizer::load(golden + "/gemma/tokenizer.json"),
                                         Tokenizer::load(golden + "/llama/tokenizer.json"),
                                         Tokenizer::load(golden + "/llama/tokenizer.model"),
                                         Tokenizer::load(golden + "/gpt2/tokenizer.json"),
                                         Tokenizer::load(golden + "/llama3/tokenizer.json")};
    for (const Tokenizer &tok : toks) {
        SCOPED_TRACE(tok.path());
        // The pieces of bytes 0x80–0xFF (no other piece is one such byte alone), and the rest.
        std::vector<int32_t> byte_id(256, -1), others;
        for (int32_t id = 0; id < tok.vocab_size(); ++id)
            if (const std::string b = tok.token_bytes(id); b.size() == 1 && uint8_t(b[0]) >= 0x80)
                byte_id[uint8_t(b[0])] = id;
            else others.push_back(id);
        ASSERT_EQ(std::count(byte_id.begin() + 0x80, byte_id.end(), -1), 0);
        Rng rng(11, 0);
        auto add_char = [&](std::vector<int32_t> &ids) { // é-like, CJK-like or emoji-like, as byte pieces
            const uint32_t ranges[3][2] = {{0x80, 0x7ff}, {0x4e00, 0x9fff}, {0x1f300, 0x1f64f}};
            const auto &r = ranges[rng.next() % 3];
            const uint32_t cp = r[0] + uint32_t(rng.next() % (r[1] - r[0] + 1));
            std::string utf8;
            if (cp < 0x800) utf8 = {char(0xc0 | cp >> 6), char(0x80 | (cp & 0x3f))};
            else if (cp < 0x10000)
                utf8 = {char(0xe0 | cp >> 12), char(0x80 | (cp >> 6 & 0x3f)), char(0x80 | (cp & 0x3f))};
            else
                utf8 = {char(0xf0 | cp >> 18), char(0x80 | (cp >> 12 & 0x3f)), char(0x80 | (cp >> 6 & 0x3f)),
                        char(0x80 | (cp & 0x3f))};
            for (const char c : utf8) ids.push_back(byte_id[uint8_t(c)]);
        };
        int compared = 0;
        for (int seq = 0; seq < 300; ++seq) {
            std::vector<int32_t> ids;
            const size_t n = 1 + rng.next() % 30;
            while (ids.size() < n) {
                const uint64_t kind = rng.next() % 20;
                if (kind < 6) add_char(ids);
                else if (kind == 6) ids.push_back(byte_id[0x80 + rng.next() % 0x80]); // a lone byte: U+FFFD
                else ids.push_back(others[rng.next() % others.size()]);
            }
            const std::string want = tok.decode(ids);
            if (want.find("\xEF\xBF\xBD") != std::string::npos) continue;
            TextStream ts(tok, {});
            std::string got;
            for (const int32_t id : ids) got += ts.push(id);
            got += ts.flush();
            EXPECT_EQ(got, want) << fmt::format("ids {}", fmt::join(ids, ","));
            ++compared;
        }
        EXPECT_GT(compared, 150);
    }
}

TEST(ChatPrompt, TurnFormat) {
    const Tokenizer &tok = test_tokenizer(); // no <start_of_turn> piece: markers are plain text
    auto ids = chat_prompt(tok, {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}}, 2);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 2);
    std::vector<int32_t> rest(ids.begin() + 1, ids.end());
    EXPECT_EQ(tok.decode(rest), "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
                                "<start_of_turn>model\nHello<end_of_turn>\n"
                                "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
    EXPECT_NE(test::error_of([&] { chat_prompt(tok, {{"robot", "x"}}, 2); }).find("robot"), std::string::npos);
}

std::unique_ptr<InferModel> tiny_model() {
    Model m = Model::create(config_preset("tiny"));
    model_init_random(m, 3);
    return InferModel::from_model(std::move(m), DType::F32);
}

TEST(Engine, ConcurrentRequestsEqualEachAlone) {
    const std::vector<std::vector<int32_t>> prompts = {{5, 17, 3}, {9}, {100, 200, 300, 400, 500, 7, 8, 9, 10}};
    SampleOptions o;
    o.temperature = 0.9;
    o.max_new_tokens = 12;
    std::vector<std::vector<int32_t>> alone;
    {
        Engine e(tiny_model(), std::nullopt, EngineOptions{1, 4});
        for (const auto &p : prompts) alone.push_back(generate_one(e, p, o).tokens);
    }
    Engine e(tiny_model(), std::nullopt, EngineOptions{3, 4});
    std::vector<Completion> got(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i)
        e.submit(prompts[i], o, {}, [&got, i](const Completion &c) { got[i] = c; });
    int steps = 0;
    while (e.step()) ++steps;
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i].tokens, alone[i]) << "request " << i;
    // Batched: far fewer steps than one request after another (3 × (prefill + 12 tokens)).
    EXPECT_LT(steps, 20);
}

// Greedy requests alone take the decoder's argmax (no logits); next to a sampled request the batch's logits come
// back and the Sampler picks: both must give the same tokens, and the sampled request its own.
TEST(Engine, GreedyArgmaxPathEqualsSamplerPath) {
    SampleOptions greedy, sampled;
    greedy.temperature = 0, greedy.max_new_tokens = 10;
    sampled.temperature = 0.9, sampled.max_new_tokens = 10;
    const std::vector<int32_t> pg = {5, 17, 3}, ps = {9, 8};
    Engine alone(tiny_model(), std::nullopt, EngineOptions{1, 4});
    const std::vector<int32_t> g = generate_one(alone, pg, greedy).tokens, s = generate_one(alone, ps, sampled).tokens;
    ASSERT_EQ(g.size(), 10u);
    Engine e(tiny_model(), std::nullopt, EngineOptions{2, 4});
    Completion cg, cs;
    e.submit(pg, greedy, {}, [&](const Completion &c) { cg = c; });
    e.submit(ps, sampled, {}, [&](const Completion &c) { cs = c; });
    e.run_until_idle();
    EXPECT_EQ(e.max_batch_seen(), 2);
    EXPECT_EQ(cg.tokens, g);
    EXPECT_EQ(cs.tokens, s);
}

// --max-context: a sequence stops ("length") when prompt + generated reach it; a prompt that long is refused.
TEST(Engine, MaxContextBoundsEachSequence) {
    Engine e(tiny_model(), std::nullopt, EngineOptions{.max_batch = 1, .prefill_chunk = 4, .max_context = 6});
    EXPECT_EQ(e.max_context(), 6);
    EXPECT_EQ(e.device(), "cpu");
    SampleOptions o;
    o.max_new_tokens = 100;
    const Completion c = generate_one(e, {1, 2, 3}, o);
    EXPECT_EQ(c.finish_reason, "length");
    EXPECT_EQ(c.tokens.size(), 3u);
    EXPECT_NE(test::error_of([&] { e.submit({1, 2, 3, 4, 5, 6}, o, {}, {}); }).find("context length is 6"),
              std::string::npos);
    EXPECT_NE(test::error_of([] { Engine(tiny_model(), std::nullopt, EngineOptions{.device = "tpu"}); }).find("tpu"),
              std::string::npos);
}

// The CPU decoder's cache element: the model's by default (an fp32 model's is fp32; an int8 one's that of the weights
// it was quantized from), bf16 or f32 when asked, nothing else.
TEST(Engine, CpuKvCacheElement) {
    EXPECT_EQ(Engine(tiny_model(), std::nullopt, EngineOptions{}).kv_dtype(), DType::F32);
    EXPECT_EQ(Engine(tiny_model(), std::nullopt, EngineOptions{.kv_dtype = DType::BF16}).kv_dtype(), DType::BF16);
    Model bf16 = Model::create(config_preset("tiny"));
    model_init_random(bf16, 3);
    auto bf16_model = InferModel::from_model(std::move(bf16), DType::BF16);
    EXPECT_EQ(Engine(std::move(bf16_model), std::nullopt, EngineOptions{}).kv_dtype(), DType::BF16);
    // Quantized to int8, a model's cache follows the weights it was quantized from.
    for (DType from : {DType::BF16, DType::F32}) {
        Model m = Model::create(config_preset("tiny"));
        model_init_random(m, 3);
        auto q = InferModel::from_model(std::move(m), from);
        q->quantize_i8();
        EXPECT_EQ(q->attention_dtype(), from);
        EXPECT_EQ(Engine(std::move(q), std::nullopt, EngineOptions{}).kv_dtype(), from) << dtype_name(from);
    }
    const std::string err =
        test::error_of([] { Engine(tiny_model(), std::nullopt, EngineOptions{.kv_dtype = DType::F16}); });
    EXPECT_NE(err.find("the KV cache's element must be f32 or bf16, got F16"), std::string::npos) << err;
}

// The prompt chunk per step: the device's default when not given (the CPU's 256), kept when given, and a
// negative one fails naming the option's meaning.
TEST(Engine, PrefillChunkDefaultsPerDevice) {
    EXPECT_EQ(default_prefill_chunk("cpu"), 256);
    EXPECT_EQ(default_prefill_chunk("cuda"), 2048);
    EXPECT_EQ(Engine(tiny_model(), std::nullopt, EngineOptions{}).prefill_chunk(), 256);
    EXPECT_EQ(Engine(tiny_model(), std::nullopt, EngineOptions{.prefill_chunk = 3}).prefill_chunk(), 3);
    const std::string err =
        test::error_of([] { Engine(tiny_model(), std::nullopt, EngineOptions{.prefill_chunk = -2}); });
    EXPECT_NE(err.find("prefill chunk must be ≥ 1"), std::string::npos) << err;
}

// A prompt's step feeds kCpuSolePrefillChunk (1024) tokens while no other request decodes — nobody waits on the
// larger piece — and prefill_chunk (256) while one does; a prefill_chunk given is used for both.
TEST(Engine, PromptStepsAreLargerWhileNothingElseDecodes) {
    Engine e(tiny_model(), std::nullopt, EngineOptions{.max_batch = 2});
    EXPECT_EQ(e.prefill_chunk(), 256);
    EXPECT_EQ(e.sole_prefill_chunk(), kCpuSolePrefillChunk);
    EXPECT_EQ(Engine(tiny_model(), std::nullopt, EngineOptions{.prefill_chunk = 3}).sole_prefill_chunk(), 3);
    SampleOptions o;
    o.max_new_tokens = 16;
    std::vector<int32_t> prompt(600);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(1 + i * 7 % 500);
    // Steps until a request's first token: 600 prompt tokens in one step alone; in three (256, 256, 88) beside a
    // request decoding.
    auto steps_to_first_token = [&](const std::vector<int32_t> &p) {
        auto first = std::make_shared<bool>(false);
        e.submit(p, o, [first](int32_t, const std::string &, const Completion &) { *first = true; }, {});
        int steps = 0;
        while (!*first && e.step()) ++steps;
        return steps;
    };
    EXPECT_EQ(steps_to_first_token(prompt), 1);
    std::rotate(prompt.begin(), prompt.begin() + 5, prompt.end());
    EXPECT_EQ(steps_to_first_token(prompt), 3);
    EXPECT_EQ(e.max_batch_seen(), 2);
    e.run_until_idle();
}

// Prompts in prefill share a step's budget of prompt tokens, in the order they came. With 256 a step (given, so
// also while nothing decodes), three 100-token prompts submitted together take steps of 100 + 100 + 56 and 44
// prompt tokens: their first tokens come at steps 1, 1 and 2 (one prompt a step: 1, 2, 3); three 4-token prompts
// all come in step 1. Each request's tokens equal what it gets alone.
TEST(Engine, PromptsShareAStepsBudget) {
    SampleOptions o;
    o.max_new_tokens = 3;
    for (const int64_t length : {100, 4}) {
        std::vector<std::vector<int32_t>> prompts(3);
        for (size_t p = 0; p < prompts.size(); ++p)
            for (int64_t i = 0; i < length; ++i) prompts[p].push_back(int32_t(1 + (i * 7 + int64_t(p) * 31) % 500));
        std::vector<std::vector<int32_t>> alone;
        Engine single(tiny_model(), std::nullopt, EngineOptions{.max_batch = 1, .prefill_chunk = 256});
        for (const auto &p : prompts) alone.push_back(generate_one(single, p, o).tokens);
        Engine e(tiny_model(), std::nullopt, EngineOptions{.max_batch = 3, .prefill_chunk = 256});
        std::vector<int> first_step(prompts.size(), 0);
        std::vector<std::vector<int32_t>> got(prompts.size());
        int step = 1;
        for (size_t p = 0; p < prompts.size(); ++p)
            e.submit(
                prompts[p], o,
                [&, p](int32_t, const std::string &, const Completion &) {
                    if (first_step[p] == 0) first_step[p] = step;
                },
                [&, p](const Completion &c) { got[p] = c.tokens; });
        for (; e.step(); ++step) {}
        const std::vector<int> want = length == 100 ? std::vector<int>{1, 1, 2} : std::vector<int>{1, 1, 1};
        EXPECT_EQ(first_step, want) << length;
        EXPECT_EQ(got, alone) << length;
    }
}

// A prompt read in several steps reports its progress after each (the last call at the whole prompt, before the
// first token); one read in a single step reports once.
TEST(Engine, PromptProgressAfterEachStep) {
    Engine e(tiny_model(), std::nullopt, EngineOptions{.max_batch = 1, .prefill_chunk = 256});
    SampleOptions o;
    o.max_new_tokens = 2;
    std::vector<std::string> events; // "fed/total" per progress call, "token" per token
    auto progress = [&](int64_t fed, int64_t total) { events.push_back(fmt::format("{}/{}", fed, total)); };
    auto token = [&](int32_t t, const std::string &, const Completion &) {
        if (t >= 0) events.push_back("token");
    };
    generate_one(e, std::vector<int32_t>(600, 7), o, token, progress);
    EXPECT_EQ(events, (std::vector<std::string>{"256/600", "512/600", "600/600", "token", "token"}));
    events.clear();
    generate_one(e, {1, 2, 3}, o, token, progress);
    EXPECT_EQ(events, (std::vector<std::string>{"3/3", "token", "token"}));
    // Resumed from the prefix cache: what is left to compute is what it counts.
    Engine cached(tiny_model(), std::nullopt,
                  EngineOptions{.max_batch = 1, .prefill_chunk = 256, .prefix_cache_bytes = size_t(64) << 20});
    std::vector<int32_t> prompt(600, 7);
    generate_one(cached, prompt, o);
    prompt.insert(prompt.end(), 300, 9);
    events.clear();
    const Completion c = generate_one(cached, prompt, o, token, progress);
    const int64_t left = 900 - c.cached_tokens;
    ASSERT_GT(c.cached_tokens, 256);
    EXPECT_EQ(events, (std::vector<std::string>{fmt::format("256/{}", left), fmt::format("{}/{}", left, left), "token",
                                                "token"}));
}

// Requests that finish in the same step give their places to the queue at the next: run_until_idle() completes
// every request (it had returned with two still queued, behind the two finished ones).
TEST(Engine, RequestsFinishingTogetherLetTheQueueIn) {
    Engine e(tiny_model(), std::nullopt, EngineOptions{.max_batch = 2});
    SampleOptions o;
    o.max_new_tokens = 2;
    std::vector<size_t> done;
    for (int32_t p = 0; p < 4; ++p)
        e.submit({1, 2, 3 + p}, o, {}, [&done](const Completion &c) { done.push_back(c.tokens.size()); });
    e.run_until_idle();
    EXPECT_EQ(done, (std::vector<size_t>{2, 2, 2, 2}));
}

TEST(Engine, StopTokenCancelAndBadRequests) {
    Engine e(tiny_model(), std::nullopt, EngineOptions{2, 8});
    SampleOptions o;
    o.temperature = 1.0;
    o.top_k = 0;
    o.max_new_tokens = 20;
    const auto free_run = generate_one(e, {1, 2, 3}, o).tokens;
    ASSERT_EQ(free_run.size(), 20u);
    // The first token after position 0 that did not occur before it ends the same run there.
    size_t j = 1;
    while (j < free_run.size() && std::find(free_run.begin(), free_run.begin() + long(j), free_run[j]) !=
                                      free_run.begin() + long(j))
        ++j;
    ASSERT_LT(j, free_run.size());
    o.stop_tokens = {free_run[j]};
    Completion c = generate_one(e, {1, 2, 3}, o);
    EXPECT_EQ(c.finish_reason, "stop");
    EXPECT_EQ(c.tokens, std::vector<int32_t>(free_run.begin(), free_run.begin() + long(j)));

    o.stop_tokens.clear();
    o.max_new_tokens = 1000;
    Completion cancelled;
    const uint64_t id = e.submit({1, 2, 3}, o, {}, [&](const Completion &r) { cancelled = r; });
    e.step();
    e.step();
    e.cancel(id);
    e.run_until_idle();
    EXPECT_EQ(cancelled.finish_reason, "cancelled");
    EXPECT_LT(cancelled.tokens.size(), 5u);

    EXPECT_NE(test::error_of([&] { e.submit({}, o, {}, {}); }).find("empty"), std::string::npos);
    EXPECT_NE(test::error_of([&] { e.submit({1, 9999}, o, {}, {}); }).find("9999"), std::string::npos);
    std::vector<int32_t> too_long(size_t(e.model().config.max_position_embeddings), 1);
    EXPECT_NE(test::error_of([&] { e.submit(too_long, o, {}, {}); }).find("context length"), std::string::npos);
    EXPECT_EQ(e.active(), 0);
}

} // namespace
} // namespace zaya
