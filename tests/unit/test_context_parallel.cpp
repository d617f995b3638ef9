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
    double loss = 0;
    int64_t learned = 0; // targets this pass scored
};

// Forward and backward of `rows` (B rows of T + 1 tokens: inputs and next-token targets), or, when group is given,
// of rank r of n's parts of them (TokenBatch::chunk, as the trainer cuts them); doc_eos ≥ 0: document masking. The
// gradient of the loss weighted by this pass's share of the `total` learned targets, as the trainer weighs it.
CpPass run_chunks(const Model &m, const TokenBatch &rows, std::shared_ptr<Communicator> group, int32_t doc_eos,
                  int64_t total) {
    const ZayaConfig &c = m.config;
    const int n = group ? group->size() : 1;
    const TokenBatch mine = group ? rows.chunk(group->rank(), n, doc_eos) : rows;
    const Batch batch = mine.inputs(doc_eos);
    const std::vector<int32_t> targets = mine.targets(doc_eos);
    const int64_t N = batch.num_tokens(), B = batch.num_sequences();
    Activations acts = Activations::plan(c, N, B, true);
    std::unique_ptr<ContextParallel> cp;
    if (group) {
        cp = std::make_unique<ContextParallel>(group, c, rows.seq_len, rows.sequences, true);
        acts.context = cp.get();
    }
    CpPass p;
    p.learned = mine.learned_targets(doc_eos);
    p.loss = model_forward(m, batch, acts, targets.data()).loss;
    p.logits.assign(acts.logits, acts.logits + N * c.vocab_size); // before backward turns them into gradients
    GradScratch scratch = GradScratch::plan(c, N, B);
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
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

        const int64_t Tc = T / (2 * n); // each rank's two parts of every row: chunks r and 2n−1−r
        double loss = 0, worst_logit = 0;
        int64_t learned = 0;
        for (int r = 0; r < n; ++r) {
            const CpPass &p = ranks[size_t(r)];
            loss += p.loss * double(p.learned) / double(total);
            learned += p.learned;
            for (int64_t b = 0; b < B; ++b)
                for (int part = 0; part < 2; ++part)
                    for (int64_t i = 0; i < Tc * V; ++i) {
                        const real got = p.logits[size_t((2 * b + part) * Tc * V + i)];
                        const int64_t at = b * T + chunk_part_start(r, n, part, T);
                        const real want = whole.logits[size_t(at * V + i)];
                        worst_logit = std::max(worst_logit, double(std::fabs(got - want)));
                    }
        }
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
