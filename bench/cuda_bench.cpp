// zaya_cuda_bench: the GPU's own ceilings and the speed of the CUDA kernels at ZAYA1-8B shapes, for
// scripts/gpu_check.sh. Prints one JSON object per line ({"bench": name, ...figures}); without a usable GPU it
// prints {"bench": "skipped", "why": ...} and exits 0.
//
//   matrix rate   cuBLASLt bf16 GEMM, fp32 accumulation, 8192³ (and the fp32 GEMM, no TF32): what MFU is measured
//                 against besides the 989 TFLOP/s datasheet peak
//   HBM           device-to-device copy of 4 GiB: read + write bytes per second, the decode bound's bandwidth
//   kernels       attention forward/backward (T = 4096, 16 query heads, 2 kv heads, head 128; fp32 and on bf16
//                 tensor cores), the grouped SwiGLU experts forward/backward on bf16 tensor cores (8192 tokens over
//                 16 experts, D = I = 2048), Newton–Schulz on a 2048 × 8192 matrix, the chunked LM head +
//                 cross-entropy (4096 rows, D 2048, V 262272)
//   decode        the batch-1 decode kernels at ZAYA1-8B shapes, each launched back to back in a CUDA graph as a
//                 step's are, over copies of its operands together larger than the L2 (each launch reads its own,
//                 from HBM): the matrix-vector linears (q‖k‖v, output projection, an expert's gate-up and down, the
//                 LM head) as weight bytes per second, and decode attention over a bf16 cache of 4k and 32k tokens
//                 as cache bytes per second: what each makes of the HBM bandwidth a decode step is bound by
// Timings are the best of `reps` runs after a warm-up, each ended by a device synchronise.
#include "ops/cuda/attention.h"
#include "ops/cuda/decode.h"
#include "ops/cuda/lm_head.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/muon.h"
#include "ops/cuda/ops.h"
#include "ops/cuda/runtime.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace zaya;

double best_seconds(const std::function<void()> &f, int reps) {
    f(); // warm-up: cuBLASLt heuristics, first-touch
    cuda::synchronize();
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        cuda::synchronize();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// Device buffers filled with small values (0xFF bytes would be NaNs and could take slow paths).
template <class T> cuda::DeviceArray<T> filled(size_t n, int byte) {
    cuda::DeviceArray<T> a(n);
    cuda::fill_bytes(a.data(), byte, n * sizeof(T));
    return a;
}

void print(const std::string &json) { std::printf("%s\n", json.c_str()), std::fflush(stdout); }

void bench_gemm() {
    const int64_t n = 8192;
    auto a16 = filled<uint16_t>(size_t(n * n), 0x3C), b16 = filled<uint16_t>(size_t(n * n), 0x3C);
    auto c = filled<float>(size_t(n * n), 0);
    const double flop = 2.0 * double(n) * double(n) * double(n);
    const double t16 = best_seconds(
        [&] { cuda::gemm_bf16(false, true, n, n, n, 1.0f, a16.data(), n, b16.data(), n, 0.0f, c.data(), n); }, 5);
    print("{\"bench\": \"gemm_bf16\", \"n\": 8192, \"seconds\": " + std::to_string(t16) +
          ", \"tflops\": " + std::to_string(flop / t16 / 1e12) + "}");
    auto a32 = filled<float>(size_t(n * n), 0x3C), b32 = filled<float>(size_t(n * n), 0x3C);
    const double t32 = best_seconds(
        [&] { cuda::gemm_f32(false, true, n, n, n, 1.0f, a32.data(), n, b32.data(), n, 0.0f, c.data(), n); }, 3);
    print("{\"bench\": \"gemm_f32\", \"n\": 8192, \"seconds\": " + std::to_string(t32) +
          ", \"tflops\": " + std::to_string(flop / t32 / 1e12) + "}");
}

void bench_hbm() {
    const size_t bytes = size_t(4) << 30;
    auto src = filled<uint8_t>(bytes, 1), dst = filled<uint8_t>(bytes, 0);
    const double t = best_seconds([&] { cuda::copy_on_device(dst.data(), src.data(), bytes); }, 5);
    print("{\"bench\": \"hbm_copy\", \"bytes\": " + std::to_string(bytes) + ", \"seconds\": " + std::to_string(t) +
          ", \"gbps_read_plus_write\": " + std::to_string(2.0 * double(bytes) / t / 1e9) + "}");
}

void bench_attention() {
    const int64_t T = 4096, nq = 16, nkv = 2, hd = 128;
    const cuda::AttnShape s{nq, nkv, hd, float(1.0 / std::sqrt(double(hd))), 0};
    const std::vector<int64_t> starts{0, T};
    cuda::DeviceArray<int64_t> seq(2);
    cuda::copy_to_device(seq.data(), starts.data(), sizeof(int64_t) * 2);
    const cuda::VarlenBatch batch{seq.data(), 1, T, T};
    auto q = filled<float>(size_t(T * nq * hd), 0x3C), k = filled<float>(size_t(T * nkv * hd), 0x3C);
    auto v = filled<float>(size_t(T * nkv * hd), 0x3C), out = filled<float>(size_t(T * nq * hd), 0);
    auto lse = filled<float>(size_t(T * nq), 0), dout = filled<float>(size_t(T * nq * hd), 0x3C);
    auto dq = filled<float>(size_t(T * nq * hd), 0), dk = filled<float>(size_t(T * nkv * hd), 0);
    auto dv = filled<float>(size_t(T * nkv * hd), 0);
    // Causal: half of the T² score matrix; forward 2 GEMM-like products, backward 5.
    const double pair_flop = 2.0 * double(T) * double(T) / 2 * double(hd) * double(nq);
    for (bool bf16 : {false, true}) {
        auto bwd = bf16 ? cuda::attention_backward_bf16 : cuda::attention_backward;
        const double tf = best_seconds(
            [&] {
                if (bf16) cuda::attention_forward_bf16(out.data(), lse.data(), q.data(), k.data(), v.data(), batch, s);
                else cuda::attention_forward(out.data(), lse.data(), q.data(), k.data(), v.data(), batch, s);
            },
            3);
        const double tb = best_seconds(
            [&] {
                bwd(dq.data(), dk.data(), dv.data(), dout.data(), out.data(), lse.data(), q.data(), k.data(), v.data(),
                    batch, s);
            },
            3);
        print(std::string("{\"bench\": \"") + (bf16 ? "attention_bf16" : "attention") +
              "\", \"T\": 4096, \"nq\": 16, \"nkv\": 2, \"hd\": 128, \"forward_ms\": " + std::to_string(tf * 1e3) +
              ", \"forward_tflops\": " + std::to_string(2 * pair_flop / tf / 1e12) +
              ", \"backward_ms\": " + std::to_string(tb * 1e3) +
              ", \"backward_tflops\": " + std::to_string(5 * pair_flop / tb / 1e12) + "}");
    }
}

// The routed experts as in training under --precision bf16: tokens spread evenly over the experts (none to the skip
// slot), the grouped GEMMs on tensor cores. Forward 3 products of 2·N·D·I each (gate, up, down), backward 6.
void bench_experts() {
    const int64_t N = 8192, D = 2048, I = 2048, E = 16;
    const cuda::MoeShape s{D, I, E, false};
    std::vector<int32_t> ch(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) ch[size_t(n)] = int32_t((n * 7) % E);
    cuda::DeviceArray<int32_t> choice(ch.size()), order(ch.size());
    cuda::copy_to_device(choice.data(), ch.data(), sizeof(int32_t) * ch.size());
    cuda::DeviceArray<int64_t> offsets(size_t(E + 2));
    cuda::moe_group_tokens(order.data(), offsets.data(), choice.data(), N, E);
    auto x = filled<float>(size_t(N * D), 0x3C), p = filled<float>(size_t(N), 0x3C);
    auto gate_up = filled<float>(size_t(E * 2 * I * D), 0x3C), down = filled<float>(size_t(E * D * I), 0x3C);
    auto out = filled<float>(size_t(N * D), 0), xg = filled<float>(size_t(N * D), 0);
    auto y = filled<float>(size_t(N * D), 0);
    auto h = filled<float>(size_t(N * 2 * I), 0), a = filled<float>(size_t(N * I), 0);
    auto dout = filled<float>(size_t(N * D), 0x3C), dx = filled<float>(size_t(N * D), 0);
    auto dp = filled<float>(size_t(N), 0);
    auto dgu = filled<float>(size_t(E * 2 * I * D), 0), ddown = filled<float>(size_t(E * D * I), 0);
    auto dy = filled<float>(size_t(N * D), 0), da = filled<float>(size_t(N * I), 0);
    auto dh = filled<float>(size_t(N * 2 * I), 0), dxg = filled<float>(size_t(N * D), 0);
    // The weights' bf16 copies, as the backend keeps them through a training step's micro-batches.
    cuda::DeviceArray<uint16_t> gate_up16(gate_up.size()), down16(down.size());
    cuda::to_bf16(gate_up16.data(), gate_up.data(), int64_t(gate_up.size()));
    cuda::to_bf16(down16.data(), down.data(), int64_t(down.size()));
    const cuda::ExpertWeightsBf16 w16{gate_up16.data(), down16.data()};
    const double tf = best_seconds(
        [&] {
            cuda::moe_experts_forward(out.data(), xg.data(), h.data(), a.data(), y.data(), x.data(), order.data(),
                                      offsets.data(), p.data(), gate_up.data(), down.data(), N, s, &w16);
        },
        3);
    const double tb = best_seconds(
        [&] {
            cuda::moe_experts_backward(dx.data(), dp.data(), dgu.data(), ddown.data(), dy.data(), da.data(), dh.data(),
                                       dxg.data(), dout.data(), order.data(), offsets.data(), p.data(), xg.data(),
                                       h.data(), a.data(), y.data(), gate_up.data(), down.data(), N, s, &w16);
        },
        3);
    const double product = 2.0 * double(N) * double(D) * double(I);
    print("{\"bench\": \"experts_bf16\", \"N\": 8192, \"D\": 2048, \"I\": 2048, \"E\": 16, \"forward_ms\": " +
          std::to_string(tf * 1e3) + ", \"forward_tflops\": " + std::to_string(3 * product / tf / 1e12) +
          ", \"backward_ms\": " + std::to_string(tb * 1e3) +
          ", \"backward_tflops\": " + std::to_string(6 * product / tb / 1e12) + "}");
}

void bench_newton_schulz() {
    const int64_t rows = 2048, cols = 8192;
    auto x = filled<float>(size_t(rows * cols), 0x3C);
    cuda::NewtonSchulzBf16 ns(size_t(rows * cols), rows);
    const double t = best_seconds([&] { ns.run(x.data(), rows, cols, {3.4445f, -4.7750f, 2.0315f, 5, 1e-7f}); }, 3);
    const double m = double(rows), n = double(cols);
    const double flop = 5 * (4 * m * m * n + 2 * m * m * m);
    print("{\"bench\": \"newton_schulz_bf16\", \"rows\": 2048, \"cols\": 8192, \"ms\": " + std::to_string(t * 1e3) +
          ", \"tflops\": " + std::to_string(flop / t / 1e12) + "}");
}

void bench_lm_head() {
    const int64_t N = 4096, D = 2048, V = 262272;
    auto x = filled<float>(size_t(N * D), 0x3C), W = filled<float>(size_t(V * D), 0x3C);
    auto dx = filled<float>(size_t(N * D), 0), dW = filled<float>(size_t(V * D), 0);
    std::vector<int32_t> t(static_cast<size_t>(N));
    for (int64_t i = 0; i < N; ++i) t[size_t(i)] = int32_t((i * 7919) % V);
    cuda::DeviceArray<int32_t> targets(static_cast<size_t>(N));
    cuda::copy_to_device(targets.data(), t.data(), sizeof(int32_t) * size_t(N));
    const int64_t chunk = cuda::lm_head_chunk_rows(V);
    const double sec = best_seconds(
        [&] {
            cuda::lm_head_cross_entropy(dx.data(), dW.data(), nullptr, x.data(), W.data(), nullptr, targets.data(),
                                        N, D, V, 1.0f, chunk);
        },
        2);
    const double flop = 3 * 2.0 * double(N) * double(D) * double(V);
    print("{\"bench\": \"lm_head_cross_entropy\", \"N\": 4096, \"D\": 2048, \"V\": 262272, \"chunk_rows\": " +
          std::to_string(chunk) + ", \"ms\": " + std::to_string(sec * 1e3) +
          ", \"tflops\": " + std::to_string(flop / sec / 1e12) + "}");
}

// Seconds per launch of launch(0 … n−1), launched back to back as one CUDA graph (as a decode step's kernels are):
// one eager launch first (kernel attributes, first touch), then the best of 3 replays.
double graph_seconds_per_launch(int n, const std::function<void(int)> &launch) {
    launch(0);
    cuda::Graph g;
    g.capture([&] {
        for (int i = 0; i < n; ++i) launch(i);
    });
    return best_seconds([&] { g.launch(); }, 3) / n;
}

// Copies of a buffer of `bytes` that together pass 512 MiB (the L2 holds 50 MiB), at most 64: launch i reads copy
// i % copies, so each launch streams its operand from HBM as a step's layers do.
int copies_past_l2(double bytes) { return int(std::clamp(std::ceil(double(512 << 20) / bytes), 4.0, 64.0)); }

void bench_decode() {
    const int64_t D = 2048, I = 2048, V = 262272, Dq = 1024, C = 1536; // ZAYA1-8B: q‖k‖v rows, 8 heads of 128
    auto x = filled<float>(size_t(2 * I), 0x3C);
    auto y = filled<float>(size_t(V), 0);
    struct Linear {
        const char *name;
        int64_t O, In;
    };
    for (const Linear &m : {Linear{"qkv", C, D}, Linear{"o_proj", D, Dq}, Linear{"expert_gate_up", 2 * I, D},
                            Linear{"expert_down", D, I}, Linear{"lm_head", V, D}}) {
        const double bytes = 2.0 * double(m.O) * double(m.In);
        const int n = m.O == V ? 4 : copies_past_l2(bytes); // the LM head alone is 1 GiB
        auto W = filled<uint16_t>(size_t(m.O * m.In) * size_t(m.O == V ? 1 : n), 0x3C);
        const double t = graph_seconds_per_launch(n, [&](int i) {
            const uint16_t *w = W.data() + (m.O == V ? 0 : size_t(i) * size_t(m.O * m.In));
            cuda::linear_rows_bf16(y.data(), m.O, x.data(), w, nullptr, 1, m.In, m.O);
        });
        print(std::string("{\"bench\": \"decode_linear_bf16\", \"name\": \"") + m.name + "\", \"rows\": " +
              std::to_string(m.O) + ", \"cols\": " + std::to_string(m.In) + ", \"us\": " + std::to_string(t * 1e6) +
              ", \"weight_tbps\": " + std::to_string(bytes / t / 1e12) + "}");
    }
    // Attention of one new token over `ctx` cached ones: 8 query heads over 2 kv heads of 128, 32 key splits.
    const cuda::AttnShape s{8, 2, 128, float(1.0 / std::sqrt(128.0)), 0};
    for (const int64_t ctx : {int64_t(4096), int64_t(32768)}) {
        const int64_t width = s.nkv * s.hd;
        const double bytes = 2.0 * double(ctx * width) * 2.0; // keys and values, bf16
        const int n = copies_past_l2(bytes);
        auto kc = filled<uint16_t>(size_t(ctx * width) * size_t(n), 0x3C);
        auto vc = filled<uint16_t>(size_t(ctx * width) * size_t(n), 0x3C);
        auto q = filled<float>(size_t(s.nq * s.hd), 0x3C), out = filled<float>(size_t(s.nq * s.hd), 0);
        const int64_t splits = 32;
        auto part_o = filled<float>(size_t(splits * s.nq * s.hd), 0);
        auto part_ml = filled<float>(size_t(splits * s.nq * 2), 0);
        auto counters = filled<unsigned>(size_t(s.nq + 1), 0);
        const int32_t at = int32_t(ctx - 1); // the new token's position: it sees all ctx keys
        cuda::DeviceArray<int32_t> length(1);
        cuda::copy_to_device(length.data(), &at, sizeof at);
        const double t = graph_seconds_per_launch(n, [&](int i) {
            const size_t off = size_t(i) * size_t(ctx * width);
            cuda::attention_decode(out.data(), part_o.data(), part_ml.data(), q.data(), kc.data() + off,
                                   vc.data() + off, length.data(), 1, s, splits, counters.data());
        });
        print("{\"bench\": \"decode_attention_bf16_cache\", \"context\": " + std::to_string(ctx) +
              ", \"us\": " + std::to_string(t * 1e6) + ", \"cache_tbps\": " + std::to_string(bytes / t / 1e12) + "}");
    }
}

} // namespace

int main() {
    std::string why;
    if (!cuda::device_available(&why)) {
        std::replace(why.begin(), why.end(), '"', '\'');
        print("{\"bench\": \"skipped\", \"why\": \"" + why + "\"}");
        return 0;
    }
    print("{\"bench\": \"device\", \"name\": \"" + cuda::device_description() + "\"}");
    // Each benchmark on its own: a failure (an unsupported cuBLASLt layout, say) is reported and the rest run.
    const std::pair<const char *, void (*)()> all[] = {{"gemm", bench_gemm},
                                                       {"hbm", bench_hbm},
                                                       {"attention", bench_attention},
                                                       {"experts", bench_experts},
                                                       {"newton_schulz", bench_newton_schulz},
                                                       {"lm_head", bench_lm_head},
                                                       {"decode", bench_decode}};
    int failed = 0;
    for (const auto &[name, f] : all) {
        try {
            f();
        } catch (const std::exception &e) {
            ++failed;
            std::string msg = e.what();
            std::replace(msg.begin(), msg.end(), '"', '\'');
            std::replace(msg.begin(), msg.end(), '\n', ' ');
            print("{\"bench\": \"" + std::string(name) + "\", \"error\": \"" + msg + "\"}");
        }
    }
    return failed ? 1 : 0;
}
