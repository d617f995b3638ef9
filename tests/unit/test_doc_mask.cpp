// Document masking (data/loader.h, `zaya train --doc-mask`): a packed row is cut after each EOS into sequences of
// their own, so each document's logits are those of the document run alone, and the target after an EOS is
// dropped.
#include "data/loader.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/init.h"
#include "model/params.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

using namespace zaya;

namespace {

constexpr int32_t kEos = 3;

TokenBatch one_row(const std::vector<int32_t> &tokens) {
    TokenBatch b;
    b.resize(1, int64_t(tokens.size()) - 1, false);
    b.tokens = tokens;
    return b;
}

} // namespace

TEST(DocMask, RowsAreCutAfterEachEos) {
    // inputs 5 6 E 7 8 9 E 10 | 11; an EOS as the last input cuts nothing (nothing of its row follows)
    const TokenBatch b = one_row({5, 6, kEos, 7, 8, 9, kEos, 10, 11});
    const Batch in = b.inputs(kEos);
    EXPECT_EQ(in.seq_start, (std::vector<int64_t>{0, 3, 7, 8}));
    EXPECT_EQ(in.positions, (std::vector<int32_t>{0, 1, 2, 0, 1, 2, 3, 0}));
    EXPECT_EQ(in.tokens, (std::vector<int32_t>{5, 6, kEos, 7, 8, 9, kEos, 10}));
    EXPECT_EQ(b.targets(kEos), (std::vector<int32_t>{6, kEos, -1, 8, 9, kEos, -1, 11}));
    EXPECT_EQ(b.learned_targets(kEos), 6);
    // off: one sequence, every target
    EXPECT_EQ(b.inputs().seq_start, (std::vector<int64_t>{0, 8}));
    EXPECT_EQ(b.targets(), (std::vector<int32_t>{6, kEos, 7, 8, 9, kEos, 10, 11}));
    EXPECT_EQ(b.learned_targets(), 8);
    const TokenBatch last = one_row({5, 6, kEos, 7});
    EXPECT_EQ(last.inputs(kEos).seq_start, (std::vector<int64_t>{0, 3}));
    EXPECT_EQ(last.targets(kEos), (std::vector<int32_t>{6, kEos, -1}));
    EXPECT_LE(b.inputs(kEos).num_sequences(), TokenBatch::max_sequences(1, 8, true));
}

TEST(DocMask, EachDocumentsLogitsAreItsOwnAlone) {
    ZayaConfig c = config_preset("tiny");
    Model m = Model::create(c);
    model_init_random(m, 5);
    const int64_t V = c.vocab_size;
    // three documents (the last cut off by the row's end), packed into one row of 24 inputs
    const std::vector<std::vector<int32_t>> docs = {
        {17, 40, 9, 81, kEos}, {12, 55, 7, 7, 30, 64, 21, 90, 5, kEos}, {44, 18, 60, 27, 13, 71, 8, 38, 19, 50}};
    std::vector<int32_t> row;
    for (const auto &d : docs) row.insert(row.end(), d.begin(), d.end());
    const TokenBatch b = one_row(row); // 25 tokens: 24 inputs
    const int64_t T = b.seq_len;
    Activations acts = Activations::plan(c, T, TokenBatch::max_sequences(1, T, true), false);
    model_forward(m, b.inputs(kEos), acts, nullptr);
    const std::vector<real> packed(acts.logits, acts.logits + T * V);
    model_forward(m, b.inputs(), acts, nullptr);
    const std::vector<real> across(acts.logits, acts.logits + T * V);

    int64_t at = 0;
    for (size_t k = 0; k < docs.size(); ++k) {
        const int64_t n = std::min<int64_t>(int64_t(docs[k].size()), T - at);
        Batch alone;
        alone.tokens.assign(row.begin() + at, row.begin() + at + n);
        for (int64_t t = 0; t < n; ++t) alone.positions.push_back(int32_t(t));
        alone.seq_start = {0, n};
        model_forward(m, alone, acts, nullptr);
        float worst = 0, scale = 0;
        for (int64_t i = 0; i < n * V; ++i) {
            worst = std::max(worst, std::abs(packed[size_t(at * V + i)] - acts.logits[i]));
            scale = std::max(scale, std::abs(acts.logits[i]));
        }
        EXPECT_LT(worst, 1e-5f * scale) << "document " << k;
        if (k > 0) { // without the cut, later documents see the earlier ones: the test tells the two apart
            EXPECT_GT(test::max_abs_diff(across.data() + at * V, acts.logits, size_t(n * V)), 1e-3f * scale);
        }
        at += n;
    }
    EXPECT_EQ(at, T);
}
