// Prefix reuse (infer/prefix_cache.h): the decoder's state snapshots resume a sequence to exactly what the full
// forward computes, the cache picks the longest resumable prefix and keeps to its budget, and the engine's next
// request resumes from a finished one with the logits of a request computed from scratch.
#include "decode_helpers.h"
#include "infer/engine.h"
#include "infer/prefix_cache.h"
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

// Feeds tokens[from:] to seq in chunks of the given sizes (cycled); every new row's logits vs ref's to 1e-4.
void expect_continues_as_forward(Decoder &dec, SequenceCache &seq, const std::vector<int32_t> &tokens, size_t from,
                                 const std::vector<int64_t> &sizes, const std::vector<float> &ref) {
    const int64_t V = dec.model().config.vocab_size;
    std::vector<float> logits;
    size_t at = from, k = 0;
    while (at < tokens.size()) {
        const size_t n = std::min(tokens.size() - at, size_t(sizes[k++ % sizes.size()]));
        std::span<const int32_t> chunk(tokens.data() + at, n);
        SequenceCache *s[1] = {&seq};
        logits.resize(n * size_t(V));
        const int64_t rows[1] = {int64_t(n)};
        dec.forward(s, std::span<const std::span<const int32_t>>(&chunk, 1), logits.data(), rows);
        for (size_t i = 0; i < n * size_t(V); ++i)
            ASSERT_NEAR(logits[i], ref[at * size_t(V) + i], 1e-4) << "resumed at " << from << ", row " << at + i / V;
        at += n;
    }
}

// Two sequences fed together in chunks whose ends fall before, on and after the stride's multiples: each keeps a
// snapshot at every multiple of 4 it reaches, and cut back to any of them (or its full length) it continues
// exactly as the full forward of the whole sequence.
TEST(PrefixCache, SnapshotsResumeAsTheFullForward) {
    const Model m = perturbed_model(decode_config(), 13);
    const int64_t V = m.config.vocab_size;
    auto im = InferModel::from_model(perturbed_model(decode_config(), 13), DType::F32);
    Decoder dec(*im, 16, 2);
    const std::vector<std::vector<int32_t>> tokens = {random_tokens(23, V, 5), random_tokens(17, V, 6)};
    const std::vector<std::vector<int64_t>> sizes = {{3, 5, 1, 7}, {4, 6, 2}};
    SequenceCache seqs[2] = {dec.new_sequence(), dec.new_sequence()};
    for (SequenceCache &s : seqs) s.snapshot_every = 4;
    size_t at[2] = {0, 0}, k = 0;
    std::vector<float> logits(2 * size_t(V));
    while (at[0] < tokens[0].size() || at[1] < tokens[1].size()) {
        std::vector<SequenceCache *> ptrs;
        std::vector<std::span<const int32_t>> chunks;
        for (size_t s = 0; s < 2; ++s) {
            if (at[s] == tokens[s].size()) continue;
            const size_t n = std::min(tokens[s].size() - at[s], size_t(sizes[s][k % sizes[s].size()]));
            chunks.emplace_back(tokens[s].data() + at[s], n);
            ptrs.push_back(&seqs[s]);
            at[s] += n;
        }
        ++k;
        dec.forward(ptrs, chunks, logits.data());
    }
    for (size_t s = 0; s < 2; ++s) {
        std::vector<int64_t> kept;
        for (const SequenceState &st : seqs[s].snapshots) kept.push_back(st.length);
        EXPECT_EQ(kept, s == 0 ? std::vector<int64_t>({4, 8, 12, 16, 20}) : std::vector<int64_t>({4, 8, 12, 16}));
        const std::vector<float> ref = test::full_logits(m, tokens[s]);
        kept.push_back(seqs[s].length);
        for (int64_t b : kept) {
            SequenceCache cut = seqs[s].prefix(b);
            ASSERT_EQ(cut.length, b);
            ASSERT_EQ(cut.snapshots.back().length, b); // so the copy can be cut back there again
            expect_continues_as_forward(dec, cut, tokens[s], size_t(b), {5}, ref);
        }
    }
    SequenceCache plain = dec.new_sequence();
    expect_continues_as_forward(dec, plain, tokens[0], 0, {16}, test::full_logits(m, tokens[0]));
    EXPECT_TRUE(plain.snapshots.empty()); // snapshot_every 0: none kept
}

// A sequence stand-in: one layer of 2-float KV rows holding their position, conv and value state holding the
// length they belong to, snapshots at the given lengths.
SequenceCache fake_cache(int64_t n, const std::vector<int64_t> &snaps) {
    SequenceCache c;
    c.length = n;
    std::vector<float> rows(size_t(2 * n));
    std::iota(rows.begin(), rows.end(), 0.0f);
    c.k = {KvRows()};
    c.k[0].append(rows.data(), rows.size());
    c.v = c.k;
    c.conv = {float(n)};
    c.vdel = {float(-n)};
    for (int64_t s : snaps) c.snapshots.push_back(SequenceState{s, {float(s)}, {float(-s)}});
    return c;
}

std::vector<int32_t> iota_tokens(int32_t n, std::vector<int32_t> tail = {}) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    std::iota(t.begin(), t.end(), 0);
    t.insert(t.end(), tail.begin(), tail.end());
    return t;
}

TEST(PrefixCache, CutBackOnlyWhereTheStateWasKept) {
    const SequenceCache c = fake_cache(10, {4, 8});
    EXPECT_TRUE(c.can_cut_to(10) && c.can_cut_to(8) && c.can_cut_to(4));
    EXPECT_FALSE(c.can_cut_to(5));
    const SequenceCache cut = c.prefix(4);
    EXPECT_EQ(std::vector<float>(cut.k[0].f32(), cut.k[0].f32() + cut.k[0].size()),
              std::vector<float>({0, 1, 2, 3, 4, 5, 6, 7}));
    EXPECT_EQ(cut.conv, std::vector<float>({4}));
    EXPECT_EQ(cut.vdel, std::vector<float>({-4}));
    EXPECT_EQ(c.prefix(10).conv, std::vector<float>({10})); // its own state
    EXPECT_NE(test::error_of([&] { c.prefix(5); }).find("no state kept at length 5"), std::string::npos);
    EXPECT_NE(test::error_of([&] { c.prefix(11); }).find("cannot cut a sequence of 10 tokens back to 11"),
              std::string::npos);
}

TEST(PrefixCache, LongestResumablePrefixWithinBudget) {
    PrefixCache pc(1 << 20);
    pc.insert(iota_tokens(10), fake_cache(10, {4, 8}));
    auto at = [&](const std::vector<int32_t> &prompt, int64_t max_length) {
        const std::optional<SequenceCache> c = pc.resume(prompt, max_length);
        EXPECT_TRUE(!c || c->conv == std::vector<float>({float(c->length)})); // the state of the length resumed at
        return c ? c->length : int64_t(-1);
    };
    EXPECT_EQ(at(iota_tokens(10, {100}), 100), 10); // the whole entry
    EXPECT_EQ(at(iota_tokens(10, {100}), 9), 8);    // capped: its last snapshot within
    EXPECT_EQ(at(iota_tokens(7, {50}), 100), 4);    // 7 shared: the snapshot at 4
    EXPECT_EQ(at(iota_tokens(3, {9}), 100), -1);    // nothing kept within 3 tokens
    EXPECT_EQ(at({5, 6, 7}, 100), -1);
    EXPECT_EQ(pc.hits(), 3);
    EXPECT_EQ(pc.tokens_reused(), 10 + 8 + 4);

    // An entry that extends another and can be cut back to it replaces it; one that cannot be does not.
    pc.insert(iota_tokens(10, {10, 11, 12, 13}), fake_cache(14, {4, 8, 10, 12}));
    EXPECT_EQ(pc.entries(), 1u);
    pc.insert(iota_tokens(10, {10, 11}), fake_cache(12, {4, 8}));        // held already: cut back to 12
    pc.insert(iota_tokens(10, {10, 11, 12}), fake_cache(13, {4, 8, 12})); // not held: 13 is not kept
    EXPECT_EQ(pc.entries(), 2u);
    pc.insert(iota_tokens(10, {10, 11, 12, 13, 14}), fake_cache(15, {4, 8, 12, 13, 14}));
    EXPECT_EQ(pc.entries(), 1u); // replaces both
    pc.insert(iota_tokens(6, {77, 78}), fake_cache(8, {4}));
    pc.insert(iota_tokens(6, {77, 78, 79, 80, 81}), fake_cache(11, {4}));
    EXPECT_EQ(pc.entries(), 3u);
    EXPECT_EQ(at(iota_tokens(6, {77, 78, 5}), 100), 8); // the short entry's end beats the others' snapshots at 4
    EXPECT_NE(test::error_of([&] { pc.insert(iota_tokens(3), fake_cache(4, {})); }).find("3 tokens given"),
              std::string::npos);

    // The budget: the least recently used entries go first; one larger than the budget is not kept.
    const size_t each = fake_cache(10, {4, 8}).bytes() + 10 * sizeof(int32_t);
    PrefixCache small(2 * each);
    small.insert(iota_tokens(10), fake_cache(10, {4, 8}));
    small.insert(iota_tokens(9, {42}), fake_cache(10, {4, 8}));
    EXPECT_EQ(small.bytes(), 2 * each);
    ASSERT_TRUE(small.resume(iota_tokens(10), 100)); // the first entry is now the more recently used
    small.insert(iota_tokens(9, {43}), fake_cache(10, {4, 8}));
    EXPECT_EQ(small.entries(), 2u);
    EXPECT_EQ(small.resume(iota_tokens(9, {42, 1}), 100)->length, 8); // the second went: only a snapshot is left
    EXPECT_EQ(small.resume(iota_tokens(9, {43, 1}), 100)->length, 10);
    small.insert(iota_tokens(30), fake_cache(30, {}));
    EXPECT_EQ(small.entries(), 2u);
    EXPECT_EQ(small.bytes(), 2 * each);
}

// A GPU decoder's sequence stand-in: a device slot whose release is counted, no host state.
SequenceCache device_cache(int64_t n, int64_t slot, std::vector<int64_t> &released) {
    SequenceCache c;
    c.length = n;
    c.device_slot = std::shared_ptr<const int64_t>(new int64_t(slot), [&released](const int64_t *p) {
        released.push_back(*p);
        delete p;
    });
    return c;
}

// Device entries are continued whole or not at all, handed over (not copied) with their slot, and give their slot
// back when dropped; the engine drops the least recently used when it needs a slot.
TEST(PrefixCache, DeviceEntriesAreTakenOverWhole) {
    std::vector<int64_t> released;
    PrefixCache pc(1 << 20);
    pc.insert(iota_tokens(10), device_cache(10, 3, released));
    pc.insert(iota_tokens(5, {50, 51}), device_cache(7, 5, released));
    EXPECT_FALSE(pc.resume(iota_tokens(8, {99}), 100)); // shares 8 of 10: a device entry cannot be cut back
    EXPECT_FALSE(pc.resume(iota_tokens(10), 9));          // the whole entry would leave no token to feed
    std::optional<SequenceCache> c = pc.resume(iota_tokens(10, {11, 12}), 11);
    ASSERT_TRUE(c);
    EXPECT_EQ(c->length, 10);
    EXPECT_EQ(*c->device_slot, 3);
    EXPECT_EQ(pc.entries(), 1u); // taken out
    EXPECT_TRUE(released.empty());
    c.reset();
    EXPECT_EQ(released, std::vector<int64_t>({3}));
    EXPECT_TRUE(pc.drop_lru());
    EXPECT_EQ(released, std::vector<int64_t>({3, 5}));
    EXPECT_FALSE(pc.drop_lru());
}

// The generated tokens' log-probabilities (and top 2) are the full forward's over prompt + generated.
void expect_logprobs_of_forward(const Model &m, const std::vector<int32_t> &prompt, const Completion &c) {
    const int64_t V = m.config.vocab_size;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), c.tokens.begin(), c.tokens.end());
    const std::vector<float> ref = test::full_logits(m, all);
    ASSERT_EQ(c.logprobs.size(), c.tokens.size());
    test::expect_logprobs_match(c.logprobs, ref, V, int64_t(prompt.size()) - 1, c.tokens, 0, 2);
}

// A chat's next turn (the last prompt, its answer and more) resumes where the last request's cache ended; a prompt
// sharing part of one resumes at a snapshot; the same prompt again at its last snapshot before the end (its last
// token is fed, for the logits); a prompt whose log-probabilities are asked for is fed whole. Each one's tokens
// and log-probabilities are those of the same request on an engine without the cache.
TEST(PrefixCache, EngineResumesLaterPromptsAsComputedAfresh) {
    const Model m = perturbed_model(decode_config(), 3);
    const int64_t V = m.config.vocab_size;
    auto engine = [&](size_t bytes) {
        return std::make_unique<Engine>(InferModel::from_model(perturbed_model(decode_config(), 3), DType::F32),
                                        std::nullopt,
                                        EngineOptions{.max_batch = 2, .prefill_chunk = 4, .prefix_cache_bytes = bytes,
                                                      .prefix_cache_stride = 4});
    };
    auto cached = engine(size_t(64) << 20), fresh = engine(0);
    EXPECT_FALSE(fresh->prefix_cache_stats());
    SampleOptions o;
    o.temperature = 0.9, o.seed = 7, o.max_new_tokens = 6, o.logprobs = 2;
    const std::vector<int32_t> pa = random_tokens(10, V, 1);
    const Completion a = generate_one(*cached, pa, o);
    EXPECT_EQ(a.cached_tokens, 0);
    ASSERT_EQ(a.tokens.size(), 6u);
    std::vector<int32_t> pb = pa;
    pb.insert(pb.end(), a.tokens.begin(), a.tokens.end());
    pb.insert(pb.end(), {3, 4, 5});
    std::vector<int32_t> pd = pa;
    pd.insert(pd.end(), {int32_t((a.tokens[0] + 1) % V), 9});
    std::vector<int32_t> pc(pa.begin(), pa.begin() + 7);
    pc.insert(pc.end(), {1, 2, 3});
    const std::vector<std::pair<std::vector<int32_t>, int64_t>> later = {
        {pb, 15}, // the 10 + 6 − 1 tokens a's cache holds (its last token was never fed)
        {pc, 4},  // 7 shared: the snapshot at 4
        {pa, 8},  // all 10 shared, at most 9 resumed: the snapshot at 8
        {pd, 10}, // a's prompt and other tokens: the snapshot at a's prompt end (10, no multiple of the stride)
    };
    for (const auto &[prompt, resumed] : later) {
        const Completion c = generate_one(*cached, prompt, o);
        EXPECT_EQ(c.cached_tokens, resumed);
        EXPECT_EQ(c.prompt_tokens, int64_t(prompt.size()));
        EXPECT_EQ(c.tokens, generate_one(*fresh, prompt, o).tokens);
        expect_logprobs_of_forward(m, prompt, c);
    }
    SampleOptions scored = o;
    scored.prompt_logprobs = true;
    const Completion d = generate_one(*cached, pb, scored);
    EXPECT_EQ(d.cached_tokens, 0);
    EXPECT_EQ(d.prompt_logprobs.size(), pb.size() - 1);
    const auto stats = cached->prefix_cache_stats();
    ASSERT_TRUE(stats);
    EXPECT_EQ(stats->hits, 4);
    EXPECT_EQ(stats->tokens_reused, 15 + 4 + 8 + 10);
    EXPECT_EQ(stats->max_bytes, int64_t(64) << 20);
    EXPECT_GT(stats->bytes, 0);
}

} // namespace
} // namespace zaya
