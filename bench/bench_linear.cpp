// What a linear layer costs by input row count (ops/cpu/linear_bf16.h, linear_i8.h, linear_f32.h): the paths
// inference takes — dot passes for few rows (decoding, an expert's share of a prefill), a GEMM for many — with fp32
// and with bf16 activations, int8 weights, fp32 weights in SGEMMs of 8 rows and in dot passes (the batch-invariant
// path), the fp32 SGEMM on the same shape and the bf16 GEMM (oneDNN), in GFLOP/s.
//
//   zaya_bench_linear [--in I] [--out O] [--rows N,N,...] [--reps R]
//
// Defaults: ZAYA1-8B's expert up-projection (2048 → 4096) at 1 … 1024 rows, best of 5 calls after a warm-up.
#include "best_seconds.h"
#include "core/dtype.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/linear_bf16.h"
#include "ops/cpu/linear_f32.h"
#include "ops/cpu/linear_i8.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using zaya::bench::best_seconds;

int main(int argc, char **argv) {
    int64_t I = 2048, O = 4096;
    int reps = 5;
    std::vector<int64_t> rows = {1, 8, 16, 32, 48, 64, 96, 128, 256, 1024};
    for (int a = 1; a + 1 < argc; a += 2) {
        const std::string k = argv[a];
        if (k == "--in") I = std::atoll(argv[a + 1]);
        else if (k == "--out") O = std::atoll(argv[a + 1]);
        else if (k == "--reps") reps = std::atoi(argv[a + 1]);
        else if (k == "--rows") rows = zaya::bench::int_list(argv[a + 1]);
        else {
            fmt::print(stderr, "unknown option '{}' (--in, --out, --rows, --reps)\n", k);
            return 2;
        }
    }
    if (I < 1 || O < 1 || reps < 1 || rows.empty() || *std::min_element(rows.begin(), rows.end()) < 1) {
        fmt::print(stderr, "--in, --out, --reps and every --rows entry must be positive integers\n");
        return 2;
    }
    const int64_t N_max = *std::max_element(rows.begin(), rows.end());
    uint64_t s = 1;
    auto uniform = [&s] {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        return float(int64_t(s >> 40) - (int64_t(1) << 23)) / float(1 << 23);
    };
    std::vector<float> x(size_t(N_max * I)), w(size_t(O * I)), y(size_t(N_max * O));
    for (auto &v : x) v = uniform();
    for (auto &v : w) v = uniform() * 0.05f;
    std::vector<uint16_t> wb(w.size()), xb(x.size());
    zaya::f32_to_bf16_n(w.data(), wb.data(), w.size());
    zaya::f32_to_bf16_n(x.data(), xb.data(), x.size());
    std::vector<int8_t> q(w.size());
    std::vector<float> scales(size_t(O * zaya::cpu::i8_groups(I)));
    zaya::cpu::quantize_i8(q.data(), scales.data(), w.data(), O, I);

    using zaya::cpu::MatmulPrecision;
    fmt::print("linear {} → {}, GFLOP/s (best of {}) of bf16 weights by path and activations' precision, int8 "
               "weights, fp32 weights in 8-row SGEMMs and dot passes, and the fp32 / bf16 GEMMs\n",
               I, O, reps);
    fmt::print("{:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}\n", "rows", "f32 dot",
               "f32 panel", "bf16 dot", "bf16 gemm", "int8", "f32w slice", "f32w dot", "sgemm", "gemm bf16");
    for (const int64_t N : rows) {
        const double flop = 2.0 * double(N) * double(I) * double(O);
        auto rate = [&](const std::function<void()> &f) { return flop / best_seconds(reps, f) / 1e9; };
        using namespace zaya::cpu;
        auto bf16_weights = [&](int64_t dot_max, MatmulPrecision p) {
            return rate([&] { linear_bf16_with(y.data(), O, x.data(), wb.data(), nullptr, N, I, O, dot_max, p); });
        };
        const double f32_dot = bf16_weights(N, MatmulPrecision::F32), f32_panel = bf16_weights(0, MatmulPrecision::F32);
        const double bf_dot = bf16_weights(N, MatmulPrecision::BF16), bf_gemm = bf16_weights(0, MatmulPrecision::BF16);
        const double i8 = rate([&] { linear_i8(y.data(), O, x.data(), q.data(), scales.data(), nullptr, N, I, O); });
        const double f32w = rate([&] { linear_f32_with(y.data(), O, x.data(), w.data(), nullptr, N, I, O, N); });
        const double f32w_dot = rate([&] {
            linear_f32(y.data(), O, x.data(), w.data(), nullptr, N, I, O, MatmulPrecision::F32, true);
        });
        const double sg = rate([&] { gemm(false, true, N, O, I, 1.0f, x.data(), I, w.data(), I, 0.0f, y.data(), O); });
        const double bf =
            rate([&] { gemm_bf16(false, true, N, O, I, 1.0f, xb.data(), I, wb.data(), I, 0.0f, y.data(), O); });
        fmt::print("{:>6} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f}\n",
                   N, f32_dot, f32_panel, bf_dot, bf_gemm, i8, f32w, f32w_dot, sg, bf);
    }
    return 0;
}
