// What one sequence carries from token to token in cached decoding (spec A.9), per layer:
//   - the KV cache: post-norm, post-temperature, post-RoPE keys and the final values, [length, n_kv·hd] each;
//   - the conv state: the last conv_padding() raw pre-conv q‖k rows z (zeros for a fresh sequence);
//   - the delayed-value state: the previous token's delayed value projection (its bias for a fresh sequence).
// The router's depth state (EDA) needs no cache: it runs across layers within one token.
#pragma once
#include "core/dtype.h"
#include "model/config.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace zaya {

struct SequenceCache {
    int64_t length = 0; // tokens cached so far (= the position of the next token)
    std::vector<std::vector<float>> k, v; // per layer, [length, kv_dim]; grows with the sequence
    std::vector<float> conv;              // [layers, conv_padding, conv_channels]
    std::vector<float> vdel;              // [layers, kv_dim/2]
    // On the GPU all of the above lives in a slot of the device decoder (infer/engine_decoder.cpp): its number,
    // returned to the decoder's free slots when the last copy of this sequence goes. Empty on the CPU.
    std::shared_ptr<const int64_t> device_slot;

    // Bytes held: grows linearly with length (the KV cache) on top of a constant (conv and value state).
    size_t bytes() const;
    // Bytes per cached token, for a config: 2 (K and V) × layers × kv_dim × the element's bytes (4 here; the GPU
    // decoder's cache may be bf16: 2).
    static size_t bytes_per_token(const ZayaConfig &c, DType element = DType::F32);
};

} // namespace zaya
