// Log-probabilities (OpenAI `logprobs`, `echo`): the log-softmax and its top tokens, the engine's prompt and token
// log-probabilities against the training forward's logits, and the API's request fields and response shapes.
#include "infer/engine.h"
#include "infer/openai_api.h"
#include "model/forward.h"
#include "model/init.h"
#include "decode_helpers.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zaya {
namespace {

using test::ref_logprob;

TEST(Logprobs, LogSoftmaxAndTopTokens) {
    const std::vector<float> l = {1, 3, 3, -2, 0.5};
    std::vector<int32_t> idx;
    const TokenLogprobs r = token_logprobs(l.data(), 5, 2, 3, idx);
    EXPECT_EQ(r.token, 2);
    EXPECT_NEAR(r.logprob, ref_logprob(l.data(), 5, 2), 1e-6);
    ASSERT_EQ(r.top.size(), 3u);
    EXPECT_EQ(r.top[0].token, 1); // tie with 2: the lower id first
    EXPECT_EQ(r.top[1].token, 2);
    EXPECT_EQ(r.top[2].token, 0);
    EXPECT_NEAR(r.top[2].logprob, ref_logprob(l.data(), 5, 0), 1e-6);
    EXPECT_EQ(token_logprobs(l.data(), 5, 3, 10, idx).top.size(), 5u); // no more than the vocabulary
    EXPECT_TRUE(token_logprobs(l.data(), 5, 3, 0, idx).top.empty());
    EXPECT_NE(test::error_of([&] { token_logprobs(l.data(), 5, 5, 0, idx); }).find("outside the vocabulary"),
              std::string::npos);
    // A large vocabulary far from zero: no overflow, and the probabilities sum to one.
    std::vector<float> big(4096);
    for (size_t i = 0; i < big.size(); ++i) big[i] = 1000.0f + float((i * 7919) % 1000) * 0.01f;
    double total = 0;
    for (int32_t t = 0; t < 4096; ++t) total += std::exp(double(token_logprobs(big.data(), 4096, t, 0, idx).logprob));
    EXPECT_NEAR(total, 1.0, 1e-5);
}

Model seeded_tiny() {
    Model m = Model::create(config_preset("tiny"));
    model_init_random(m, 3);
    return m;
}

// Prompts fed in chunks of 4 while another sequence decodes (and, with speculative decoding, feeds drafts of its
// loop in the same steps): the scored chunk's rows are the right ones.
TEST(Logprobs, EngineEqualsTheFullForward) {
    for (const int64_t drafts : {0, 4}) {
        SCOPED_TRACE(drafts);
        const Model m = seeded_tiny();
        const int64_t V = m.config.vocab_size;
        EngineOptions eo{3, 4};
        eo.lookup = LookupOptions{.tokens = drafts, .min_ngram = 1, .max_ngram = 2};
        Engine e(InferModel::from_model(seeded_tiny(), DType::F32), std::nullopt, eo);
        SampleOptions plain, scored;
        plain.max_new_tokens = 20, plain.temperature = 0;
        scored.temperature = 0.9, scored.max_new_tokens = 5, scored.logprobs = 3, scored.prompt_logprobs = true;
        const std::vector<int32_t> p0 = {7, 8}, p1 = {5, 17, 3, 9, 100, 200, 300, 400, 500, 7, 11};
        const std::vector<int32_t> p2 = {1, 2, 3, 4, 5};
        std::vector<Completion> got(3);
        e.submit(p0, plain, {}, [&](const Completion &c) { got[0] = c; });
        e.step(); // p0 decodes while p1's and p2's prompts are scored
        e.submit(p1, scored, {}, [&](const Completion &c) { got[1] = c; });
        e.submit(p2, scored, {}, [&](const Completion &c) { got[2] = c; });
        e.run_until_idle();
        EXPECT_TRUE(got[0].logprobs.empty() && got[0].prompt_logprobs.empty());
        if (drafts > 0) { // (its greedy answer loops: drafted beside the scoring)
            EXPECT_GT(got[0].accepted_tokens, 5);
        }
        for (size_t i : {1, 2}) {
            const std::vector<int32_t> &p = i == 1 ? p1 : p2;
            const Completion &c = got[i];
            ASSERT_EQ(c.prompt_logprobs.size(), p.size() - 1) << "request " << i;
            ASSERT_EQ(c.logprobs.size(), c.tokens.size());
            ASSERT_EQ(c.tokens.size(), 5u);
            std::vector<int32_t> all = p;
            all.insert(all.end(), c.tokens.begin(), c.tokens.end());
            const std::vector<float> logits = test::full_logits(m, all);
            test::expect_logprobs_match(c.prompt_logprobs, logits, V, 0, p, 1, 3);
            test::expect_logprobs_match(c.logprobs, logits, V, int64_t(p.size()) - 1, c.tokens, 0, 3);
        }
    }
}

// max_tokens 0 scores the prompt and generates nothing; a greedy token is the top one.
TEST(Logprobs, ScoringOnlyAndGreedy) {
    Engine e(InferModel::from_model(seeded_tiny(), DType::F32), std::nullopt, EngineOptions{2, 256});
    SampleOptions o;
    o.max_new_tokens = 0, o.logprobs = 0, o.prompt_logprobs = true;
    const Completion c = generate_one(e, {5, 17, 3, 9}, o);
    EXPECT_TRUE(c.tokens.empty());
    EXPECT_EQ(c.finish_reason, "length");
    EXPECT_EQ(c.prompt_logprobs.size(), 3u);
    EXPECT_TRUE(c.prompt_logprobs[0].top.empty());
    o.max_new_tokens = 4, o.temperature = 0, o.logprobs = 2, o.prompt_logprobs = false;
    const Completion g = generate_one(e, {5, 17, 3, 9}, o);
    ASSERT_EQ(g.logprobs.size(), 4u);
    EXPECT_TRUE(g.prompt_logprobs.empty());
    for (const TokenLogprobs &lp : g.logprobs) {
        EXPECT_EQ(lp.token, lp.top[0].token);
        EXPECT_EQ(lp.logprob, lp.top[0].logprob);
        EXPECT_LE(lp.top[1].logprob, lp.top[0].logprob);
    }
    // The same tokens as without log-probabilities (the argmax-only path).
    o.logprobs = -1;
    EXPECT_EQ(generate_one(e, {5, 17, 3, 9}, o).tokens, g.tokens);
    SampleOptions bad;
    bad.logprobs = 21;
    EXPECT_NE(test::error_of([&] { e.submit({1, 2}, bad, {}, {}); }).find("logprobs must be in [-1, 20]"),
              std::string::npos);
    bad.logprobs = -1, bad.prompt_logprobs = true;
    EXPECT_NE(test::error_of([&] { e.submit({1, 2}, bad, {}, {}); }).find("need logprobs"), std::string::npos);
}

// The ApiError's parameter, or "" if the body parses.
std::string refused(const std::string &body, bool chat) {
    try {
        parse_api_request(body, chat, 4096);
    } catch (const ApiError &e) {
        EXPECT_EQ(e.status, 400);
        return e.param;
    }
    return "";
}

TEST(Logprobs, ApiRequestFields) {
    ApiRequest r = parse_api_request(R"({"prompt": [[1, 2], [3]], "logprobs": 2, "echo": true})", false, 4096);
    ASSERT_EQ(r.prompts.size(), 2u);
    EXPECT_EQ(r.prompts[1].ids, std::vector<int32_t>{3});
    EXPECT_TRUE(r.echo);
    EXPECT_EQ(r.sample.logprobs, 2);
    EXPECT_TRUE(r.sample.prompt_logprobs);
    r = parse_api_request(R"({"prompt": ["a", "b", "c"], "echo": true})", false, 4096);
    EXPECT_EQ(r.prompts.size(), 3u);
    EXPECT_EQ(r.prompts[2].text, "c");
    EXPECT_EQ(r.sample.logprobs, -1);
    EXPECT_FALSE(r.sample.prompt_logprobs);
    r = parse_api_request(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
                              "top_logprobs": 4})", true, 4096);
    EXPECT_EQ(r.sample.logprobs, 4);
    EXPECT_FALSE(r.sample.prompt_logprobs);
    EXPECT_EQ(refused(R"({"prompt": "x", "logprobs": 21})", false), "logprobs");
    EXPECT_EQ(refused(R"({"prompt": "x", "logprobs": true})", false), "logprobs");
    EXPECT_EQ(refused(R"({"prompt": "x", "top_logprobs": 2})", false), "top_logprobs");
    EXPECT_EQ(refused(R"({"prompt": ["x", "y"], "stream": true})", false), "prompt");
    EXPECT_EQ(refused(R"({"prompt": [[1], 2]})", false), "prompt");
    // The other sampling fields of OpenAI's API.
    r = parse_api_request(R"({"prompt": "x", "n": 3, "frequency_penalty": 0.5, "presence_penalty": -1,
                              "logit_bias": {"7": -100, "12": 2.5}})", false, 4096);
    EXPECT_EQ(r.n, 3);
    EXPECT_EQ(r.sample.frequency_penalty, 0.5);
    EXPECT_EQ(r.sample.presence_penalty, -1);
    EXPECT_EQ(r.sample.logit_bias, (std::vector<std::pair<int32_t, float>>{{12, 2.5f}, {7, -100.0f}}));
    EXPECT_EQ(refused(R"({"prompt": "x", "n": 0})", false), "n");
    EXPECT_EQ(refused(R"({"prompt": "x", "n": 2, "stream": true})", false), "n");
    EXPECT_EQ(refused(R"({"prompt": ["x", "y"], "n": 200})", false), "n");
    EXPECT_EQ(refused(R"({"prompt": "x", "frequency_penalty": 2.5})", false), "frequency_penalty");
    EXPECT_EQ(refused(R"({"prompt": "x", "logit_bias": {"a": 1}})", false), "logit_bias");
    EXPECT_EQ(refused(R"({"prompt": "x", "logit_bias": {"1": 200}})", false), "logit_bias");
    EXPECT_EQ(refused(R"({"prompt": "x", "logit_bias": [1]})", false), "logit_bias");
    const std::string hi = R"("messages": [{"role": "user", "content": "hi"}])";
    EXPECT_EQ(refused("{" + hi + R"(, "top_logprobs": 2})", true), "top_logprobs");
    EXPECT_EQ(refused("{" + hi + R"(, "logprobs": 3})", true), "logprobs");
    EXPECT_EQ(refused("{" + hi + R"(, "echo": true})", true), "echo");
    EXPECT_EQ(refused("{" + hi + R"(, "logprobs": false, "echo": false})", true), "");
}

// Token 0 is a control token (shown by name, no text), 1 "a", 2 "é" whole, 3 and 4 its two bytes apart.
TokenSpelling spell(int32_t id) {
    static const char *bytes[] = {"", "a", "\xc3\xa9", "\xc3", "\xa9"};
    return {bytes[id], id == 0 ? "<bos>" : ""};
}

TEST(Logprobs, ApiResponseShapes) {
    ApiRequest r = parse_api_request(R"({"prompt": [0, 1, 2], "logprobs": 1, "echo": true})", false, 4096);
    ApiChoice c;
    c.prompt = {0, 1, 2};
    c.echo_text = "a\xc3\xa9";
    c.completion.text = "a";
    c.completion.tokens = {3, 4};
    c.completion.prompt_tokens = 3;
    c.completion.finish_reason = "length";
    c.completion.prompt_logprobs = {{1, -0.5f, {{2, -0.25f}}}, {2, -0.25f, {{2, -0.25f}}}};
    c.completion.logprobs = {{3, -1.0f, {{1, -0.5f}}}, {4, -2.0f, {{1, -0.75f}}}};
    const nlohmann::json j = completion_response(r, "cmpl-1", 0, "m", {c, c}, spell);
    ASSERT_EQ(j["choices"].size(), 2u);
    EXPECT_EQ(j["choices"][1]["index"], 1);
    EXPECT_EQ(j["usage"]["prompt_tokens"], 6);
    EXPECT_EQ(j["usage"]["completion_tokens"], 4);
    const nlohmann::json &ch = j["choices"][0];
    EXPECT_EQ(ch["text"], "a\xc3\xa9" "a");
    const nlohmann::json &lp = ch["logprobs"];
    EXPECT_EQ(lp["tokens"], nlohmann::json({"<bos>", "a", "\xc3\xa9", "bytes:\\xc3", "bytes:\\xa9"}));
    EXPECT_EQ(lp["token_logprobs"], nlohmann::json({nullptr, -0.5, -0.25, -1.0, -2.0}));
    EXPECT_TRUE(lp["top_logprobs"][0].is_null());
    EXPECT_EQ(lp["top_logprobs"][1], nlohmann::json({{"a", -0.5}, {"\xc3\xa9", -0.25}})); // top 1 and the chosen
    EXPECT_EQ(lp["text_offset"], nlohmann::json({0, 0, 1, 2, 3})); // characters: the lead byte counts one
    EXPECT_EQ(ch["token_ids"], nlohmann::json({3, 4}));

    r = parse_api_request(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true,
                              "top_logprobs": 1})", true, 4096);
    const nlohmann::json cj = completion_response(r, "chatcmpl-1", 0, "m", {c}, spell);
    const nlohmann::json &content = cj["choices"][0]["logprobs"]["content"];
    ASSERT_EQ(content.size(), 2u);
    EXPECT_EQ(content[0]["token"], "bytes:\\xc3");
    EXPECT_EQ(content[0]["bytes"], nlohmann::json({0xc3}));
    EXPECT_EQ(content[0]["logprob"], -1.0);
    EXPECT_EQ(content[1]["top_logprobs"][0], nlohmann::json({{"token", "a"}, {"logprob", -0.75}, {"bytes", {97}}}));
    // Without logprobs: null, as OpenAI.
    r = parse_api_request(R"({"prompt": "x"})", false, 4096);
    EXPECT_TRUE(completion_response(r, "cmpl-2", 0, "m", {c}, spell)["choices"][0]["logprobs"].is_null());
}

} // namespace
} // namespace zaya
