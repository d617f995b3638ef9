// Generative benchmarks (zaya eval --generate): answers taken from completions, exact match against greedy
// completions the engine gives alone, ranks sharing the items, and the items' loader.
#include "infer/evaluate_generation.h"
#include "model/init.h"
#include "test_helpers.h"
#include "thread_ranks.h"

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

namespace zaya {
namespace {

TEST(GenerationEval, ExtractAnswer) {
    const std::regex gsm("#### (-?[0-9.,]+)"), number("-?[0-9]+");
    EXPECT_EQ(extract_answer("so 3 + 4 = 7\n#### 7\n", &gsm), "7");
    EXPECT_EQ(extract_answer("#### 1\nor rather\n#### -12.5", &gsm), "-12.5"); // the last match
    EXPECT_EQ(extract_answer("twelve, then 40 and 41 ", &number), "41");      // no group: the whole match
    EXPECT_EQ(extract_answer("no digits", &number), "");
    EXPECT_EQ(extract_answer("  \n Paris. \n", nullptr), "Paris.");
}

// A model whose vocabulary is the test tokenizer's, so any id it generates decodes.
std::unique_ptr<InferModel> model_for_tokenizer() {
    ZayaConfig c = config_preset("tiny");
    c.vocab_size = test::small_tokenizer().vocab_size();
    Model m = Model::create(c);
    model_init_random(m, 9);
    return InferModel::from_model(std::move(m), DType::F32);
}

GenerationEvalResult run(const std::vector<GenerationItem> &items, const GenerationEvalOptions &o,
                         Communicator &comm) {
    Engine e(model_for_tokenizer(), test::small_tokenizer(), EngineOptions{.max_batch = 3});
    return evaluate_generation(e, items, o, comm);
}

TEST(GenerationEval, ExactMatchOfGreedyCompletions) {
    GenerationEvalOptions o;
    o.sample.temperature = 0;
    o.sample.max_new_tokens = 6;
    const std::vector<std::string> prompts = {"the quick brown", "jumps over the", "STOP here", "the lazy dog 1",
                                              "fox 7"};
    // What each prompt completes to alone (the engine of one sequence).
    std::vector<GenerationItem> items;
    {
        Engine alone(model_for_tokenizer(), test::small_tokenizer(), EngineOptions{.max_batch = 1});
        SampleOptions so = o.sample;
        so.stop_tokens = alone.default_stop_tokens();
        for (const std::string &p : prompts) {
            std::vector<int32_t> ids = test::small_tokenizer().encode(p);
            ids.insert(ids.begin(), int32_t(alone.model().config.bos_token_id));
            items.push_back({p, generate_one(alone, ids, so).text});
        }
    }
    items[1].answer += " and more"; // wrong
    items[3].answer = "  " + items[3].answer + "\n"; // right: both sides are trimmed
    SingleProcess one;
    const GenerationEvalResult r = run(items, o, one);
    EXPECT_EQ(r.items, 5);
    EXPECT_EQ(r.right, 4);
    EXPECT_DOUBLE_EQ(r.exact_match, 0.8);
    EXPECT_NEAR(r.exact_match_stderr, std::sqrt(0.8 * 0.2 / 4), 1e-12);
    EXPECT_EQ(r.correct, (std::vector<bool>{true, false, true, true, true}));
    EXPECT_GT(r.tokens, 0);
    for (const std::string &c : r.completions) EXPECT_FALSE(c.empty()); // something to match
    // Two ranks (threads) take alternate items and count the same.
    const std::vector<GenerationEvalResult> got =
        test::on_thread_ranks(2, [&](Communicator &rank) { return run(items, o, rank); });
    for (const GenerationEvalResult &g : got) {
        EXPECT_EQ(g.items, 5);
        EXPECT_EQ(g.right, 4);
        EXPECT_EQ(g.tokens, r.tokens);
    }
    EXPECT_EQ(got[1].item, (std::vector<size_t>{1, 3}));
    EXPECT_EQ(got[1].completions[1], r.completions[3]);
    o.answer_regex = "([0-9]+";
    EXPECT_NE(test::error_of([&] { run(items, o, one); }).find("--answer-regex '([0-9]+'"), std::string::npos);
}

// A thinking model's answer is taken from what follows its reasoning. (The markers here are texts the small model
// writes (line breaks banned, which it would write alone in a chat): the chat prompt's tail "model\n" opens the
// "reasoning", and three characters of the first greedy completion close it.)
TEST(GenerationEval, AnswersAfterTheReasoning) {
    GenerationEvalOptions o;
    o.sample.temperature = 0;
    o.sample.max_new_tokens = 12;
    o.chat = true;
    for (const int32_t id : test::small_tokenizer().encode("\n")) o.sample.logit_bias.push_back({id, -100.0f});
    std::vector<GenerationItem> items = {{"the quick brown", ""}, {"jumps over the", ""}};
    SingleProcess one;
    const GenerationEvalResult plain = run(items, o, one);
    ASSERT_GE(plain.completions[0].size(), 8u);
    const std::string close = plain.completions[0].substr(3, 3);
    o.reasoning = ReasoningTags{"model", close};
    for (size_t k = 0; k < items.size(); ++k) // right: what follows the reasoning, as split_reasoning reads it
        items[k].answer = split_reasoning(plain.completions[k], *o.reasoning, /*starts_in_reasoning=*/true).content;
    items[1].answer += " and more"; // wrong
    const GenerationEvalResult r = run(items, o, one);
    EXPECT_EQ(r.completions, plain.completions); // (the same completions, another reading)
    EXPECT_EQ(r.correct, (std::vector<bool>{true, false}));
    EXPECT_NE(r.extracted[0], plain.extracted[0]);
    o.chat = false; // reasoning is read in chats only
    GenerationEvalOptions without = o;
    without.reasoning.reset();
    EXPECT_EQ(run(items, o, one).extracted[0], run(items, without, one).extracted[0]);
}

TEST(GenerationEval, LoaderNamesFileLineAndField) {
    test::TempDir dir;
    std::ofstream(dir.str("ok.jsonl")) << R"({"prompt": "2 + 3 =", "answer": 5})" << "\n"
                                       << R"({"prompt": "Capital of France?", "answer": "Paris"})" << "\n";
    const auto items = load_generation_items(dir.str("ok.jsonl"));
    ASSERT_EQ(items.size(), 2u);
    EXPECT_EQ(items[0].answer, "5");
    EXPECT_EQ(items[1].prompt, "Capital of France?");
    std::ofstream(dir.str("bad.jsonl")) << R"({"prompt": "x"})" << "\n";
    EXPECT_NE(test::error_of([&] { load_generation_items(dir.str("bad.jsonl")); }).find("bad.jsonl:1: no 'answer'"),
              std::string::npos);
    std::ofstream(dir.str("empty.jsonl")) << R"({"prompt": "", "answer": "a"})" << "\n";
    EXPECT_NE(test::error_of([&] { load_generation_items(dir.str("empty.jsonl")); }).find("'prompt'"),
              std::string::npos);
}

} // namespace
} // namespace zaya
