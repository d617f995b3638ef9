// Cached decoding (src/infer) computes what the full-sequence forward computes: logits of every position agree to
// 1e-4 whether a sequence is fed whole, in prefill chunks, token by token, or batched with other sequences; with
// bf16 weights it agrees with the forward of the same bf16-rounded weights.
#include "core/error.h"
#include "decode_helpers.h"
#include "infer/decoder.h"
#include "ops/cpu/linear_i8.h"
#include "model/forward.h"
#include "core/rng.h"
#include "model/init.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace zaya {
namespace {

using test::decode_config;
using test::perturbed_model;
using test::random_tokens;

float max_abs(const std::vector<float> &x) {
    float m = 0;
    for (float v : x) m = std::max(m, std::fabs(v));
    return m;
}

// Where a linear rounds its rows (int8, bf16), two summation orders can send a value on a rounding boundary opposite
// ways, moving its position and those attending to it by as much as the rounding moves logits. So, against `whole`
// (tokens fed at once), the logits fed in chunks of 12, one by one, and 2 then 5: most positions within 1e-4 of
// `scale`, every one within 2e-2 of it; a misplaced row, a wrong scale or a stale cache breaks every position after.
void expect_same_however_fed_up_to_rounding(Decoder &dec, const std::vector<int32_t> &tokens,
                                            const std::vector<float> &whole, float scale) {
    const int64_t V = dec.model().config.vocab_size, T = int64_t(tokens.size());
    for (std::vector<int64_t> sizes : {std::vector<int64_t>{12}, {1}, {2, 5}}) {
        const auto got = test::cached_logits(dec, tokens, sizes);
        int64_t apart = 0; // positions beyond 1e-4
        float worst = 0;
        for (int64_t t = 0; t < T; ++t) {
            const float d = test::max_abs_diff(got.data() + t * V, whole.data() + t * V, size_t(V));
            worst = std::max(worst, d);
            apart += d >= 1e-4f * scale;
        }
        EXPECT_LT(worst, 2e-2f * scale) << "chunks " << sizes[0];
        EXPECT_LE(apart, T / 4) << "chunks " << sizes[0];
    }
}

TEST(Decoder, ChunkedAndTokenByTokenMatchFullForward) {
    for (bool passthrough : {false, true}) {
        Model m = perturbed_model(decode_config(passthrough), 11);
        const auto tokens = random_tokens(29, m.config.vocab_size, 3);
        const auto ref = test::full_logits(m, tokens);
        auto im = InferModel::from_model(std::move(m), DType::F32);
        Decoder dec(*im, 16, 4);
        for (std::vector<int64_t> sizes : {std::vector<int64_t>{16}, {1}, {3, 1, 7, 2}, {1, 1, 5}}) {
            const auto got = test::cached_logits(dec, tokens, sizes);
            EXPECT_LT(test::max_abs_diff(got.data(), ref.data(), ref.size()), 1e-4f)
                << "chunks " << sizes[0] << "…, passthrough " << passthrough;
        }
    }
}

TEST(Decoder, BatchedSequencesMatchEachAlone) {
    Model m = perturbed_model(decode_config(), 5);
    const int64_t V = m.config.vocab_size;
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(9, V, 1), random_tokens(2, V, 2),
                                                       random_tokens(14, V, 3)};
    std::vector<std::vector<float>> ref;
    for (const auto &p : prompts) ref.push_back(test::full_logits(m, p));
    auto im = InferModel::from_model(std::move(m), DType::F32);
    Decoder dec(*im, 32, 3);
    std::vector<SequenceCache> seqs;
    for (size_t s = 0; s < prompts.size(); ++s) seqs.push_back(dec.new_sequence());
    // Step: every unfinished sequence advances by up to `step` tokens in one call.
    for (int64_t step : {4, 1, 1, 3, 1, 1, 1, 1, 1, 1}) {
        std::vector<SequenceCache *> ptrs;
        std::vector<std::span<const int32_t>> chunks;
        std::vector<size_t> which;
        for (size_t s = 0; s < prompts.size(); ++s) {
            const int64_t at = seqs[s].length, left = int64_t(prompts[s].size()) - at;
            if (left <= 0) continue;
            ptrs.push_back(&seqs[s]);
            chunks.emplace_back(prompts[s].data() + at, size_t(std::min(step, left)));
            which.push_back(s);
        }
        if (ptrs.empty()) break;
        std::vector<float> logits(ptrs.size() * size_t(V));
        dec.forward(ptrs, chunks, logits.data());
        for (size_t i = 0; i < ptrs.size(); ++i) {
            const int64_t last = ptrs[i]->length - 1; // each sequence's last fed position
            EXPECT_LT(test::max_abs_diff(logits.data() + i * size_t(V), ref[which[i]].data() + last * V, size_t(V)),
                      1e-4f)
                << "sequence " << which[i] << " position " << last;
        }
    }
    for (size_t s = 0; s < prompts.size(); ++s) EXPECT_EQ(seqs[s].length, int64_t(prompts[s].size()));
}

TEST(Decoder, Bf16WeightsMatchForwardOfRoundedWeights) {
    Model m = perturbed_model(decode_config(), 9);
    // The reference: the same model with every matrix rounded to bf16 (vectors stay fp32, as InferModel keeps them).
    Model rounded = Model::create(m.config);
    std::copy_n(m.params.data(), m.layout.total, rounded.params.data());
    for (const ParamView &v : rounded.layout.views)
        if (is_matrix_param(v.name))
            for (size_t i = 0; i < v.numel; ++i) {
                real &x = rounded.params.data()[v.offset + i];
                x = bf16_to_f32(f32_to_bf16(x));
            }
    const auto tokens = random_tokens(21, m.config.vocab_size, 4);
    const auto ref = test::full_logits(rounded, tokens);
    auto im = InferModel::from_model(std::move(m), DType::BF16);
    EXPECT_EQ(im->weight_dtype, DType::BF16);
    // 12 rows exercise the panel (GEMM) path, single tokens the streaming dot kernel.
    Decoder dec(*im, 12, 1);
    for (std::vector<int64_t> sizes : {std::vector<int64_t>{12}, {1}, {2, 5}}) {
        const auto got = test::cached_logits(dec, tokens, sizes);
        EXPECT_LT(test::max_abs_diff(got.data(), ref.data(), ref.size()), 1e-4f) << "chunks " << sizes[0];
    }
}

// --quantize int8: every matrix (the tied embedding / LM head and each expert included) becomes int8 with its group
// scales, and each linear's input rows are quantized alike (ops/cpu/linear_i8.h). Both linear paths compute the same
// products, so prompts fed whole (70 rows: panels), in chunks or token by token give the same logits; they stay
// near the fp32 forward of the dequantized weights, moved by the activations' quantization. "The same" up to the
// summation order: an activation that lands on a rounding boundary can round the other way in one path, moving its
// position and the positions that attend to it (the sliding window, the CCA conv) by as much as quantization moves
// them. So most positions must agree to 1e-4 and every one within the quantization's bound; a misplaced row, a
// wrong scale or a stale cache breaks every position after it.
TEST(Decoder, Int8WeightsAndActivationsTrackForwardOfDequantizedWeights) {
    Model m = perturbed_model(decode_config(), 9);
    Model dequantized = Model::create(m.config);
    std::copy_n(m.params.data(), m.layout.total, dequantized.params.data());
    for (const ParamView &v : dequantized.layout.views) {
        if (!is_matrix_param(v.name)) continue;
        const int64_t cols = v.shape.back(), rows = int64_t(v.numel) / cols, G = cpu::i8_groups(cols);
        std::vector<int8_t> q(v.numel);
        std::vector<float> s(size_t(rows * G));
        float *p = dequantized.params.data() + v.offset;
        cpu::quantize_i8(q.data(), s.data(), p, rows, cols);
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c)
                p[r * cols + c] = s[size_t(r * G + c / cpu::kI8Group)] * q[size_t(r * cols + c)];
    }
    const auto tokens = random_tokens(70, m.config.vocab_size, 4);
    const auto ref = test::full_logits(dequantized, tokens);
    auto im = InferModel::from_model(std::move(m), DType::F32);
    const size_t f32_bytes = im->matrix_bytes();
    im->quantize_i8();
    EXPECT_EQ(im->weight_dtype, DType::I8);
    EXPECT_LT(double(im->matrix_bytes()), 0.3 * double(f32_bytes)); // a byte and 4/64 of one per weight
    Decoder dec(*im, 70, 1);
    const auto whole = test::cached_logits(dec, tokens, {70});
    const float scale = max_abs(ref);
    const float moved = test::max_abs_diff(whole.data(), ref.data(), ref.size());
    EXPECT_GT(moved, 1e-4f * scale) << "the activations were not quantized";
    EXPECT_LT(moved, 2e-2f * scale);
    expect_same_however_fed_up_to_rounding(dec, tokens, whole, scale);
    test::TempDir tmp;
    const std::string err = test::error_of([&] { im->save(tmp.str("q"), size_t(1) << 30); });
    EXPECT_NE(err.find("int8-quantized weights are not saved"), std::string::npos) << err;
}

// --precision bf16 (the default for a bf16 model): every linear's rows rounded to bf16, bf16 weights multiplied
// exactly and summed in fp32 — by the bf16 GEMM for many rows (a 70-token prompt), by the vdpbf16ps dot kernel for
// few (ops/cpu/linear_bf16.h). The same products either way, so a prompt fed whole, in chunks or token by token
// agrees up to the summation order, which (as with int8) can send a value on a rounding boundary the other way:
// most positions within 1e-4, all within what rounding moves the logits by. Against fp32 rows: moved, but little.
// transformers under the same rounding: tests/unit/test_generate_golden.cpp.
TEST(Decoder, Bf16InputsAreTheSameHoweverFedAndTrackFp32Rows) {
    Model m = perturbed_model(decode_config(), 9);
    const auto tokens = random_tokens(70, m.config.vocab_size, 4);
    auto im = InferModel::from_model(std::move(m), DType::BF16);
    Decoder fp32(*im, 70, 1, DType::F32, cpu::MatmulPrecision::F32), dec(*im, 70, 1, DType::F32,
                                                                         cpu::MatmulPrecision::BF16);
    EXPECT_EQ(dec.precision(), cpu::MatmulPrecision::BF16);
    const auto ref = test::cached_logits(fp32, tokens, {70});
    const auto whole = test::cached_logits(dec, tokens, {70});
    const float scale = max_abs(ref);
    const float moved = test::max_abs_diff(whole.data(), ref.data(), ref.size());
    EXPECT_GT(moved, 1e-4f * scale) << "the rows were not rounded";
    EXPECT_LT(moved, 2e-2f * scale);
    expect_same_however_fed_up_to_rounding(dec, tokens, whole, scale);
}

// --precision bf16 asked of an fp32 model: its rows are rounded, its weights used as they are (fp32 products).
TEST(Decoder, Bf16InputsOfAnFp32ModelRoundTheRowsOnly) {
    Model m = perturbed_model(decode_config(), 9);
    const auto tokens = random_tokens(40, m.config.vocab_size, 4);
    auto im = InferModel::from_model(std::move(m), DType::F32);
    Decoder fp32(*im, 40, 1, DType::F32, cpu::MatmulPrecision::F32), dec(*im, 40, 1, DType::F32,
                                                                         cpu::MatmulPrecision::BF16);
    const auto ref = test::cached_logits(fp32, tokens, {40});
    const float scale = max_abs(ref);
    for (std::vector<int64_t> sizes : {std::vector<int64_t>{40}, {1}}) {
        const auto got = test::cached_logits(dec, tokens, sizes);
        const float moved = test::max_abs_diff(got.data(), ref.data(), ref.size());
        EXPECT_GT(moved, 1e-4f * scale) << "the rows were not rounded; chunks " << sizes[0];
        EXPECT_LT(moved, 2e-2f * scale) << "chunks " << sizes[0];
    }
}

TEST(Decoder, CacheGrowsLinearlyWithTokens) {
    auto im = InferModel::from_model(perturbed_model(decode_config(), 2), DType::F32);
    Decoder dec(*im, 8, 1);
    SequenceCache seq = dec.new_sequence();
    const size_t fresh = seq.bytes(), per_token = SequenceCache::bytes_per_token(im->config);
    std::vector<float> logits(size_t(im->config.vocab_size));
    const auto tokens = random_tokens(20, im->config.vocab_size, 1);
    dec.prefill(seq, tokens, logits.data());
    EXPECT_EQ(seq.bytes(), fresh + 20 * per_token);
    EXPECT_EQ(per_token, size_t(2 * 2 * 32 * 4)); // K and V × 2 layers × kv_dim 32 × fp32
}

// A bf16 KV cache: every key and value is rounded once, as it is appended, and a chunk's tokens attend to their
// own rows already rounded; its attention rounds the queries and the probabilities as a bf16 model's does
// (ops/cpu/attention.h: the probabilities against integer maxima, so no path rounds them differently). However a
// sequence is fed it gives the same logits up to the order of the sums — which can send a query or a probability
// across a bf16 rounding boundary now and then: most positions within 1e-4, all within what rounding moves them by.
// Against the fp32 cache they move by what the rounding moves them; it holds half the bytes.
TEST(Decoder, Bf16CacheIsTheSameHoweverFedAndTracksTheF32Cache) {
    Model m = perturbed_model(decode_config(), 13);
    const auto tokens = random_tokens(29, m.config.vocab_size, 5);
    const auto ref = test::full_logits(m, tokens);
    auto im = InferModel::from_model(std::move(m), DType::F32);
    Decoder dec(*im, 16, 4, DType::BF16);
    EXPECT_EQ(dec.kv_dtype(), DType::BF16);
    const auto whole = test::cached_logits(dec, tokens, {16});
    const float scale = max_abs(ref);
    expect_same_however_fed_up_to_rounding(dec, tokens, whole, scale);
    const float moved = test::max_abs_diff(whole.data(), ref.data(), ref.size());
    EXPECT_GT(moved, 1e-6f * scale) << "the keys and values were not rounded";
    EXPECT_LT(moved, 2e-2f * scale);
    SequenceCache seq = dec.new_sequence();
    std::vector<float> logits(size_t(im->config.vocab_size));
    const size_t fresh = seq.bytes();
    dec.prefill(seq, tokens, logits.data());
    EXPECT_EQ(seq.bytes() - fresh, tokens.size() * SequenceCache::bytes_per_token(im->config, DType::BF16));
    EXPECT_EQ(SequenceCache::bytes_per_token(im->config, DType::BF16) * 2, SequenceCache::bytes_per_token(im->config));
    EXPECT_THROW(Decoder(*im, 16, 4, DType::F16), zaya::Error);
}

TEST(Decoder, RejectsBadInput) {
    auto im = InferModel::from_model(perturbed_model(decode_config(), 2), DType::F32);
    Decoder dec(*im, 4, 2);
    SequenceCache seq = dec.new_sequence();
    std::vector<float> logits(size_t(im->config.vocab_size) * 2);
    std::vector<int32_t> bad = {1, 600};
    EXPECT_NE(test::error_of([&] { dec.prefill(seq, bad, logits.data()); }).find("token id 600"), std::string::npos);
    seq = dec.new_sequence();
    seq.length = im->config.max_position_embeddings - 1;
    std::vector<int32_t> two = {1, 2};
    EXPECT_NE(test::error_of([&] { dec.prefill(seq, two, logits.data()); }).find("max_position_embeddings"),
              std::string::npos);
}

} // namespace
} // namespace zaya
