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

// The cached logits of a golden case's sequences, fed in chunks of chunk_sizes (cycled), with the linears' rows in
// `precision`, and the golden rows they go with: [Σ T, V] each.
struct CachedAndGolden {
    std::vector<float> logits, golden;
    int64_t V = 0;
};
CachedAndGolden cached_and_golden(const std::string &name, const std::vector<int64_t> &chunk_sizes,
                                  cpu::MatmulPrecision precision, const std::string &golden_file) {
    const std::string dir = test::golden_dir(name);
    auto tokens = read_json(dir + "/meta.json").at("tokens").get<std::vector<std::vector<int32_t>>>();
    auto im = InferModel::load(dir);
    CachedAndGolden r;
    r.V = im->config.vocab_size;
    r.golden = test::read_tensor(dir + "/" + golden_file, "logits");
    Decoder dec(*im, 8, 1, DType::F32, precision);
    for (const auto &seq : tokens) {
        const auto l = test::cached_logits(dec, seq, chunk_sizes);
        r.logits.insert(r.logits.end(), l.begin(), l.end());
    }
    EXPECT_EQ(r.logits.size(), r.golden.size()) << name << " " << golden_file;
    return r;
}

// Every row within 1e-4 of transformers' (tools/gen_goldens.py).
void expect_cached_logits_match(const std::string &name, std::vector<int64_t> chunk_sizes) {
    SCOPED_TRACE(name);
    const CachedAndGolden r = cached_and_golden(name, chunk_sizes, cpu::MatmulPrecision::F32, "golden.safetensors");
    EXPECT_LE(test::max_abs_diff(r.logits.data(), r.golden.data(), r.golden.size()), 1e-4f);
}

// The share of the rows fed with `precision` that reproduce transformers' bf16-row logits (bf16_inputs.safetensors)
// to within a tenth of how far the rounding moves that row (its distance from golden.safetensors, the fp32 rows'),
// or 1e-4 where that is less.
double share_rounded_as_reference(const std::string &name, const std::vector<int64_t> &chunk_sizes,
                                  cpu::MatmulPrecision precision) {
    const CachedAndGolden r = cached_and_golden(name, chunk_sizes, precision, "bf16_inputs.safetensors");
    const auto fp32_rows = test::read_tensor(test::golden_dir(name) + "/golden.safetensors", "logits");
    const size_t V = size_t(r.V), rows = r.golden.size() / V;
    size_t close = 0;
    for (size_t row = 0; row < rows; ++row) {
        const float d = test::max_abs_diff(r.logits.data() + row * V, r.golden.data() + row * V, V);
        const float moved = test::max_abs_diff(fp32_rows.data() + row * V, r.golden.data() + row * V, V);
        close += d <= std::max(1e-4f, 0.1f * moved);
    }
    return double(close) / double(rows);
}

// The cases whose matrices are bf16 (tools/gen_bf16_input_goldens.py CASES).
const char *const kBf16Cases[] = {"tiny_bf16", "variants", "skip_slot", "long"};

TEST(GenerateGolden, CachedLogitsMatchTransformers) {
    for (const char *name : {"tiny_f32", "tiny_bf16", "variants", "skip_slot", "long", "legacy"}) {
        expect_cached_logits_match(name, {1});
        expect_cached_logits_match(name, {3, 1, 5});
    }
}

// Rounding moves these logits by 0.03–0.07 from fp32 (tools/gen_bf16_input_goldens.py prints it). Not every row
// follows the reference to rounding error: where a value lies on a rounding boundary, fp32 sums that differ from the
// (float64) reference's by an ulp can send it the other way — on these tiny random models sometimes a router's
// choice with it — which moves that token's logits, and those attending to it, by up to as much as the rounding
// itself. How often depends on the build's summation orders: of `long`'s 150 rows, 95 % within a tenth of the
// rounding's effect at -O3 (AVX-512), 98 % in the portable -O0 build, 79 % in the native -O0 one. So the test asks
// for half of each case's rows, where the same rows in fp32 give none: it tells the precisions apart and finds a
// rounding done differently from transformers', not the last bits of a sum.
TEST(GenerateGolden, Bf16InputsMatchTransformersUnderTheSameRounding) {
    for (const char *name : kBf16Cases) {
        SCOPED_TRACE(name);
        EXPECT_GE(share_rounded_as_reference(name, {1}, cpu::MatmulPrecision::BF16), 0.5);
        EXPECT_GE(share_rounded_as_reference(name, {3, 1, 5}, cpu::MatmulPrecision::BF16), 0.5);
        EXPECT_EQ(share_rounded_as_reference(name, {1}, cpu::MatmulPrecision::F32), 0.0);
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
