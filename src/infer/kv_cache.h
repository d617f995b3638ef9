// What one sequence carries from token to token in cached decoding (spec A.9), per layer:
//   - the KV cache: post-norm, post-temperature, post-RoPE keys and the final values, [length, n_kv·hd] each;
//   - the conv state: the last conv_padding() raw pre-conv q‖k rows z (zeros for a fresh sequence);
//   - the delayed-value state: the previous token's delayed value projection (its bias for a fresh sequence).
// The router's depth state (EDA) needs no cache: it runs across layers within one token.
//
// The KV rows of a prefix are the prefix's own (causal attention), but the conv and value state are the last
// tokens' only; so a sequence can be cut back to a shorter length only where that state was kept: its snapshots.
#pragma once
#include "core/dtype.h"
#include "core/error.h"
#include "model/config.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

namespace zaya {

// One layer's cached keys or values of a sequence, row after row, in F32 or BF16: a bf16 cache holds half the
// bytes and a decoding step reads half of them (at long context more than the weights). Each value is rounded to
// nearest even once, as it is appended (f32_to_bf16: the GPU decoder's bits), and widened exactly as it is read.
class KvRows {
  public:
    explicit KvRows(DType element = DType::F32); // F32 or BF16
    DType element() const { return element_; }
    size_t size() const { return element_ == DType::BF16 ? bf16_.size() : f32_.size(); } // values held
    size_t bytes() const { return size() * dtype_size(element_); }
    void append(const float *values, size_t n);
    const float *f32() const { return f32_.data(); }       // F32 rows
    const uint16_t *bf16() const { return bf16_.data(); }  // BF16 rows
    KvRows first(size_t n) const;                          // a copy of the first n values
    void truncate(size_t n);                               // keeps the first n values
    void shrink_to_fit();

  private:
    DType element_;
    std::vector<float> f32_;
    std::vector<uint16_t> bf16_;
};

// The conv and value state after a sequence's first `length` tokens, all layers.
struct SequenceState {
    int64_t length = 0;
    std::vector<float> conv; // [layers, conv_padding, conv_channels]
    std::vector<float> vdel; // [layers, kv_dim/2]
};

// The KV cache's element: `asked` (F32 or BF16; fails naming anything else), by default BF16 when the attention
// projections' weights are (as `transformers` keeps a bf16 model's cache), else F32.
// Inline: the GPU decoder's tests link it without the rest of the inference code.
inline DType kv_dtype_for(std::optional<DType> asked, DType attention_weights) {
    if (asked && *asked != DType::F32 && *asked != DType::BF16)
        fail("the KV cache's element must be f32 or bf16, got {}", dtype_name(*asked));
    return asked.value_or(attention_weights == DType::BF16 ? DType::BF16 : DType::F32);
}

struct SequenceCache {
    int64_t length = 0; // tokens cached so far (= the position of the next token)
    std::vector<KvRows> k, v;             // per layer, [length, kv_dim]; grows with the sequence
    std::vector<float> conv;              // [layers, conv_padding, conv_channels]
    std::vector<float> vdel;              // [layers, kv_dim/2]
    // With snapshot_every > 0 the CPU decoder keeps the state at every multiple of it that the sequence reaches
    // (in increasing length): the lengths it can be cut back to (prefix(), for reuse by a later prompt:
    // infer/prefix_cache.h). ZAYA1-8B: 0.4 MiB a snapshot, against 5 MiB of KV rows per 64 tokens.
    int64_t snapshot_every = 0;
    int64_t snapshot_at = 0; // and, when > 0, at this length too (the engine: the prompt's end)
    std::vector<SequenceState> snapshots;
    // With draft_from > 0, also at every length from it up to (not including) where the next forward ends: a
    // speculative step's (infer/engine.h), whose draft is cut back, cut_back(), after the first token that differs.
    int64_t draft_from = 0;
    // On the GPU all of the above lives in a slot of the device decoder (infer/engine_decoder.cpp): its number,
    // returned to the decoder's free slots when the last copy of this sequence goes. Empty on the CPU.
    std::shared_ptr<const int64_t> device_slot;

    // Bytes held: grows linearly with length (the KV cache and snapshots) on top of a constant (conv and value state).
    size_t bytes() const;
    // Bytes per cached token, for a config: 2 (K and V) × layers × kv_dim × the element's bytes (F32 4, BF16 2).
    static size_t bytes_per_token(const ZayaConfig &c, DType element = DType::F32);

    // Whether the state after `n` tokens is held: n is the length or a snapshot's.
    bool can_cut_to(int64_t n) const;
    // Whether the state at length n is kept for prefix reuse (snapshot_every, snapshot_at).
    bool keeps_state_at(int64_t n) const {
        return (snapshot_every > 0 && n % snapshot_every == 0) || (snapshot_at > 0 && n == snapshot_at);
    }
    // Cuts this sequence back, in place, to its first n tokens (can_cut_to(n) must hold: the error says otherwise),
    // keeping the snapshots up to n that keeps_state_at() asks for; ends draft_from's. Host caches only.
    void cut_back(int64_t n);
    // A copy of this sequence cut back to its first n tokens (can_cut_to(n) must hold: the error says otherwise),
    // with the snapshots up to n and one at n itself, so that the copy can be cut back there again. Host caches only.
    SequenceCache prefix(int64_t n) const;
};

} // namespace zaya
