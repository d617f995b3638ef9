// Cached decoding against the Hugging Face reference, on models loaded the way inference loads them (memory-mapped,
// bf16 matrices used as bf16): (1) feeding each golden sequence token by token and in chunks reproduces
// transformers' logits (tools/gen_goldens.py) to 1e-4, legacy names included; (2) greedy generation reproduces
// transformers' `generate` continuations (tools/gen_generate_goldens.py); (3) with the linears' rows rounded to bf16
// (--precision bf16, the default for a bf16 model), both against transformers under the same rounding
// (tools/gen_bf16_input_goldens.py).
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

// The golden file's logits, fed in chunks of chunk_sizes (cycled) with the linears' rows in `precision`: every row
// within 1e-4 — or, with min_close < 1, at least that share of the rows, and all within 0.05.
void expect_cached_logits_match(const std::string &name, std::vector<int64_t> chunk_sizes,
                                cpu::MatmulPrecision precision = cpu::MatmulPrecision::F32,
                                const std::string &golden_file = "golden.safetensors", double min_close = 1.0) {
    SCOPED_TRACE(name + " " + golden_file);
    const std::string dir = test::golden_dir(name);
    auto tokens = read_json(dir + "/meta.json").at("tokens").get<std::vector<std::vector<int32_t>>>();
    auto im = InferModel::load(dir);
    const int64_t V = im->config.vocab_size;
    const auto golden = test::read_tensor(dir + "/" + golden_file, "logits");
    Decoder dec(*im, 8, 1, DType::F32, precision);
    size_t row = 0, close = 0;
    float worst = 0;
    for (const auto &seq : tokens) {
        const auto logits = test::cached_logits(dec, seq, chunk_sizes);
        for (size_t r = 0; r < seq.size(); ++r, ++row) {
            const float d = test::max_abs_diff(logits.data() + r * size_t(V), golden.data() + row * size_t(V),
                                               size_t(V));
            close += d <= 1e-4f;
            worst = std::max(worst, d);
        }
    }
    EXPECT_EQ(row * size_t(V), golden.size());
    if (min_close >= 1.0) {
        EXPECT_LE(worst, 1e-4f);
    } else {
        EXPECT_GE(double(close), min_close * double(row)) << close << " of " << row << " rows within 1e-4";
        EXPECT_LE(worst, 0.1f);
    }
}

// The cases whose matrices are bf16 (tools/gen_bf16_input_goldens.py CASES).
const char *const kBf16Cases[] = {"tiny_bf16", "variants", "skip_slot", "long"};

TEST(GenerateGolden, CachedLogitsMatchTransformers) {
    for (const char *name : {"tiny_f32", "tiny_bf16", "variants", "skip_slot", "long", "legacy"}) {
        expect_cached_logits_match(name, {1});
        expect_cached_logits_match(name, {3, 1, 5});
    }
}

// Rounding moves these logits by 0.03–0.07 from fp32 (tools/gen_bf16_input_goldens.py prints it), so rows within 1e-4
// are rows rounded as the reference rounds them. Not all: where a value lies on a rounding boundary, fp32 sums that
// differ from the (float64) reference's by an ulp can send it the other way, which moves that token's later logits
// by up to ~0.02 — rare (a few of 150 rows of `long`), so 3/4 of the rows must match.
TEST(GenerateGolden, Bf16InputsMatchTransformersUnderTheSameRounding) {
    for (const char *name : kBf16Cases) {
        expect_cached_logits_match(name, {1}, cpu::MatmulPrecision::BF16, "bf16_inputs.safetensors", 0.75);
        expect_cached_logits_match(name, {3, 1, 5}, cpu::MatmulPrecision::BF16, "bf16_inputs.safetensors", 0.75);
        // The same rows in fp32 are nowhere near: the test tells the precisions apart.
        expect_cached_logits_match(name, {1}, cpu::MatmulPrecision::F32, "bf16_inputs.safetensors", 0.0);
    }
}

TEST(GenerateGolden, LoadKeepsBf16MatricesInPlace) {
    auto im = InferModel::load(test::golden_dir("tiny_bf16"));
    EXPECT_EQ(im->weight_dtype, DType::BF16);
    EXPECT_EQ(im->layers[0].q_proj.dtype, DType::BF16);
    auto f32 = InferModel::load(test::golden_dir("tiny_f32"));
    EXPECT_EQ(f32->weight_dtype, DType::F32);
}

// Greedy generation of `file`'s prompt through the Engine (batch 2, prompts fed 4 tokens per step) equals its
// continuation.
void expect_greedy_matches(const std::string &name, const std::string &file,
                           std::optional<cpu::MatmulPrecision> precision, std::optional<DType> kv_dtype = {}) {
    SCOPED_TRACE(name + " " + file);
    const std::string dir = test::golden_dir(name);
    const auto g = read_json(dir + "/" + file);
    const auto prompt = g.at("prompt").get<std::vector<int32_t>>();
    const auto expected = g.at("continuation").get<std::vector<int32_t>>();
    Engine engine(InferModel::load(dir), std::nullopt, EngineOptions{.max_batch = 2, .prefill_chunk = 4,
                                                                     .kv_dtype = kv_dtype, .precision = precision});
    SampleOptions o;
    o.temperature = 0;
    o.max_new_tokens = int64_t(expected.size());
    Completion c = generate_one(engine, prompt, o);
    EXPECT_EQ(c.tokens, expected);
    EXPECT_EQ(c.finish_reason, "length");
    EXPECT_EQ(c.prompt_tokens, int64_t(prompt.size()));
}

TEST(GenerateGolden, GreedyMatchesTransformersGenerate) {
    for (const char *name : {"tiny_f32", "tiny_bf16", "variants", "skip_slot", "long"})
        expect_greedy_matches(name, "generate.json", cpu::MatmulPrecision::F32);
}

// The engine's default for a bf16 model: its linears' rows in bf16, as transformers under the same rounding. With an
// fp32 cache, as the reference keeps: on these tiny random models the bf16 cache's rounding (each key and value once)
// moves logits by about as much again, and on top of the rows' it turns `variants`' first token (margin 0.09).
TEST(GenerateGolden, GreedyWithBf16InputsByDefaultMatchesTransformers) {
    for (const char *name : kBf16Cases)
        expect_greedy_matches(name, "generate_bf16_inputs.json", std::nullopt, DType::F32);
    expect_greedy_matches("tiny_f32", "generate.json", std::nullopt); // an fp32 model keeps fp32 rows
}

} // namespace
} // namespace zaya
