// Context parallelism (dist/context_parallel.h): n ranks — threads here, over an in-process group — each run the
// model on their two parts (chunks r and 2n−1−r of 2n) of the same rows, exchanging halos and keys, with and without
// document masking. Their logits must be the whole rows' at their places, and their gradients (each rank's loss
// weighted by its share of the learned targets) must sum to the whole rows' — for 2, 3 and 4 ranks, with a
// sliding-window layer whose window reaches across part boundaries.
#include "core/error.h"
#include "data/loader.h"
#include "dist/comm.h"
#include "dist/context_parallel.h"
#include "model/activations.h"
#include "model/backward.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/forward.h"
#include "model/init.h"
#include "model/params.h"
#include "thread_ranks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

using namespace zaya;

namespace {

using test::ThreadRanks;

struct CpPass {
    std::vector<real> logits, grads;
    std::vector<int64_t> part_tokens; // the inputs of each row's parts 0 and 1 (a rank's pass)
    double loss = 0;
    int64_t learned = 0; // targets this pass scored
};

// Forward and backward of `rows` (B rows of T + 1 tokens: inputs and next-token targets), or, when group is given,
// of rank r of n's parts of them (TokenBatch::chunk, as the trainer cuts them); doc_eos ≥ 0: document masking. The
// gradient of the loss weighted by this pass's share of the `total` learned targets, as the trainer weighs it.
// With a group, a pass over other, full rows runs first on the same buffers, as a trainer's earlier step would:
// what that pass left in them must not reach this one (a part with no tokens has halo entries no op writes).
CpPass run_chunks(const Model &m, const TokenBatch &rows, std::shared_ptr<Communicator> group, int32_t doc_eos,
                  int64_t total) {
    const ZayaConfig &c = m.config;
    const int n = group ? group->size() : 1;
    // Planned as the trainer plans them, for the most a pass holds: a rank with no tokens still runs one.
    const int64_t most = rows.sequences * rows.seq_len;
    Activations acts = Activations::plan(c, most, most, true);
    GradScratch scratch = GradScratch::plan(c, most, most);
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
    std::unique_ptr<ContextParallel> cp;
    if (group) {
        cp = std::make_unique<ContextParallel>(group, c, rows.seq_len, rows.sequences, true);
        acts.context = cp.get();
        TokenBatch earlier;
        earlier.resize(rows.sequences, rows.seq_len, false);
        for (size_t i = 0; i < earlier.tokens.size(); ++i) earlier.tokens[i] = int32_t((i * 7 + 5) % 97);
        const TokenBatch parts = earlier.chunk(group->rank(), n, doc_eos);
        const Batch batch = parts.inputs(doc_eos);
        const std::vector<int32_t> targets = parts.targets(doc_eos);
        model_forward(m, batch, acts, targets.data());
        model_backward(m, batch, acts, targets.data(), scratch, grads.data(), 1.0f);
        std::fill_n(grads.data(), grads.size, real(0));
    }
    const TokenBatch mine = group ? rows.chunk(group->rank(), n, doc_eos) : rows;
    const Batch batch = mine.inputs(doc_eos);
    const std::vector<int32_t> targets = mine.targets(doc_eos);
    CpPass p;
    p.part_tokens = batch.part_tokens;
    p.learned = mine.learned_targets(doc_eos);
    p.loss = model_forward(m, batch, acts, targets.data()).loss;
    p.logits.assign(acts.logits, acts.logits + batch.num_tokens() * c.vocab_size); // before backward's gradients
    model_backward(m, batch, acts, targets.data(), scratch, grads.data(), real(p.learned) / real(total));
    p.grads.assign(grads.data(), grads.data() + m.layout.total);
    return p;
}

Model cp_tiny_model() {
    ZayaConfig c = config_preset("tiny");
    c.layer_types[1] = LayerType::HybridSliding; // its window (7) reaches over chunk boundaries
    c.sliding_window = 7;
    c.validate();
    Model m = Model::create(c);
    model_init_random(m, 11);
    return m;
}

int64_t inputs_in(const TokenBatch &rows) {
    int64_t n = 0;
    for (int64_t b = 0; b < rows.sequences; ++b) n += rows.inputs_of(b);
    return n;
}

// n = 2, 3, 4 ranks on `rows` against one pass over them: each rank's logits at their rows, the loss, and the
// gradients summed over the ranks.
void expect_ranks_match_whole(const Model &m, const TokenBatch &rows, int32_t doc_eos) {
    const int64_t B = rows.sequences, T = rows.seq_len, V = m.config.vocab_size;
    const int64_t total = rows.learned_targets(doc_eos);
    const CpPass whole = run_chunks(m, rows, nullptr, doc_eos, total);
    real grad_scale = 0;
    for (real g : whole.grads) grad_scale = std::max(grad_scale, std::fabs(g));

    for (int n : {2, 3, 4}) {
        SCOPED_TRACE(testing::Message() << n << " ranks, doc_eos " << doc_eos);
        ThreadRanks group(n);
        std::vector<CpPass> ranks(static_cast<size_t>(n));
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r)
            threads.emplace_back([&, r] {
                ranks[size_t(r)] = run_chunks(m, rows, std::make_shared<ThreadRanks::Rank>(group, r), doc_eos, total);
            });
        for (auto &t : threads) t.join();

        // Each rank's two parts of every row (chunks r and 2n−1−r), as many inputs as the row has there.
        double loss = 0, worst_logit = 0;
        int64_t learned = 0, compared = 0;
        for (int r = 0; r < n; ++r) {
            const CpPass &p = ranks[size_t(r)];
            ASSERT_EQ(p.part_tokens.size(), size_t(2 * B));
            loss += p.loss * double(p.learned) / double(total);
            learned += p.learned;
            int64_t got_row = 0, want_row = 0; // the part's first row in the rank's pass; the row's in the whole
            for (int64_t b = 0; b < B; ++b) {
                for (int part = 0; part < 2; ++part) {
                    const int64_t len = p.part_tokens[size_t(2 * b + part)];
                    const int64_t at = want_row + chunk_part_start(r, n, part, T);
                    for (int64_t i = 0; i < len * V; ++i) {
                        const real got = p.logits[size_t(got_row * V + i)], want = whole.logits[size_t(at * V + i)];
                        worst_logit = std::max(worst_logit, double(std::fabs(got - want)));
                    }
                    got_row += len;
                    compared += len;
                }
                want_row += rows.inputs_of(b);
            }
            EXPECT_EQ(got_row * V, int64_t(p.logits.size()));
        }
        EXPECT_EQ(compared, inputs_in(rows)); // every input of the rows on one rank
        EXPECT_EQ(learned, total);
        EXPECT_LT(worst_logit, 1e-5);
        EXPECT_NEAR(loss, whole.loss, 1e-6 * whole.loss);
        // Gradients: the ranks' sum against the whole pass's, per parameter tensor.
        for (const ParamView &v : m.layout.views) {
            if (!v.trainable) continue;
            double worst = 0;
            for (size_t i = v.offset; i < v.offset + v.numel; ++i) {
                double sum = 0;
                for (const CpPass &p : ranks) sum += p.grads[i];
                worst = std::max(worst, std::fabs(sum - double(whole.grads[i])));
            }
            EXPECT_LE(worst, 2e-6 * grad_scale) << v.name;
        }
    }
}

TokenBatch cp_rows(int64_t B, int64_t T, int64_t V) {
    TokenBatch rows;
    rows.resize(B, T, false);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t <= T; ++t) rows.tokens[size_t(b * (T + 1) + t)] = int32_t((b * 131 + t * 37 + t * t) % V);
    return rows;
}

} // namespace

TEST(ContextParallel, ChunksOnRanksMatchWholeSequences) {
    const Model m = cp_tiny_model();
    expect_ranks_match_whole(m, cp_rows(2, 24, m.config.vocab_size), -1);
}

// Document masking: rows cut after each EOS, so a part may begin a document (no halo), begin one token into one
// (its halo's first row belongs to the document before: not read), or continue one begun parts before (its keys on
// other ranks). With 2, 3 and 4 ranks the part boundaries fall at multiples of 6, 4 and 3 tokens.
TEST(ContextParallel, DocumentMaskingAcrossParts) {
    const Model m = cp_tiny_model();
    constexpr int32_t kEos = 3;
    TokenBatch rows = cp_rows(2, 24, m.config.vocab_size);
    for (int32_t &t : rows.tokens) t = t == kEos ? kEos + 1 : t; // only the EOS placed here
    // Row 0: documents from 5 (a part at 6 begins one token in; with 4 ranks at 6, 3 ranks at 8), 12 (a boundary
    // for every n) and 15 (a part at 16 begins one token in with 3 ranks). Row 1: from 8 and 21.
    for (int64_t t : {4, 11, 14}) rows.tokens[size_t(t)] = kEos;
    for (int64_t t : {7, 20}) rows.tokens[size_t(25 + t)] = kEos;
    expect_ranks_match_whole(m, rows, kEos);
}

TEST(ContextParallel, RefusesChunksShorterThanTheConvReach) {
    const Model m = cp_tiny_model();
    auto one = std::make_shared<SingleProcess>();
    EXPECT_NO_THROW(ContextParallel(one, m.config, 24, 2, true));
    ThreadRanks group(4);
    auto rank = std::make_shared<ThreadRanks::Rank>(group, 0);
    EXPECT_THROW(ContextParallel(rank, m.config, 12, 2, true), Error); // 12 = 8 chunks of 1.5
    EXPECT_THROW(ContextParallel(rank, m.config, 8, 2, true), Error);  // chunks of 1 < the conv's 2
    EXPECT_NO_THROW(ContextParallel(rank, m.config, 16, 2, true));
}

// Packed rows (`--pack documents`): a row's padding is not fed, so a part holds fewer inputs than a chunk, or none —
// for some ranks none at all. Row 0 is full, row 1 ends inside a part for every n (15 tokens: parts of 6, 4, 3),
// row 2 holds 3 inputs, all in chunk 0; without and with document masking (documents from 8 in row 0 and 5 in
// row 1, so a document also runs into the part cut short).
TEST(ContextParallel, PackedRowsCutShortByPadding) {
    const Model m = cp_tiny_model();
    constexpr int32_t kEos = 3;
    TokenBatch rows = cp_rows(3, 24, m.config.vocab_size);
    for (int32_t &t : rows.tokens) t = t == kEos ? kEos + 1 : t;
    rows.tokens[7] = kEos;
    rows.tokens[25 + 4] = kEos;
    rows.lengths = {25, 16, 4};
    for (int64_t b = 1; b < 3; ++b) // the padding: the EOS, as the loader pads rows without a pad id
        for (int64_t t = rows.lengths[size_t(b)]; t <= 24; ++t) rows.tokens[size_t(b * 25 + t)] = kEos;
    expect_ranks_match_whole(m, rows, -1);
    expect_ranks_match_whole(m, rows, kEos);
}

// Ranks with no tokens at all (one short row: with 2 ranks all 4 inputs are rank 0's, parts of 6), and ranks with
// tokens but no learned target (loss masks: only the first 3 targets learned). They still run the pass: the other
// ranks' queries read their keys and halos, whose gradients only they can carry into their weights.
TEST(ContextParallel, RanksWithoutTokensOrTargets) {
    const Model m = cp_tiny_model();
    TokenBatch shorter = cp_rows(1, 24, m.config.vocab_size);
    shorter.lengths = {5};
    expect_ranks_match_whole(m, shorter, -1);
    TokenBatch masked = cp_rows(2, 24, m.config.vocab_size);
    masked.learned.assign(masked.tokens.size(), 0);
    for (int64_t t = 1; t <= 3; ++t) masked.learned[size_t(t)] = 1;
    expect_ranks_match_whole(m, masked, -1);
}
