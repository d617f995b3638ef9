// What cached attention costs on the CPU (ops/cpu/attention.h): a prompt chunk of C new tokens over a cache of
// P earlier ones, and a single decoding row, over an fp32 cache and a bf16 cache (a bf16 model's: queries and
// probabilities rounded, a chunk's products as bf16 GEMMs, a row's in registers), in ms and GFLOP/s (4·n·keys·hd·nq:
// Q·Kᵀ and P·V, the causal half counted for the chunk's own keys).
//
//   zaya_bench_attention [--past P] [--chunk C] [--reps R]
//
// Defaults: ZAYA1-8B's attention shapes (8 query heads, 2 kv heads, head_dim 128), a 1,024-token chunk after 7,168
// cached tokens (the last chunk of an 8,192-token prefill), best of 5 calls after a warm-up.
#include "best_seconds.h"
#include "core/dtype.h"
#include "ops/cpu/attention.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

using zaya::bench::best_seconds;

int main(int argc, char **argv) {
    int64_t past = 7168, chunk = 1024;
    int reps = 5;
    for (int a = 1; a + 1 < argc; a += 2) {
        const std::string k = argv[a];
        if (k == "--past") past = std::atoll(argv[a + 1]);
        else if (k == "--chunk") chunk = std::atoll(argv[a + 1]);
        else if (k == "--reps") reps = std::atoi(argv[a + 1]);
        else {
            fmt::print(stderr, "unknown option '{}' (--past, --chunk, --reps)\n", k);
            return 2;
        }
    }
    if (past < 0 || chunk < 1 || reps < 1) {
        fmt::print(stderr, "--past must be ≥ 0, --chunk and --reps ≥ 1\n");
        return 2;
    }
    const zaya::cpu::AttnShape s{8, 2, 128, 1.0f / std::sqrt(128.0f), 0};
    const int64_t total = past + chunk, Dq = s.nq * s.hd, Dk = s.nkv * s.hd;
    std::mt19937 gen(1);
    std::normal_distribution<float> normal;
    std::vector<float> q(size_t(chunk * Dq)), k(size_t(total * Dk)), v(k.size()), out(q.size());
    for (auto *x : {&q, &k, &v})
        for (float &e : *x) e = normal(gen);
    std::vector<uint16_t> kb(k.size()), vb(v.size());
    zaya::f32_to_bf16_n(k.data(), kb.data(), k.size());
    zaya::f32_to_bf16_n(v.data(), vb.data(), v.size());

    fmt::print("cached attention, {} query heads, {} kv heads, head_dim {}; {} cached tokens\n", s.nq, s.nkv, s.hd,
               past);
    const auto report = [&](const char *what, int64_t n, double sec) {
        const double pairs = double(n) * double(past) + double(n) * double(n + 1) / 2;
        fmt::print("  {:<24} {:>5} rows  {:9.3f} ms  {:7.1f} GFLOP/s\n", what, n, sec * 1e3,
                   4.0 * pairs * double(s.hd * s.nq) / sec / 1e9);
    };
    for (int64_t n : chunk > 1 ? std::vector<int64_t>{chunk, 1} : std::vector<int64_t>{1}) {
        report("fp32 cache", n, best_seconds(reps, [&] {
                   zaya::cpu::attention_cached(out.data(), q.data(), k.data(), v.data(), n, past, s);
               }));
        report("bf16 cache", n, best_seconds(reps, [&] {
                   zaya::cpu::attention_cached(out.data(), q.data(), kb.data(), vb.data(), n, past, s);
               }));
    }
    return 0;
}
