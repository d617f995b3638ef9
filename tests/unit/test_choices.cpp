// Multiple-choice scoring (zaya eval --choices): each choice's log-likelihood against the full forward's
// log-softmax, the same whatever the packing, contexts cut from the left, the accuracies, ranks sharing the items,
// and the items' loader.
#include "decode_helpers.h"
#include "model/init.h"
#include "test_helpers.h"
#include "thread_ranks.h"
#include "train/evaluate_choices.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <thread>

namespace zaya {
namespace {

TEST(Choices, SequenceSplitsWhereTheContextEnds) {
    const Tokenizer &tok = test::small_tokenizer();
    const ChoiceSequence s = choice_sequence(tok, 2, "the quick brown ", "fox jumps");
    EXPECT_EQ(s.tokens[0], 2);
    const auto whole = tok.encode("the quick brown fox jumps"), ctx = tok.encode("the quick brown");
    EXPECT_EQ(s.tokens.size(), whole.size() + 1);
    EXPECT_EQ(s.continuation, int64_t(whole.size() - ctx.size()));
    const std::vector<int32_t> cont(s.tokens.end() - s.continuation, s.tokens.end());
    EXPECT_EQ(tok.decode(cont), " fox jumps"); // the context's trailing space moved to the continuation
    EXPECT_EQ(choice_sequence(tok, -1, "the", " lazy").tokens[0], tok.encode("the lazy")[0]); // no BOS
}

// The reference: Σ log softmax(logits[t − 1])[tokens[t]] over the continuation, in double, from one full forward.
double reference_loglik(const Model &m, const ChoiceSequence &s) {
    const std::vector<float> logits = test::full_logits(m, {s.tokens.begin(), s.tokens.end() - 1});
    const int64_t V = m.config.vocab_size, T = int64_t(s.tokens.size());
    double sum = 0;
    for (int64_t t = T - s.continuation; t < T; ++t) {
        const float *row = logits.data() + (t - 1) * V;
        double mx = row[0], z = 0;
        for (int64_t v = 1; v < V; ++v) mx = std::max(mx, double(row[v]));
        for (int64_t v = 0; v < V; ++v) z += std::exp(double(row[v]) - mx);
        sum += double(row[s.tokens[size_t(t)]]) - mx - std::log(z);
    }
    return sum;
}

std::vector<ChoiceItem> test_items() {
    return {{"the quick brown", {" fox", " dog", " lazy quick", " brown 7"}, 0},
            {"the lazy dog 12 jumps over", {" the", " fox here", " STOP"}, 1},
            {"STOP here the quick brown fox 3 jumps over the lazy ", {"dog", "fox; STOP here"}, 1},
            {"1", {" jumps over the lazy dog", " 2"}, 0}};
}

ChoiceEvalResult score(const Model &m, const std::vector<ChoiceItem> &items, int64_t max_tokens, int64_t max_len,
                       Communicator &comm) {
    Activations acts = Activations::plan(m.config, max_tokens, 16, false);
    return evaluate_choices(m, test::small_tokenizer(), items, acts, max_tokens, 16, max_len, comm);
}

TEST(Choices, LogLikelihoodsEqualTheFullForward) {
    Model m = Model::create(config_preset("tiny"));
    model_init_random(m, 5);
    const Tokenizer &tok = test::small_tokenizer();
    std::vector<ChoiceItem> items = test_items();
    SingleProcess one;
    // All choices in one pass, and passes of at most 64 tokens (several, of one to a few choices each).
    const ChoiceEvalResult all = score(m, items, 1024, 1024, one), small = score(m, items, 64, 64, one);
    ASSERT_EQ(all.loglik.size(), items.size());
    EXPECT_EQ(all.items, 4);
    EXPECT_EQ(all.choices, 11);
    EXPECT_EQ(all.truncated, 0);
    EXPECT_EQ(small.truncated, 0);
    EXPECT_GT(small.tokens, 2 * 64); // three passes at least
    std::vector<size_t> best(items.size()), worst(items.size()), best_norm(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
        ASSERT_EQ(all.loglik[i].size(), items[i].choices.size());
        for (size_t c = 0; c < items[i].choices.size(); ++c) {
            const double ref = reference_loglik(m, choice_sequence(tok, int32_t(m.config.bos_token_id),
                                                                   items[i].context, items[i].choices[c]));
            EXPECT_NEAR(all.loglik[i][c], ref, 1e-4 * std::abs(ref)) << "item " << i << " choice " << c;
            EXPECT_NEAR(small.loglik[i][c], all.loglik[i][c], 1e-5 * std::abs(ref)) << "item " << i << " choice " << c;
            const auto norm = [&](size_t k) { return all.loglik[i][k] / double(items[i].choices[k].size()); };
            if (all.loglik[i][c] > all.loglik[i][best[i]]) best[i] = c;
            if (all.loglik[i][c] < all.loglik[i][worst[i]]) worst[i] = c;
            if (norm(c) > norm(best_norm[i])) best_norm[i] = c;
        }
    }
    // Accuracies: every answer the most likely choice, then every one the least likely, then per character.
    for (size_t i = 0; i < items.size(); ++i) items[i].answer = int64_t(best[i]);
    EXPECT_EQ(score(m, items, 1024, 1024, one).acc, 1.0);
    for (size_t i = 0; i < items.size(); ++i) items[i].answer = int64_t(worst[i]);
    const ChoiceEvalResult w = score(m, items, 1024, 1024, one);
    EXPECT_EQ(w.acc, 0.0);
    EXPECT_EQ(w.acc_stderr, 0.0);
    for (size_t i = 0; i < items.size(); ++i) items[i].answer = int64_t(best_norm[i]);
    const ChoiceEvalResult n = score(m, items, 1024, 1024, one);
    EXPECT_EQ(n.acc_norm, 1.0);
    EXPECT_NEAR(n.acc_stderr, std::sqrt(n.acc * (1 - n.acc) / 3), 1e-12);
}

TEST(Choices, LongContextsAreCutFromTheLeft) {
    Model m = Model::create(config_preset("tiny"));
    model_init_random(m, 5);
    const Tokenizer &tok = test::small_tokenizer();
    const std::vector<ChoiceItem> items = {{"the quick brown fox 3 jumps over the lazy dog; STOP here the lazy",
                                            {" dog", " fox 77"}, 0}};
    SingleProcess one;
    const ChoiceEvalResult r = score(m, items, 64, 6, one);
    EXPECT_EQ(r.truncated, 2);
    for (size_t c = 0; c < 2; ++c) {
        ChoiceSequence s = choice_sequence(tok, int32_t(m.config.bos_token_id), items[0].context, items[0].choices[c]);
        s.tokens.erase(s.tokens.begin(), s.tokens.end() - 7); // 6 inputs and the last target
        const double ref = reference_loglik(m, s);
        EXPECT_NEAR(r.loglik[0][c], ref, 1e-4 * std::abs(ref)) << "choice " << c;
    }
    EXPECT_NE(test::error_of([&] { score(m, items, 64, 2, one); }).find("more than the 2"), std::string::npos);
}

// Two ranks (threads) score alternate items and agree with one process on the counts.
TEST(Choices, RanksShareTheItems) {
    Model m = Model::create(config_preset("tiny"));
    model_init_random(m, 5);
    const std::vector<ChoiceItem> items = test_items();
    SingleProcess one;
    const ChoiceEvalResult alone = score(m, items, 1024, 1024, one);
    const std::vector<ChoiceEvalResult> got =
        test::on_thread_ranks(2, [&](Communicator &rank) { return score(m, items, 1024, 1024, rank); });
    for (const ChoiceEvalResult &g : got) {
        EXPECT_EQ(g.items, 4);
        EXPECT_EQ(g.choices, 11);
        EXPECT_EQ(g.acc, alone.acc);
        EXPECT_EQ(g.acc_norm, alone.acc_norm);
        EXPECT_EQ(g.tokens, alone.tokens);
    }
    ASSERT_EQ(got[1].loglik.size(), 2u); // items 1 and 3
    EXPECT_NEAR(got[1].loglik[1][0], alone.loglik[3][0], 1e-5 * std::abs(alone.loglik[3][0]));
}

TEST(Choices, LoaderNamesFileLineAndField) {
    test::TempDir dir;
    auto load = [&](const std::string &text) {
        std::ofstream(dir.str("items.jsonl")) << text;
        return test::error_of([&] { load_choice_items(dir.str("items.jsonl")); });
    };
    std::ofstream(dir.str("ok.jsonl")) << R"({"context": "a", "choices": ["b", "c"], "answer": 1})" << "\n\n"
                                       << R"({"context": "", "choices": ["x", "y", "z"], "answer": 0})" << "\n";
    const auto items = load_choice_items(dir.str("ok.jsonl"));
    ASSERT_EQ(items.size(), 2u);
    EXPECT_EQ(items[0].answer, 1);
    EXPECT_EQ(items[1].choices.size(), 3u);
    EXPECT_NE(load("{\"context\": \"a\", \"choices\": [\"b\", \"c\"]}\n").find("items.jsonl:1: no 'answer'"),
              std::string::npos);
    EXPECT_NE(load("\n{\"context\": \"a\", \"choices\": [\"b\"], \"answer\": 0}\n").find("items.jsonl:2: 'choices'"),
              std::string::npos);
    EXPECT_NE(load("{\"context\": \"a\", \"choices\": [\"b\", \"\"], \"answer\": 0}\n").find("non-empty"),
              std::string::npos);
    EXPECT_NE(load("{\"context\": \"a\", \"choices\": [\"b\", \"c\"], \"answer\": 2}\n").find("'answer'"),
              std::string::npos);
    EXPECT_NE(load("{\"context\": 1, \"choices\": [\"b\", \"c\"], \"answer\": 0}\n").find("'context'"),
              std::string::npos);
    EXPECT_NE(load("not json\n").find("items.jsonl:1: not a JSON object"), std::string::npos);
    EXPECT_NE(load("\n").find("no items"), std::string::npos);
}

} // namespace
} // namespace zaya
