// Cached decoding on the GPU: what infer/decoder.h computes, with the weights uploaded once in their dtype (bf16
// stays bf16) and, for each of max_seqs sequences ("slots"), the KV cache, conv state and value state preallocated
// on the device up to a maximum length. A prompt is prefilled into one slot (prompts arriving together into theirs
// in one pass); a decode step advances any set of slots together, one token each, reading the weights once. A step
// allocates nothing and waits for the device only to download the logits (or the greedy tokens); the cache lengths
// live in device memory, so the step's kernels read them there (ops/cuda/decode.h).
// Built into the CUDA library (zaya_cuda); without CUDA, infer/no_cuda_decoder.cpp fails with a clear message.
#pragma once
#include "core/error.h"
#include "infer/kv_cache.h"
#include "infer/weights.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace zaya {

// Host views of what a decoder reads: InferModel's, or a test's own (tests/cuda/test_cuda_decode.cpp).
struct DecodeWeights {
    const ZayaConfig &config;
    const ModelWeights &small; // fp32 vectors; matrix pointers unused
    const Mat &embed, &lm_head;
    const std::vector<LayerMats> &layers;
};

class CudaDecoder {
  public:
    struct Options {
        int64_t max_len = 4096;   // tokens the device cache holds, per sequence
        int64_t max_chunk = 8;    // rows per GEMV pass: a prefill of at most this many tokens (and a prompt's
                                  // last few) runs as matrix-vector kernels, reading the weights once per pass
        int64_t prefill_chunk = 2048; // rows per GEMM pass: a longer prompt is prefilled in passes of up to this
                                      // many rows through cuBLASLt and the grouped expert GEMMs, each weight read
                                      // once per pass (0: GEMV passes only). Also the GEMM passes' buffers' height.
                                      // 2048: ZAYA1-8B's experts are ~16 GB, read in ~3.5 ms, about what 2048 rows'
                                      // matrix work takes; and attention's 64-row query tiles × 8 heads make 256
                                      // blocks, 2 per H200 SM, however long the cache
        int64_t attn_splits = 32; // blocks per (query, head) in attention (flash-decoding; 32 × ZAYA1-8B's 8 heads
                                  // = 256 blocks, about 2 per H200 SM)
        bool graph = true;        // replay decode steps as a CUDA graph (captured after one eager step)
        int64_t max_seqs = 1;     // sequences held at once ("slots"); a step advances any of them together,
                                  // reading the weights once for all (every slot's row is computed)
        std::optional<DType> kv_dtype{}; // the KV cache's element, F32 or BF16. Unset: BF16 when the attention
                                         // projections are bf16 (half the bytes to hold, and to read at long context;
                                         // each key and value rounded once, as it is appended), else F32
    };
    CudaDecoder(const InferModel &m, const Options &o);
    CudaDecoder(const DecodeWeights &w, const Options &o);
    ~CudaDecoder();
    CudaDecoder(const CudaDecoder &) = delete;
    CudaDecoder &operator=(const CudaDecoder &) = delete;

    // One sequence (slot 0).
    void reset(); // every slot empty
    // Appends the tokens (in passes of prefill_chunk rows while more than max_chunk are left, then of max_chunk) and
    // writes the last one's logits to logits[V].
    void prefill(std::span<const int32_t> tokens, float *logits);
    // Appends one token; logits[V] of it. Between the upload of the token and the download of the logits, nothing
    // waits for the device.
    void step(int32_t token, float *logits);
    // The same, returning only the greedy token (the argmax of the logits, lowest id on ties; computed on the
    // device, so a step downloads 4 bytes instead of 4·V).
    int32_t prefill_greedy(std::span<const int32_t> tokens);
    int32_t step_greedy(int32_t token);
    int64_t length() const;

    // Several sequences: slots 0 … max_seqs−1.
    void reset(int64_t slot);
    void prefill(int64_t slot, std::span<const int32_t> tokens, float *logits);
    int32_t prefill_greedy(int64_t slot, std::span<const int32_t> tokens);
    // prefill, writing every token's logits to rows[tokens.size(), V] (a prompt's log-probabilities): each pass's
    // rows go through the LM head 64 at a time and are downloaded.
    void prefill_rows(int64_t slot, std::span<const int32_t> tokens, float *rows);
    // Appends chunks[i] to slot slots[i] (distinct slots): the last token's logits of each into logits[i, V], or
    // with logits null their argmax into greedy[i]. Several chunks of at most prefill_chunk tokens in all run as one
    // GEMM pass (each weight read once for all of them, each expert once for the rows that chose it; each chunk's
    // conv and attention over its own slot); otherwise (one chunk, more tokens, or no GEMM passes) each chunk is
    // prefill(slot, …) in turn.
    void prefill(std::span<const int64_t> slots, std::span<const std::span<const int32_t>> chunks, float *logits,
                 int32_t *greedy);
    // One decode step of every slot s with tokens[s] ≥ 0 (tokens has max_seqs entries; −1: the slot is left as it
    // is), in one pass over the weights: logits[s, V] of each stepped slot, or with logits null the greedy token of
    // each stepped slot in greedy[s].
    void step(std::span<const int32_t> tokens, float *logits, int32_t *greedy);
    int64_t length(int64_t slot) const;
    int64_t max_seqs() const;
    int64_t passes() const; // passes over the weights so far: prefill passes (GEMV or GEMM) and decode steps

    // Whether the decode step's graph launches its kernels with programmatic dependent launch (ops/cuda/launch.cuh;
    // on by default where the device has it). Changing it captures the graph again at the next step.
    void set_dependent_launch(bool on);
    bool dependent_launch() const; // on, and the device and environment allow it

    size_t weight_bytes() const; // device bytes of the uploaded weights
    DType kv_dtype() const;      // the KV cache's element (Options::kv_dtype, resolved)
    // Options::kv_dtype resolved for these layers (BF16 when their attention projections are; fails if asked for
    // neither F32 nor BF16).
    static DType kv_dtype_for(std::optional<DType> asked, const std::vector<LayerMats> &layers) {
        return zaya::kv_dtype_for(asked, layers.empty() ? DType::F32 : layers[0].q_proj.dtype);
    }
    size_t step_kernels() const; // kernels in the captured decode step graph (0 before the second step)

    // The device's read bandwidth in bytes/s: the best of `reps` timed reads of a `bytes` buffer.
    static double measure_read_bandwidth(size_t bytes, int reps);
    static std::string device_description();

  private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

} // namespace zaya
