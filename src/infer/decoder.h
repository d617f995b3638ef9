// Cached decoding of a ZAYA1 model (spec A.9): a batch of sequences, each with its own SequenceCache, advances by
// a chunk of new tokens per call — a prompt chunk (prefill) or one token (decode). Sequences of different lengths
// share every matrix multiplication; attention, the conv state and the value state stay per sequence.
// Computes exactly what model_forward computes over the whole sequence (tests/unit/test_decoder.cpp).
#pragma once
#include "infer/kv_cache.h"
#include "infer/weights.h"
#include "ops/cpu/gemm.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace zaya {

// The precision of the activations the linears take when none is asked: bf16 for a model whose matrices are bf16 —
// as transformers runs a bf16 checkpoint, and llama.cpp a bf16 GGUF; twice the arithmetic rate on AVX512_BF16, and
// the bf16 GEMM for prompts (ops/cpu/linear_bf16.h) — else fp32 (fp32 matrices; int8 ones quantize their inputs).
// Whether this build's kernels give batch invariance (Decoder's batch_invariant): the AVX-512 ones sum a row alike
// in passes of 1 to 8 rows; the portable AVX2 build's keep more FMA chains per row for fewer rows.
bool batch_invariant_supported();

inline cpu::MatmulPrecision matmul_precision_for(std::optional<cpu::MatmulPrecision> asked, DType weight_dtype) {
    return asked.value_or(weight_dtype == DType::BF16 ? cpu::MatmulPrecision::BF16 : cpu::MatmulPrecision::F32);
}

class Decoder {
  public:
    // Scratch for up to max_tokens new tokens over up to max_seqs sequences per call, allocated here once. The
    // sequences' KV caches hold `kv_element` (F32 or BF16: infer/kv_cache.h KvRows); the linears take their rows
    // in `precision` (fp32, or rounded to bf16: mat_linear), nothing else does (the CCA convolution and attention
    // stay fp32, as transformers computes them). A sequence fed token by token and one prefilled compute the same
    // either way, up to the order of additions — or, batch_invariant, bit for bit: every op then takes its per-row
    // path whatever the rows in a call (the linears' dot passes, the conv's direct sums, attention row by row), so a
    // token's logits do not depend on the sequences beside it, on how its prompt was cut into chunks or on a
    // speculative draft (on AVX-512 builds: batch_invariant_supported()), at the cost of the GEMMs' speed on many
    // rows (docs/inference.md).
    Decoder(const InferModel &m, int64_t max_tokens, int64_t max_seqs, DType kv_element = DType::F32,
            cpu::MatmulPrecision precision = cpu::MatmulPrecision::F32, bool batch_invariant = false);

    SequenceCache new_sequence() const;

    // Appends chunks[i] to seqs[i] and writes the logits of each chunk's last token to logits[i, V] (with rows:
    // of chunk i's last rows[i] tokens, 1..its size, [Σ rows, V] in order: a scored prompt's every token, a
    // speculative draft's). Chunks must be non-empty; the total must fit max_tokens/max_seqs and no sequence may
    // pass max_position_embeddings (errors say which).
    void forward(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks,
                 float *logits, std::span<const int64_t> rows = {});

    // Feeds `tokens` to one sequence in chunks of at most max_tokens; logits of the last token into `logits`[V].
    void prefill(SequenceCache &seq, std::span<const int32_t> tokens, float *logits);

    const InferModel &model() const { return m_; }
    int64_t max_tokens() const { return max_tokens_; }
    int64_t max_seqs() const { return max_seqs_; }
    DType kv_dtype() const { return kv_element_; }
    cpu::MatmulPrecision precision() const { return precision_; }
    bool batch_invariant() const { return batch_invariant_; }

  private:
    void layer_forward(int64_t l, std::span<SequenceCache *const> seqs, int64_t N);
    void attention(int64_t l, std::span<SequenceCache *const> seqs); // appends to the caches, then attends
    // The snapshots of the state (SequenceCache::snapshot_every) the new tokens reach: made before the layers run,
    // each layer's part filled as it runs.
    void add_snapshots(std::span<SequenceCache *const> seqs);
    void fill_snapshots(int64_t l, std::span<SequenceCache *const> seqs);
    void router_and_experts(int64_t l, int64_t N);

    const InferModel &m_;
    int64_t max_tokens_, max_seqs_;
    DType kv_element_;
    cpu::MatmulPrecision precision_;
    bool batch_invariant_;
    std::vector<int64_t> start_;       // [B+1] rows of each sequence's new tokens
    std::vector<int64_t> start_ext_;   // [B+1] the same with the conv state rows in front
    std::vector<int32_t> tokens_, positions_, choice_, order_;
    std::vector<int64_t> offsets_;
    std::vector<size_t> snap_first_;   // [B] each sequence's first snapshot made by this call
    std::vector<float> x_, xn_, rstd_, z_, zx_, convx_, pbuf_, conv_, q_, k_, qn_, kn_, v_, vd_, att_, tmp_;
    std::vector<float> rope_cos_[2], rope_sin_[2];
    std::vector<float> rho_[2], h1_, rn_, rrstd_, a1_, h2_, rlogits_, probs_, psel_;
    std::vector<float> xg_, hh_, aa_, yy_, moe_;
    int rho_cur_ = 0;
};

} // namespace zaya
