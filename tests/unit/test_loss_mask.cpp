// Loss masks for fine-tuning data: `zaya prepare` of prompt/completion and chat records (only the answers are
// learned), the mask shards and manifest, the loader's −1 targets, and a training step's loss as the mean over the
// global batch's learned targets however they fall into micro-batches.
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/chat_template.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/tokenizer.h"
#include "model/activations.h"
#include "model/forward.h"
#include "model/init.h"
#include "test_helpers.h"
#include "train/trainer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace zaya;
using zaya::test::error_of;
using zaya::test::TempDir;

namespace {

void put_file(const fs::path &p, const std::string &text) {
    fs::create_directories(p.parent_path());
    std::ofstream f(p, std::ios::binary);
    f << text;
}

std::string json_line(const nlohmann::json &j) { return j.dump() + "\n"; }

struct Record {
    enum { Text, Completion, Chat } kind;
    std::string a, b; // text; prompt + completion; user + assistant
};

// Records of all three kinds, answers of varying length, so micro-batches hold unequal counts of learned targets.
std::vector<Record> records() {
    std::vector<Record> r;
    const char *animals[] = {"fox", "owl", "cat", "dog", "eel", "yak"};
    for (int i = 0; i < 24; ++i) {
        const std::string x = animals[i % 6];
        std::string answer = "The " + x + " is " + std::to_string(i * 7) + ".";
        for (int k = 0; k < i % 5; ++k) answer += " It runs far and sleeps long, " + std::to_string(k) + ".";
        const std::string question = "Question " + std::to_string(i) + ": where is the " + x + "?\n";
        if (i % 3 == 0) r.push_back({Record::Completion, question, answer});
        else if (i % 3 == 1) r.push_back({Record::Chat, "Tell me about the " + x + ".", answer});
        else r.push_back({Record::Text, "A note on the " + x + ". " + answer, ""});
    }
    return r;
}

std::string jsonl(const std::vector<Record> &rs) {
    std::string s;
    for (const auto &r : rs) {
        if (r.kind == Record::Text) s += json_line({{"text", r.a}});
        else if (r.kind == Record::Completion) s += json_line({{"prompt", r.a}, {"completion", r.b}});
        else
            s += json_line({{"messages", {{{"role", "system"}, {"content", "Be kind."}},
                                          {{"role", "user"}, {"content", r.a}},
                                          {{"role", "assistant"}, {"content", r.b}}}}});
    }
    return s;
}

// `zaya prepare` of one JSONL file into DIR/data: no validation split, a trained tokenizer.
std::shared_ptr<const DataSet> prepare_jsonl(const TempDir &dir, const std::string &file, const std::string &text,
                                             int vocab) {
    put_file(dir.path / file, text);
    PrepareOptions o;
    o.inputs = {dir.str(file)};
    o.out_dir = dir.str("data");
    o.vocab_size = vocab;
    o.val_percent = 0;
    o.progress = false;
    prepare_data(o);
    return DataSet::open(dir.str("data"));
}

struct MaskedData {
    TempDir tmp;
    std::vector<Record> recs = records();
    std::shared_ptr<const DataSet> data = prepare_jsonl(tmp, "sft.jsonl", jsonl(recs), 400);
    TrainConfig train_config(int64_t batch, int64_t seq) const {
        TrainConfig tc;
        tc.data = tmp.str("data");
        tc.out = tmp.str("run");
        tc.model = "tiny";
        tc.steps = 4;
        tc.batch = batch;
        tc.seq = seq;
        tc.warmup = 1;
        return tc;
    }
    ZayaConfig model_config() const {
        ZayaConfig c = config_preset("tiny");
        c.vocab_size = int64_t(data->manifest().vocab_size);
        return c;
    }
    Trainer trainer(const TrainConfig &tc, uint64_t seed) const {
        Model m = Model::create(model_config());
        model_init_random(m, seed);
        return Trainer(tc, std::move(m), data);
    }
};

// The whole train stream: tokens and their flags.
void read_stream(const TokenSplit &s, std::vector<int32_t> &tokens, std::vector<int32_t> &flags) {
    for (size_t i = 0; i < s.shards.size(); ++i) {
        const size_t at = tokens.size(), n = size_t(s.shards[i]->size());
        tokens.resize(at + n);
        flags.resize(at + n);
        s.shards[i]->copy(0, n, tokens.data() + at);
        s.masks[i]->copy(0, n, flags.data() + at);
    }
}

} // namespace

TEST(LossMask, PrepareLearnsOnlyTheAnswers) {
    MaskedData d;
    const DataManifest &m = d.data->manifest();
    ASSERT_TRUE(m.loss_mask);
    EXPECT_EQ(nlohmann::json::parse(read_file_bytes(d.tmp.str("data/data.json")))["version"], 2);
    ASSERT_EQ(d.data->train().masks.size(), d.data->train().shards.size());
    const Tokenizer tok = Tokenizer::load(d.data->tokenizer_path());
    std::vector<int32_t> tokens, flags;
    read_stream(d.data->train(), tokens, flags);

    size_t at = 0;
    for (const Record &r : d.recs) { // one document per record, in file order (no validation split), each ending in EOS
        size_t end = at;
        while (end < tokens.size() && tokens[end] != m.eos_id) ++end;
        ASSERT_LT(end, tokens.size());
        std::vector<int32_t> learned;
        for (size_t i = at; i < end; ++i)
            if (flags[i]) learned.push_back(tokens[i]);
        const std::vector<int32_t> body(tokens.begin() + long(at), tokens.begin() + long(end));
        if (r.kind == Record::Text) {
            EXPECT_EQ(tok.decode(body), r.a);
            EXPECT_EQ(learned, body);
            EXPECT_EQ(flags[end], 1);
        } else if (r.kind == Record::Completion) { // BOS, the prompt (not learned), the completion and EOS (learned)
            EXPECT_EQ(body[0], m.bos_id);
            EXPECT_EQ(tok.decode(learned), r.b);
            EXPECT_EQ(tok.decode(std::vector<int32_t>(body.begin() + 1, body.end())), r.a + r.b);
            EXPECT_EQ(flags[end], 1);
        } else { // the assistant's words and the marker ending its turn (plain text here: a trained tokenizer)
            EXPECT_EQ(body[0], m.bos_id);
            EXPECT_EQ(tok.decode(learned), r.b + "<end_of_turn>");
            EXPECT_EQ(flags[end], 0);
            // What is learned follows exactly the prompt the server builds for the conversation so far.
            const std::vector<int32_t> prompt = chat_prompt(tok, {{"system", "Be kind."}, {"user", r.a}}, m.bos_id);
            ASSERT_LT(prompt.size(), body.size());
            EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), body.begin()));
            EXPECT_EQ(flags[at + prompt.size() - 1], 0);
            EXPECT_EQ(flags[at + prompt.size()], 1);
        }
        at = end + 1;
    }
    EXPECT_EQ(at, tokens.size());
}

TEST(LossMask, PlainTextStaysVersionOneWithoutMasks) {
    TempDir tmp;
    prepare_jsonl(tmp, "t.jsonl", json_line({{"text", "just some text to learn from"}}), 300);
    const auto j = nlohmann::json::parse(read_file_bytes(tmp.str("data/data.json")));
    EXPECT_EQ(j["version"], 1);
    EXPECT_FALSE(j["train"].contains("masks"));
    EXPECT_TRUE(DataSet::open(tmp.str("data"))->train().masks.empty());
    TrainLoader l(DataSet::open(tmp.str("data")), 4, 1);
    const TokenBatch b = l.next_batch(1);
    EXPECT_TRUE(b.learned.empty());
    EXPECT_EQ(b.learned_targets(), 4);
}

TEST(LossMask, RecordErrorsNameFileAndLine) {
    TempDir d;
    PrepareOptions o;
    o.out_dir = d.str("o");
    o.progress = false;
    auto err = [&](const std::string &line) {
        put_file(d.path / "r.jsonl", json_line({{"text", "fine"}}) + line + "\n");
        o.inputs = {d.str("r.jsonl")};
        return error_of([&] { prepare_data(o); });
    };
    EXPECT_NE(err(R"({"text": "a", "prompt": "b", "completion": "c"})").find("r.jsonl:2: expected exactly one of"),
              std::string::npos);
    EXPECT_NE(err(R"({"prompt": "b"})").find("r.jsonl:2: no \"completion\" field"), std::string::npos);
    // Chats are read as the server reads a request's messages: the same refusals, naming the place.
    EXPECT_NE(err(R"({"messages": {"role": "user"}})").find("r.jsonl:2: 'messages' must be a non-empty array"),
              std::string::npos);
    EXPECT_NE(err(R"({"messages": [{"role": "robot", "content": "x"}]})")
                  .find("r.jsonl:2: messages[0]: unsupported role 'robot'"),
              std::string::npos);
    EXPECT_NE(err(R"({"messages": [{"role": "user", "content": "x"}, {"role": "system", "content": "y"}]})")
                  .find("r.jsonl:2: messages[1]: a system message may only come first"),
              std::string::npos);
    EXPECT_NE(err(R"({"messages": [{"role": "user"}]})")
                  .find("r.jsonl:2: messages[0].content must be a string or an array of text parts"),
              std::string::npos);
    EXPECT_NE(err(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": )"
                  R"({"name": "a b"}}]})")
                  .find("r.jsonl:2: 'tools[0].function.name' must be 1 to 64 letters"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(d.path / "o" / "data.json"));
}

TEST(LossMask, DataSetRefusesMasksThatDoNotFit) {
    MaskedData d;
    const std::string manifest = d.tmp.str("data/data.json");
    const std::string good = read_file_bytes(manifest);
    auto j = nlohmann::json::parse(good);
    j["version"] = 1; // masks promised by a version-1 manifest
    put_file(manifest, j.dump());
    EXPECT_NE(error_of([&] { DataSet::open(d.tmp.str("data")); }).find("\"loss_mask\" true does not fit version 1"),
              std::string::npos);
    j = nlohmann::json::parse(good);
    j["train"]["masks"] = nlohmann::json::array();
    put_file(manifest, j.dump());
    EXPECT_NE(error_of([&] { DataSet::open(d.tmp.str("data")); }).find("0 \"masks\" for 1 \"shards\""),
              std::string::npos);
    put_file(manifest, good);
    const std::string mask = d.tmp.str("data/train_000000.mask");
    const uint64_t n = d.data->train().shards[0]->size();
    shard_write(mask, std::vector<int32_t>(size_t(n) - 1, 1), 2); // one flag short (and u16: not a mask either)
    EXPECT_NE(error_of([&] { DataSet::open(d.tmp.str("data")); }).find("not a loss mask"), std::string::npos);
    {
        ShardWriter w(mask, 2, TokenDType::U8);
        const std::vector<int32_t> ones(size_t(n) - 1, 1);
        w.append(ones.data(), ones.size());
        w.finish();
    }
    EXPECT_NE(error_of([&] { DataSet::open(d.tmp.str("data")); })
                  .find(fmt::format("{} flags for the {} tokens", n - 1, n)),
              std::string::npos);
}

TEST(LossMask, LoaderTargetsOfPromptsAreMinusOne) {
    MaskedData d;
    TrainLoader l(d.data, 32, 5);
    int64_t learned = 0, skipped = 0;
    for (int k = 0; k < 4; ++k) {
        const TokenBatch b = l.next_batch(2);
        ASSERT_EQ(b.learned.size(), b.tokens.size());
        const std::vector<int32_t> t = b.targets();
        for (int64_t i = 0; i < b.sequences; ++i)
            for (int64_t p = 0; p < b.seq_len; ++p) {
                const size_t src = size_t(i * (b.seq_len + 1) + 1 + p), dst = size_t(i * b.seq_len + p);
                EXPECT_EQ(t[dst], b.learned[src] ? b.tokens[src] : -1);
                (t[dst] >= 0 ? learned : skipped) += 1;
            }
        int64_t n = 0;
        for (int32_t x : t) n += x >= 0;
        EXPECT_EQ(b.learned_targets(), n);
    }
    EXPECT_GT(learned, 0);
    EXPECT_GT(skipped, 0);
}

TEST(LossMask, StepLossIsTheMeanOverTheGlobalBatchsLearnedTargets) {
    MaskedData d;
    const TrainConfig tc = d.train_config(4, 32);
    const ZayaConfig c = d.model_config();
    auto trainer = [&](int64_t micro) {
        TrainConfig t = tc;
        t.micro_batch = micro;
        return d.trainer(t, 11);
    };
    // The same four sequences, found until the two halves hold unequal counts of learned targets.
    TrainLoader loader(d.data, tc.seq, 3);
    TokenBatch all;
    auto half = [&](int64_t from) {
        TokenBatch h;
        h.resize(2, tc.seq, true);
        std::copy_n(all.tokens.begin() + from * (tc.seq + 1), h.tokens.size(), h.tokens.begin());
        std::copy_n(all.learned.begin() + from * (tc.seq + 1), h.learned.size(), h.learned.begin());
        return h;
    };
    do all = loader.next_batch(4);
    while (half(0).learned_targets() == half(2).learned_targets());

    // Independently: the mean loss over the four sequences' learned targets, in one forward pass.
    Model ref = Model::create(c);
    model_init_random(ref, 11);
    Activations acts = Activations::plan(c, 4 * tc.seq, 4, false);
    const std::vector<int32_t> targets = all.targets();
    const ForwardResult f = model_forward(ref, all.inputs(), acts, targets.data());
    ASSERT_EQ(f.loss_tokens, all.learned_targets());
    // What the halves' plain mean would give instead: the test tells the two apart.
    const ForwardResult f0 = model_forward(ref, half(0).inputs(), acts, half(0).targets().data());
    const double l0 = f0.loss;
    const ForwardResult f1 = model_forward(ref, half(2).inputs(), acts, half(2).targets().data());
    ASSERT_GT(std::abs((l0 + f1.loss) / 2 - f.loss), 1e-4);

    Trainer two = trainer(2), one = trainer(4);
    int64_t served = 0;
    const StepResult r2 = two.step_on([&](int64_t rows) {
        EXPECT_EQ(rows, 2);
        return half(2 * served++);
    });
    const StepResult r1 = one.step_on([&](int64_t rows) {
        EXPECT_EQ(rows, 4);
        return all;
    });
    EXPECT_NEAR(r2.loss, f.loss, 1e-6 * f.loss);
    EXPECT_NEAR(r1.loss, f.loss, 1e-6 * f.loss);
    EXPECT_NEAR(r2.grad_norm, r1.grad_norm, 1e-5 * r1.grad_norm);
    // The gradients, too (not the updated weights: Adam's first step moves a weight by ±lr for a gradient of any
    // size, and gradients that are 0 up to rounding differ in sign between the two summation orders).
    const size_t n = two.model().params.size;
    float gmax = 0;
    for (size_t i = 0; i < n; ++i) gmax = std::max(gmax, std::abs(one.host_gradients()[i]));
    EXPECT_LT(test::max_abs_diff(two.host_gradients(), one.host_gradients(), n), 1e-5f * gmax);
}

TEST(LossMask, AStepWithNoLearnedTargetUpdatesNothing) {
    MaskedData d;
    const TrainConfig tc = d.train_config(2, 16);
    Trainer t = d.trainer(tc, 2);
    const std::vector<real> before(t.model().params.data(), t.model().params.data() + t.model().params.size);
    TrainLoader loader(d.data, tc.seq, 1);
    const StepResult r = t.step_on([&](int64_t rows) {
        TokenBatch b = loader.next_batch(rows);
        std::fill(b.learned.begin(), b.learned.end(), 0); // all prompt
        return b;
    });
    EXPECT_EQ(r.learned, 0);
    EXPECT_TRUE(r.skipped);
    EXPECT_EQ(r.verdict, StepVerdict::NoTargets);
    EXPECT_EQ(t.guard().consecutive_skips(), 0); // not the guard's: no rollback follows
    EXPECT_EQ(test::max_abs_diff(before.data(), t.model().params.data(), before.size()), 0.0f);
}
