// Shared by the `zaya bench` subcommands (cmd_bench.cpp, bench_checkpoint.cpp).
#pragma once
#include "core/dtype.h"
#include "data/loader.h"

#include <cstdint>
#include <optional>
#include <string>

namespace zaya::cli {

struct BenchArgs {
    std::string what, model = "small", dir = ".";
    int64_t seq_len = 512, batch = 2, iters = 5, gemm_n = 2048, micro_batch = 0;
    bool json = false;
    bool phases = false; // train: one more step timed by phase (Backend::phase), printed after the medians
    std::string ns_precision = "bf16"; // train
    // train: the matmuls' operands (auto: fp32); decode: the rows the linears take (auto: the model's,
    // matmul_precision_for in infer/decoder.h)
    std::string precision = "auto";
    std::string device = "cpu";                             // train, forward, decode
    // decode
    std::string dtype = "bf16";
    std::string quantize = "none"; // decode: none | int8 (InferModel::quantize_i8)
    int64_t layers = 0, prompt_tokens = 128, new_tokens = 32;
    int64_t seqs = 1; // decode --device cuda: sequences stepped together (slots), measured after batch 1
    std::optional<DType> kv_dtype{}; // decode: the KV cache's element (unset: the device's default)
    int64_t context_tokens = 0;      // decode --device cuda: also decode after a prompt this long (0: no)
    int64_t prefill_chunk = 0;       // decode, cpu: prompt tokens per forward (0: the engine's default)
    int64_t speculative_tokens = 0;  // decode, cpu: also time speculative steps of 1 + this many tokens (0: no)
    bool batch_invariant = false;    // decode, cpu: the Decoder's batch-invariant paths
};

// Random token rows (seq + 1 tokens each) from a fixed-seed generator: a training step costs the same whatever
// the text, and every run of a benchmark feeds the same tokens.
class RandomTokens {
  public:
    RandomTokens(int64_t seq, int64_t vocab) : seq_(seq), vocab_(vocab) {}
    TokenBatch operator()(int64_t rows);

  private:
    int64_t seq_, vocab_;
    uint64_t x_ = 42;
};

void bench_checkpoint(const BenchArgs &a);
void bench_decode(const BenchArgs &a);
void bench_decode_cuda(const BenchArgs &a); // --device cuda

} // namespace zaya::cli
