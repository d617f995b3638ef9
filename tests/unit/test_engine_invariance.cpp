// Batch-invariant decoding (EngineOptions::batch_invariant): a request's tokens and log-probabilities — its prompt's
// too — are the same bits when it runs alone, its prompt read in one step on one thread, as when it runs beside
// other requests on two threads, its prompt cut into small chunks fed with their decoding rows (or resumed from the
// prefix cache partway, the rest so), its answer drafted speculatively. Each run passes
// every path the default decoding switches by row count: the linears' GEMMs (from 25 bf16 rows, 65 fp32 rows, 257
// int8 ones), the conv's GEMMs (from 65 rows), attention by query blocks (from 16 rows of a sequence).
#include "decode_helpers.h"
#include "infer/engine.h"
#include "infer/fingerprint.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <string>
#include <vector>

namespace zaya {
namespace {

using test::perturbed_model;
using test::random_tokens;

// decode_config's model (a sliding-window layer, biases) at width 256, with these matrices.
std::unique_ptr<InferModel> wide_model(const std::string &weights, uint64_t seed = 21) {
    ZayaConfig c = test::decode_config();
    c.hidden_size = 256;
    c.validate();
    auto m = InferModel::from_model(perturbed_model(c, seed), weights == "fp32" ? DType::F32 : DType::BF16);
    if (weights == "int8") m->quantize_i8();
    return m;
}

struct Runs {
    Completion target;                  // the request compared
    std::vector<Completion> neighbours; // the others, when there were any
};

enum class Setting {
    Alone,   // one thread, the default prompt steps: the 300-token prompt in one step
    Beside,  // two threads, after two neighbours have started decoding: the prompt fed 48 tokens a step beside their
             // rows, the answer drafted
    Resumed, // as Beside, after a request of the prompt's first 200 tokens has finished: the prefix cache resumes the
             // prompt at 200, where that prompt ended (its log-probabilities not asked: they make it read it whole)
};

Runs run(const std::string &weights, cpu::MatmulPrecision precision, Setting setting) {
    const bool beside = setting != Setting::Alone;
    const int threads = omp_get_max_threads();
    omp_set_num_threads(beside ? 2 : 1);
    EngineOptions eo{.max_batch = 4, .prefill_chunk = beside ? 48 : 0, .precision = precision};
    eo.batch_invariant = true;
    if (beside) eo.lookup = LookupOptions{.tokens = 6, .min_ngram = 1, .max_ngram = 3};
    if (setting == Setting::Resumed) eo.prefix_cache_bytes = size_t(64) << 20;
    Engine e(wide_model(weights), std::nullopt, eo);
    const int64_t V = e.model().config.vocab_size;
    std::vector<int32_t> prompt = random_tokens(100, V, 5); // repeated: drafts find their matches
    for (int k = 0; k < 2; ++k) prompt.insert(prompt.end(), prompt.begin(), prompt.begin() + 100);
    SampleOptions o;
    o.max_new_tokens = 24;
    o.temperature = 0.8;
    o.seed = 9;
    o.logprobs = 2;
    o.prompt_logprobs = setting != Setting::Resumed;
    Runs r;
    r.neighbours.resize(beside ? 2 : 0);
    if (beside) {
        SampleOptions n = o;
        n.max_new_tokens = 60;
        n.prompt_logprobs = false;
        if (setting == Setting::Resumed) generate_one(e, std::vector<int32_t>(prompt.begin(), prompt.begin() + 200), n);
        e.submit(random_tokens(40, V, 6), n, {}, [&r](const Completion &c) { r.neighbours[0] = c; });
        e.submit(random_tokens(90, V, 7), n, {}, [&r](const Completion &c) { r.neighbours[1] = c; });
        for (int s = 0; s < 4; ++s) e.step(); // both prompts read, both decoding
    }
    e.submit(prompt, o, {}, [&r](const Completion &c) { r.target = c; });
    e.run_until_idle();
    omp_set_num_threads(threads);
    return r;
}

void expect_same_bits(const std::vector<TokenLogprobs> &a, const std::vector<TokenLogprobs> &b, const char *what,
                      const std::string &label) {
    ASSERT_EQ(a.size(), b.size()) << label << ": " << what;
    for (size_t t = 0; t < a.size(); ++t) {
        EXPECT_EQ(a[t].token, b[t].token) << label << ": " << what << " " << t;
        EXPECT_EQ(a[t].logprob, b[t].logprob) << label << ": " << what << " " << t;
        ASSERT_EQ(a[t].top.size(), b[t].top.size()) << label << ": " << what << " " << t;
        for (size_t k = 0; k < a[t].top.size(); ++k)
            EXPECT_EQ(a[t].top[k].logprob, b[t].top[k].logprob) << label << ": " << what << " " << t << ", top " << k;
    }
}

TEST(Engine, BatchInvariantRequestsAreTheSameBitsAloneAndBesideOthers) {
    if (!batch_invariant_supported()) GTEST_SKIP() << "batch invariance needs the AVX-512 kernels (AVX2 build)";
    for (const std::string weights : {"bf16", "fp32", "int8"}) {
        for (const auto precision : {cpu::MatmulPrecision::F32, cpu::MatmulPrecision::BF16}) {
            if (weights == "int8" && precision == cpu::MatmulPrecision::BF16) continue; // int8 quantizes its rows
            const std::string label = weights + " weights, " + cpu::matmul_precision_name(precision) + " rows";
            const Runs alone = run(weights, precision, Setting::Alone);
            ASSERT_EQ(alone.target.finish_reason, "length") << label << ": " << alone.target.error;
            for (const Setting setting : {Setting::Beside, Setting::Resumed}) {
                const Runs other = run(weights, precision, setting);
                const std::string as = label + (setting == Setting::Beside ? ", beside others" : ", resumed");
                ASSERT_EQ(other.target.finish_reason, "length") << as << ": " << other.target.error;
                EXPECT_GT(other.target.draft_steps, 0) << as; // the drafts' rows were fed too
                EXPECT_EQ(other.target.cached_tokens, setting == Setting::Resumed ? 200 : 0) << as;
                for (const Completion &n : other.neighbours) EXPECT_EQ(n.finish_reason, "length") << as;
                EXPECT_EQ(alone.target.tokens, other.target.tokens) << as;
                expect_same_bits(alone.target.logprobs, other.target.logprobs, "token", as);
                if (setting == Setting::Beside)
                    expect_same_bits(alone.target.prompt_logprobs, other.target.prompt_logprobs, "prompt token", as);
            }
        }
    }
}

// The server's system_fingerprint: the same for the same model decoded alike, another for other weights, another
// element of the KV cache or of the linears' rows, batch invariance or not, and (without it) other prompt steps.
TEST(Engine, SystemFingerprintChangesWithWhatTheBitsDependOn) {
    const auto fingerprint = [](const std::string &weights, uint64_t seed, EngineOptions eo) {
        return system_fingerprint(Engine(wide_model(weights, seed), std::nullopt, eo));
    };
    const std::string base = fingerprint("bf16", 21, {});
    EXPECT_TRUE(base.size() == 15 && base.starts_with("fp_")) << base;
    EXPECT_EQ(fingerprint("bf16", 21, {}), base);
    EXPECT_NE(fingerprint("bf16", 22, {}), base);
    EXPECT_NE(fingerprint("fp32", 21, {}), base);
    EXPECT_NE(fingerprint("bf16", 21, EngineOptions{.kv_dtype = DType::F32}), base);
    EXPECT_NE(fingerprint("bf16", 21, EngineOptions{.precision = cpu::MatmulPrecision::F32}), base);
    EXPECT_NE(fingerprint("bf16", 21, EngineOptions{.prefill_chunk = 64}), base);
    if (!batch_invariant_supported()) return;
    EngineOptions invariant;
    invariant.batch_invariant = true;
    const std::string b = fingerprint("bf16", 21, invariant);
    EXPECT_NE(b, base);
    invariant.prefill_chunk = 64; // the steps no longer matter
    EXPECT_EQ(fingerprint("bf16", 21, invariant), b);
}

// On the GPU, and in a build whose kernels cannot give it, the option is refused, naming why.
TEST(Engine, BatchInvarianceIsRefusedWhereItCannotHold) {
    EngineOptions eo;
    eo.batch_invariant = true;
    eo.device = "cuda";
    EXPECT_NE(test::error_of([&] { Engine(wide_model("bf16"), std::nullopt, eo); }).find("runs on the CPU"),
              std::string::npos);
    if (batch_invariant_supported()) return;
    eo.device = "cpu";
    EXPECT_NE(test::error_of([&] { Engine(wide_model("bf16"), std::nullopt, eo); }).find("AVX-512"),
              std::string::npos);
}

} // namespace
} // namespace zaya
