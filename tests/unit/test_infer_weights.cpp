// InferModel storage: random bf16 models saved in shards load back (memory-mapped, via the index) to the same
// weights and the same logits; load errors name the file and tensor.
#include "infer/decoder.h"
#include "infer/engine.h"
#include "test_helpers.h"

#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace zaya {
namespace {

std::vector<float> logits_of(const InferModel &m, const std::vector<int32_t> &tokens) {
    Decoder dec(m, 16, 1);
    SequenceCache s = dec.new_sequence();
    std::vector<float> out(size_t(m.config.vocab_size));
    dec.prefill(s, tokens, out.data());
    return out;
}

TEST(InferWeights, ShardedSaveLoadsBackIdentically) {
    test::TempDir dir;
    auto m = InferModel::random(config_preset("tiny"), DType::BF16, 7);
    m->save(dir.str("m"), 40'000); // tiny's bf16 matrices are ~0.2 MB: several shards
    EXPECT_TRUE(std::filesystem::exists(dir.str("m/model.safetensors.index.json")));
    int shards = 0;
    for (const auto &e : std::filesystem::directory_iterator(dir.str("m")))
        shards += e.path().extension() == ".safetensors";
    EXPECT_GE(shards, 3);
    auto loaded = InferModel::load(dir.str("m"));
    EXPECT_EQ(loaded->weight_dtype, DType::BF16);
    EXPECT_EQ(loaded->matrix_bytes(), m->matrix_bytes());
    const std::vector<int32_t> tokens = {5, 17, 3, 200, 9};
    const auto a = logits_of(*m, tokens), b = logits_of(*loaded, tokens);
    EXPECT_EQ(a, b); // the same bits, computed the same way
}

TEST(InferWeights, LoadErrorsNameTheTensor) {
    test::TempDir dir;
    auto m = InferModel::random(config_preset("tiny"), DType::BF16, 7);
    m->save(dir.str("m"), size_t(1) << 30);
    // A config that implies other shapes than the file holds.
    std::ifstream in(dir.str("m/config.json"));
    std::string cfg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    const auto at = cfg.find("\"moe_intermediate_size\": 96");
    ASSERT_NE(at, std::string::npos) << cfg;
    cfg.replace(at, 27, "\"moe_intermediate_size\": 64");
    std::ofstream(dir.str("m/config.json")) << cfg;
    const std::string err = test::error_of([&] { InferModel::load(dir.str("m")); });
    EXPECT_NE(err.find("experts.gate_up_proj"), std::string::npos) << err;
    EXPECT_NE(err.find("shape"), std::string::npos) << err;
}

// Every end-of-sequence id a Hugging Face directory names stops generation by default: config.json's list (of which
// ZayaConfig keeps the first) and generation_config.json's, as transformers' generate stops at any of them.
TEST(InferWeights, EosIdsOfConfigAndGenerationConfigAreStopTokens) {
    test::TempDir dir;
    InferModel::random(config_preset("tiny"), DType::BF16, 7)->save(dir.str("m"), size_t(1) << 30);
    nlohmann::json cfg;
    std::ifstream(dir.str("m/config.json")) >> cfg;
    cfg["eos_token_id"] = {3, 9};
    std::ofstream(dir.str("m/config.json")) << cfg.dump();
    std::ofstream(dir.str("m/generation_config.json")) << R"({"eos_token_id": [9, 106], "bos_token_id": 2})";
    auto m = InferModel::load(dir.str("m"));
    EXPECT_EQ(m->config.eos_token_id, 3);
    EXPECT_EQ(m->eos_token_ids, (std::vector<int64_t>{3, 9, 106}));
    const Engine engine(std::move(m), std::nullopt);
    EXPECT_EQ(engine.default_stop_tokens(), (std::vector<int32_t>{3, 9, 106}));

    std::ofstream(dir.str("m/generation_config.json")) << R"({"eos_token_id": "</s>"})";
    try {
        InferModel::load(dir.str("m"));
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        const std::string err = e.what();
        EXPECT_NE(err.find("generation_config.json: field 'eos_token_id' must be a token id"), std::string::npos)
            << err;
    }
}

} // namespace
} // namespace zaya
