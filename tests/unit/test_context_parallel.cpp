// Context parallelism (dist/context_parallel.h): n ranks — threads here, over an in-process group — each run the
// model on their two parts (chunks r and 2n−1−r of 2n) of the same sequences, exchanging halos and keys. Their logits must be the whole sequences'
// and their gradients (each rank's loss weighted 1/n) must sum to the whole sequences' — for 2, 3 and 4 chunks,
// with a sliding-window layer whose window reaches across chunk boundaries.
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
};

// Forward and backward of `rows` (B rows of T + 1 tokens: inputs and next-token targets), or, when group is given,
// of rank r of n's parts of them (TokenBatch::chunk, as the trainer cuts them); the gradient of loss/n.
CpPass run_chunks(const Model &m, const TokenBatch &rows, std::shared_ptr<Communicator> group) {
    const ZayaConfig &c = m.config;
    const int n = group ? group->size() : 1;
    const TokenBatch mine = group ? rows.chunk(group->rank(), n) : rows;
    const Batch batch = mine.inputs();
    const std::vector<int32_t> targets = mine.targets();
    const int64_t N = batch.num_tokens(), B = batch.num_sequences();
    Activations acts = Activations::plan(c, N, B, true);
    std::unique_ptr<ContextParallel> cp;
    if (group) {
        cp = std::make_unique<ContextParallel>(group, c, rows.seq_len, rows.sequences, true);
        acts.context = cp.get();
    }
    CpPass p;
    p.loss = model_forward(m, batch, acts, targets.data()).loss;
    p.logits.assign(acts.logits, acts.logits + N * c.vocab_size); // before backward turns them into gradients
    GradScratch scratch = GradScratch::plan(c, N, B);
    RealBuffer grads = RealBuffer::zeros(m.layout.total);
    model_backward(m, batch, acts, targets.data(), scratch, grads.data(), real(1) / real(n));
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

} // namespace

TEST(ContextParallel, ChunksOnRanksMatchWholeSequences) {
    const Model m = cp_tiny_model();
    const ZayaConfig &c = m.config;
    const int64_t B = 2, T = 24, V = c.vocab_size;
    TokenBatch rows;
    rows.resize(B, T, false);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t <= T; ++t) rows.tokens[size_t(b * (T + 1) + t)] = int32_t((b * 131 + t * 37 + t * t) % V);
    const CpPass whole = run_chunks(m, rows, nullptr);
    real grad_scale = 0;
    for (real g : whole.grads) grad_scale = std::max(grad_scale, std::fabs(g));

    for (int n : {2, 3, 4}) {
        SCOPED_TRACE(testing::Message() << n << " chunks");
        ThreadRanks group(n);
        std::vector<CpPass> ranks(static_cast<size_t>(n));
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r)
            threads.emplace_back(
                [&, r] { ranks[size_t(r)] = run_chunks(m, rows, std::make_shared<ThreadRanks::Rank>(group, r)); });
        for (auto &t : threads) t.join();

        const int64_t Tc = T / (2 * n); // each rank's two parts of every sequence: chunks r and 2n−1−r
        double loss = 0, worst_logit = 0;
        for (int r = 0; r < n; ++r) {
            loss += ranks[size_t(r)].loss / n;
            for (int64_t b = 0; b < B; ++b)
                for (int part = 0; part < 2; ++part)
                    for (int64_t i = 0; i < Tc * V; ++i) {
                        const real got = ranks[size_t(r)].logits[size_t((2 * b + part) * Tc * V + i)];
                        const int64_t at = b * T + chunk_part_start(r, n, part, T);
                        const real want = whole.logits[size_t(at * V + i)];
                        worst_logit = std::max(worst_logit, double(std::fabs(got - want)));
                    }
        }
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
