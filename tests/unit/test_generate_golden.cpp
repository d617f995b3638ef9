// Cached decoding against the Hugging Face reference, on models loaded the way inference loads them (memory-mapped,
// bf16 matrices used as bf16): (1) feeding each golden sequence token by token and in chunks reproduces
// transformers' logits (tools/gen_goldens.py) to 1e-4, legacy names included; (2) greedy generation reproduces
// transformers' `generate` continuations (tools/gen_generate_goldens.py).
#include "decode_helpers.h"
#include "infer/engine.h"
#include "test_helpers.h"

#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zaya {
namespace {

nlohmann::json read_json(const std::string &path) {
    std::ifstream in(path);
    if (!in) ADD_FAILURE() << "cannot open " << path;
    return nlohmann::json::parse(in);
}

void expect_cached_logits_match(const std::string &name, std::vector<int64_t> chunk_sizes) {
    SCOPED_TRACE(name);
    const std::string dir = test::golden_dir(name);
    auto tokens = read_json(dir + "/meta.json").at("tokens").get<std::vector<std::vector<int32_t>>>();
    auto im = InferModel::load(dir);
    const int64_t V = im->config.vocab_size;
    const auto golden = test::read_tensor(dir + "/golden.safetensors", "logits");
    Decoder dec(*im, 8, 1);
    size_t row = 0;
    for (const auto &seq : tokens) {
        const auto logits = test::cached_logits(dec, seq, chunk_sizes);
        EXPECT_LE(test::max_abs_diff(logits.data(), golden.data() + row * size_t(V), logits.size()), 1e-4f);
        row += seq.size();
    }
    EXPECT_EQ(row * size_t(V), golden.size());
}

TEST(GenerateGolden, CachedLogitsMatchTransformers) {
    for (const char *name : {"tiny_f32", "tiny_bf16", "variants", "skip_slot", "long", "legacy"}) {
        expect_cached_logits_match(name, {1});
        expect_cached_logits_match(name, {3, 1, 5});
    }
}

TEST(GenerateGolden, LoadKeepsBf16MatricesInPlace) {
    auto im = InferModel::load(test::golden_dir("tiny_bf16"));
    EXPECT_EQ(im->weight_dtype, DType::BF16);
    EXPECT_EQ(im->layers[0].q_proj.dtype, DType::BF16);
    auto f32 = InferModel::load(test::golden_dir("tiny_f32"));
    EXPECT_EQ(f32->weight_dtype, DType::F32);
}

TEST(GenerateGolden, GreedyMatchesTransformersGenerate) {
    for (const char *name : {"tiny_f32", "tiny_bf16", "variants", "skip_slot", "long"}) {
        SCOPED_TRACE(name);
        const std::string dir = test::golden_dir(name);
        const auto g = read_json(dir + "/generate.json");
        const auto prompt = g.at("prompt").get<std::vector<int32_t>>();
        const auto expected = g.at("continuation").get<std::vector<int32_t>>();
        Engine engine(InferModel::load(dir), std::nullopt, EngineOptions{2, 4});
        SampleOptions o;
        o.temperature = 0;
        o.max_new_tokens = int64_t(expected.size());
        Completion c = generate_one(engine, prompt, o);
        EXPECT_EQ(c.tokens, expected);
        EXPECT_EQ(c.finish_reason, "length");
        EXPECT_EQ(c.prompt_tokens, int64_t(prompt.size()));
    }
}

} // namespace
} // namespace zaya
