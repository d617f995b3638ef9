// What the Engine (engine.h) runs its steps on: the CPU Decoder (many sequences in one forward) or, with
// device "cuda", the GPU's CudaDecoder (up to 8 sequences, each in a slot of its device cache: their decode steps
// run together, and a step's prompt chunks together as one prefill pass of their slots).
#pragma once
#include "infer/kv_cache.h"
#include "infer/weights.h"
#include "ops/cpu/gemm.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

namespace zaya {

class EngineDecoder {
  public:
    virtual ~EngineDecoder() = default;
    virtual int64_t max_seqs() const = 0;   // sequences alive at once
    virtual int64_t max_length() const = 0; // tokens one sequence may hold, prompt and generated
    virtual std::string device() const = 0; // "cpu", or the GPU's description
    virtual DType kv_dtype() const = 0;     // the KV cache's element: F32 or BF16
    // The precision of the rows the linears take, for banners: "fp32" or "bf16" on the CPU (Decoder's precision;
    // "int8" for int8 weights, which quantize them); on the GPU "bf16" for bf16 weights (its kernels round the rows,
    // in decode steps and prefill passes alike), else "fp32".
    virtual std::string matmul_inputs() const = 0;
    virtual bool batch_invariant() const = 0; // whether a token's logits are the same bits whatever runs beside it
    // Whether its sequences live on the host, where they can be copied and cut back (SequenceCache::prefix) for
    // prefix reuse: the CPU's; the GPU's live in device slots, and are only continued whole.
    virtual bool host_cache() const = 0;
    // A fresh sequence (on the GPU a free slot of its device cache, reset; it fails when none is free).
    virtual SequenceCache new_sequence() = 0;
    // Whether new_sequence() can give one now: always on the CPU; on the GPU while a slot is free (a slot returns
    // when the last copy of its sequence goes, e.g. when the prefix cache drops it).
    virtual bool can_start_sequence() const = 0;
    // Appends chunks[i] to seqs[i]. Writes the logits of each chunk's last token to logits[i, V] or, when logits is
    // null, only their argmax (the greedy token, lowest id on ties) to greedy[i]: on the GPU that spares
    // downloading V floats per token.
    virtual void forward(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks,
                         float *logits, int32_t *greedy) = 0;
    // forward with logits, and also the logits of every token of chunks[scored] to rows[chunks[scored].size(), V]:
    // what a prompt's log-probabilities are computed from.
    virtual void forward_scored(std::span<SequenceCache *const> seqs,
                                std::span<const std::span<const int32_t>> chunks, float *logits, size_t scored,
                                float *rows) = 0;
    // Appends chunks[i] to seqs[i] and writes the logits of chunk i's last rows[i] tokens, [Σ rows, V] in order: a
    // speculative step's (a decoding sequence's last token and its draft, each row checked against the draft).
    // Host caches only (the CPU's): where a draft that differs is cut back (SequenceCache::cut_back).
    virtual void forward_rows(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks,
                              std::span<const int64_t> rows, float *logits) = 0;
};

struct EngineDecoderOptions {
    std::string device = "cpu"; // cpu | cuda
    int64_t max_tokens = 272;   // cpu: new tokens per forward (a prompt chunk plus one per decoding sequence)
    int64_t max_seqs = 16;      // sequences per forward (cuda: at most 8, each a slot of the device cache)
    int64_t max_length = 0;     // tokens per sequence; 0: the model's context (cpu), min(context, 32768) (cuda)
    std::optional<DType> kv_dtype{}; // the KV cache's element, F32 or BF16; unset: BF16 for a bf16 model, else F32
                                     // (kv_dtype_for in infer/kv_cache.h), on either device
    // cpu: the precision of the rows the linears take; unset: bf16 for a bf16 model, else fp32
    // (matmul_precision_for in infer/decoder.h). The GPU decoder takes what unset gives and refuses another.
    std::optional<cpu::MatmulPrecision> precision{};
    bool batch_invariant = false; // cpu only: Decoder's batch_invariant (the GPU decoder refuses it)
};

// Prompt tokens an engine step feeds by default: 256 on the CPU (its decoder's working memory grows with the chunk);
// on the GPU one full GEMM prefill pass (CudaDecoder::Options::prefill_chunk, 2048), which reads ZAYA1-8B's ~16 GB
// of experts once for 2048 rows where 256-row pieces read them 8 times; the other sequences' steps wait for one pass.
int64_t default_prefill_chunk(const std::string &device);

// The rows the GPU decoder's linears take: what `auto` chooses (matmul_precision_for: bf16 rows for bf16 weights,
// fp32 for fp32); `asked` (--precision) must be that or unset, else it fails naming both.
cpu::MatmulPrecision gpu_matmul_precision(std::optional<cpu::MatmulPrecision> asked, DType weight_dtype);

// Prompt tokens per step on the CPU while no sequence decodes (`zaya generate`, `zaya chat`, and `zaya serve` until
// a request decodes: Engine::sole_prefill_chunk): nothing waits on the prompts, so they are fed in larger pieces,
// where each expert's share of the rows reaches the GEMM (ZAYA1-8B shapes, 4 layers, bf16 rows, a 2048-token prompt:
// 797–825 tokens/s against 556–572 in pieces of 256) for ~100 MB more of the decoder's working memory at ZAYA1-8B's
// widths.
inline constexpr int64_t kCpuSolePrefillChunk = 1024;
// The CPU decoder's rows for one prompt of `prompt_tokens` fed alone (`zaya generate`, `bench decode`): the prompt,
// up to kCpuSolePrefillChunk, so a short prompt's scratch stays small.
inline int64_t cpu_sole_prompt_chunk(int64_t prompt_tokens) {
    return std::clamp<int64_t>(prompt_tokens, 1, kCpuSolePrefillChunk);
}

// Fails naming the device if it is unknown or unavailable (no GPU, or a build without CUDA).
std::unique_ptr<EngineDecoder> make_engine_decoder(const InferModel &m, const EngineDecoderOptions &o);

} // namespace zaya
