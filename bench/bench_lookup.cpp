// What a prompt-lookup draft costs a decoding step (infer/draft.h: speculative decoding's search for the context's
// last tokens), where the search finds nothing and reads everything: a context of T random tokens (a prompt and an
// answer of 64, or of T/2 below 128), alone and with --lookup-history K finished texts of T tokens each. One draft
// per request per step, so with 16 requests in a step the cost is 16 of these.
//
//   zaya_bench_lookup [--tokens T,T,...] [--history K] [--reps R]
//
// Defaults: T = 4096, 32768, 131072; K = 8; best of 5 calls after a warm-up; vocabulary 262,144 (ZAYA1's).
#include "best_seconds.h"
#include "infer/draft.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

using zaya::bench::best_seconds;

int main(int argc, char **argv) {
    std::vector<int64_t> lengths = {4096, 32768, 131072};
    int64_t K = 8;
    int reps = 5;
    for (int a = 1; a + 1 < argc; a += 2) {
        const std::string k = argv[a];
        if (k == "--history") K = std::atoll(argv[a + 1]);
        else if (k == "--reps") reps = std::atoi(argv[a + 1]);
        else if (k == "--tokens") lengths = zaya::bench::int_list(argv[a + 1]);
        else {
            fmt::print(stderr, "unknown option '{}' (--tokens, --history, --reps)\n", k);
            return 2;
        }
    }
    if (K < 0 || reps < 1 || lengths.empty() || *std::min_element(lengths.begin(), lengths.end()) < 2) {
        fmt::print(stderr, "--history must be ≥ 0, --reps positive, every --tokens entry at least 2\n");
        return 2;
    }
    uint64_t s = 1;
    auto token = [&s] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return int32_t(s >> 46); // 18 bits: 262,144 ids
    };
    const zaya::LookupOptions o{.tokens = 8, .min_ngram = 2, .max_ngram = 4, .history = K};
    fmt::print("prompt lookup with no match, µs per draft (best of {}): the context alone, and with {} finished "
               "texts of as many tokens\n",
               reps, K);
    fmt::print("{:>8} {:>12} {:>12}\n", "tokens", "context", "+ history");
    for (const int64_t T : lengths) {
        const int64_t A = std::min<int64_t>(64, T / 2); // the answer's tokens
        std::vector<int32_t> prompt(static_cast<size_t>(T - A)), answer(static_cast<size_t>(A));
        for (auto &t : prompt) t = token();
        for (auto &t : answer) t = token();
        std::vector<std::vector<int32_t>> history(static_cast<size_t>(K), std::vector<int32_t>(static_cast<size_t>(T)));
        for (auto &text : history)
            for (auto &t : text) t = token();
        size_t drafted = 0; // (kept, so the calls are not optimised away)
        const double alone = best_seconds(reps, [&] { drafted += lookup_draft(prompt, answer, o, 8).size(); });
        const double with =
            best_seconds(reps, [&] { drafted += lookup_draft(prompt, answer, o, 8, history).size(); });
        fmt::print("{:>8} {:>12.1f} {:>12.1f}{}\n", T, alone * 1e6, with * 1e6, drafted ? " (a match)" : "");
    }
}
