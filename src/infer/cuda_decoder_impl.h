// CudaDecoder's state and passes (infer/cuda_decoder.h), shared by its two files: cuda_decoder.cpp (the weights'
// upload, the decode step and prefill in passes of a few rows as GEMV kernels) and cuda_decoder_prefill.cpp (prefill
// passes of many rows as GEMMs). Internal: nothing outside those two includes it.
#pragma once
#include "infer/cuda_decoder.h"
#include "ops/cuda/decode.h"
#include "ops/cuda/runtime.h"

#include <initializer_list>
#include <optional>
#include <type_traits>
#include <utility>

namespace zaya {

namespace cuda_decoding {

using cuda::DeviceArray;

// A matrix on the device, in its dtype ([rows, cols]; experts stacked as [E·rows, cols]).
struct DevMat {
    DeviceArray<uint8_t> buf;
    DType dtype = DType::F32;
    int64_t rows = 0, cols = 0;
};

inline const uint16_t *bf16_of(const DevMat &W) { return reinterpret_cast<const uint16_t *>(W.buf.data()); }
inline const float *f32_of(const DevMat &W) { return reinterpret_cast<const float *>(W.buf.data()); }

struct DevLayer {
    DevMat qkv, o_proj, router_down, router_fc1, router_fc2, router_out, gate_up, down; // qkv = q‖k‖v_cur‖v_del
    const float *input_norm, *qkv_bias, *conv_dw, *conv_dw_bias, *conv_g, *conv_g_bias, *temp, *o_bias,
        *attn_res[4], *post_norm, *router_down_bias, *router_state_scale, *router_norm, *router_fc1_bias,
        *router_fc2_bias, *balancing_biases, *mlp_res[4];
    // Per slot (Options::max_seqs of them), slot-major:
    DeviceArray<uint8_t> kc, vc; // [slots, max_len, Dk] of Impl::kv (Impl::with_kv gives them typed)
    DeviceArray<float> zx;      // [slots, P + max_chunk, C]: the conv state (first P rows), then new rows' q‖k
    DeviceArray<float> vstate;  // [slots, Dv]: the delayed-value state
    std::vector<float> vstate0; // [Dv] its value for a fresh sequence (the delayed projection's bias, or zeros)
};

} // namespace cuda_decoding

struct CudaDecoder::Impl {
    template <class T> using DeviceArray = cuda::DeviceArray<T>;
    using DevMat = cuda_decoding::DevMat;
    using DevLayer = cuda_decoding::DevLayer;

    ZayaConfig c;
    Options o;
    int64_t D, C, P, Dq, Dk, Dv, nq, nkv, hd, R, K, E, I, V;
    int64_t S, SR;               // slots; rows of a slot's zx region (P + max_chunk)
    int64_t NP = 0;              // rows of a GEMM prefill pass (Options::prefill_chunk; 0: none, see Impl())
    int64_t N0 = 0;              // rows of a GEMV pass or a step: max(max_chunk, slots)
    std::vector<DeviceArray<float>> vectors; // every small fp32 vector
    DevMat embed, lm_head;
    const float *input_scale, *input_bias, *final_norm, *lm_head_bias;
    std::vector<DevLayer> layers;
    std::vector<int64_t> lengths; // per slot, on the host (the device's copy: len)
    size_t weight_bytes = 0;
    DType kv = DType::F32; // the KV cache's element: F32 or BF16 (Options::kv_dtype)

    // Rows of x: a prefill pass's tokens (≤ max_chunk, or ≤ NP in a GEMM pass) or a step's slots. Conv rows: every
    // slot's zx region, or a pass's [state ; new rows].
    DeviceArray<float> x, xn, rstd, convx, pbuf, q, k, v, qn, kn, att, tmp, rho[2], h1;
    DeviceArray<float> probs, psel, hh, moe, logits, part_o, part_ml, cos_t[2], sin_t[2], inv_freq[2];
    DeviceArray<int32_t> tokens, pos, choice, len, active, best, best_part_i; // best: the argmax of each logits row
    DeviceArray<float> best_part_v;
    DeviceArray<float> scored; // [kScoredRows, V]: rows of a scored prompt through the LM head (allocated on first use)
    DeviceArray<unsigned> counters; // the kernels finished by their last block (decode.h): zeros between kernels
    DeviceArray<int64_t> seq_one, seq_slots; // the conv's batches: a pass's [state ; n rows] per slot (S + 1
                                             // starts), every slot's region (a step)
    DeviceArray<int64_t> seq_new;            // [2·S]: {0, n} per segment of a GEMM pass: its new rows as one
                                             // sequence (its attention)
    std::vector<int64_t> described;          // what seq_one and seq_new hold (uploaded when a pass differs)
    int64_t rot_half[2] = {0, 0};
    // A GEMM pass's own (NP > 0): the bf16 copy of the rows a bf16 GEMM reads [NP, max(D, Dq)]; [state ; new rows]
    // of the conv per segment [S·P + NP, C] (a slot's zx region holds only max_chunk new rows); with several slots,
    // the new rows' q‖k [NP, C] before they go behind their states; the experts' grouped rows.
    DeviceArray<uint16_t> rows16;
    DeviceArray<float> zx_pass, qk_rows, xg, ea, ey; // xg, ey [NP, D]; ea [NP, I] (the gate-up outputs go to hh)
    DeviceArray<int32_t> order;             // [NP] the rows grouped by expert
    DeviceArray<int64_t> offsets;           // [E + 2]

    const float *up(const float *h, int64_t n); // an fp32 vector uploaded (null stays null)
    cuda_decoding::DevMat mat(const Mat &m);
    cuda_decoding::DevMat mats(const std::vector<Mat> &ms); // stacked by rows
    // Bias vectors back to back (null if all are; a missing one is zeros), as their matrices are stacked.
    const float *up_stacked(std::initializer_list<std::pair<const float *, int64_t>> parts);

    // A decode step of every slot: device_pass + head, captured after one eager step (again after a change of pdl).
    std::optional<cuda::Graph> step_graph;
    int64_t eager_steps = 0;
    bool pdl = true; // capture with programmatic dependent launch (where enabled)

    // A pass: `rows` consecutive tokens of one slot's sequence (a GEMV prefill pass; slot ≥ 0); the rows of
    // `segments` (a GEMM prefill pass: gemm, slot unused); or one token per slot, every slot, those with active[s]
    // advancing (a decode step; slot = kEverySlot).
    static constexpr int64_t kEverySlot = -1;
    struct Pass {
        int64_t rows, slot;
        bool gemm = false; // a prefill pass of many rows: layer_gemm
        bool every() const { return slot == kEverySlot; }
    };
    // A GEMM pass's piece of one slot's sequence: its `rows` new tokens are the pass's rows at … at + rows − 1, and
    // in the conv's rows (zx_pass) they follow the slot's P state rows, which start at row `conv`.
    struct Segment {
        int64_t slot, rows, at, conv;
    };
    std::vector<Segment> segments; // the current GEMM pass's
    int64_t passes = 0;            // passes over the weights run: prefill passes and decode steps

    Impl(const DecodeWeights &w, const Options &opt);
    void check_slot(int64_t slot) const;
    void check_room(int64_t slot, int64_t n) const; // n more tokens fit the slot's sequence
    void device_pass(const Pass &p);
    void layer(int64_t l, const Pass &p);
    void layer_gemm(int64_t l, const Pass &p); // cuda_decoder_prefill.cpp
    // f(a) with a the layer's router arguments (RouterDecode<T>, T its matrices' type), rows `rows_on` (null: all).
    template <class F> void with_router(int64_t l, const int32_t *rows_on, F &&f);
    // f(kc, vc): layer d's caches from slot `slot` on, as their element type (float, or uint16_t for bf16).
    template <class F> void with_kv(DevLayer &d, int64_t slot, F &&f);
    // The LM head on `rows` consecutive rows of `in` (D floats each; xn, or rows gathered from it) into `logits`
    // rows, their argmax into `best` (kernels only). on: the rows computed (null: all).
    void head(const float *in, int64_t rows, const int32_t *on);
    void head_rows(int64_t n, float *out); // every row of the last pass through the LM head, into out[n, V]
    void reset(int64_t slot);
    // Appends tokens to one slot; the last one's logits[V] into out, or (out null) their argmax, returned; with
    // `every`, every token's logits into every[toks.size(), V] instead (returns −1).
    int32_t prefill(int64_t slot, std::span<const int32_t> toks, float *out, float *every = nullptr);
    // Appends chunks[i] to slots[i], each chunk a segment of one GEMM pass (CudaDecoder::prefill of several slots
    // checked them and that they fit); the last token's logits of each into out[i, V], or (out null) their argmax
    // into greedy[i].
    void prefill_one_pass(std::span<const int64_t> slots, std::span<const std::span<const int32_t>> chunks,
                          float *out, int32_t *greedy);
    void check_tokens(int64_t slot, std::span<const int32_t> toks) const; // valid ids that fit the slot
    void describe(); // seq_one and seq_new for `segments`, uploaded when they differ from what the device holds
    void fetch_head(int64_t rows, float *out, int32_t *greedy);
    // One step of the slots with tokens[s] ≥ 0; logits rows [slots, V] into out (stepped rows only) or the argmax
    // of each stepped slot into greedy[s].
    void step(std::span<const int32_t> toks, float *out, int32_t *greedy);
};

template <class F> void CudaDecoder::Impl::with_router(int64_t l, const int32_t *rows_on, F &&f) {
    const DevLayer &d = layers[size_t(l)];
    const int cur = int(l % 2); // the EDA state alternates between two buffers: this layer's and the previous one's
    auto call = [&](const auto *fc1) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(fc1)>>;
        auto of = [](const DevMat &m) { return reinterpret_cast<const T *>(m.buf.data()); };
        f(cuda::RouterDecode<T>{rho[cur].data(), probs.data(), choice.data(), psel.data(), h1.data(),
                                l > 0 ? d.router_state_scale : nullptr, l > 0 ? rho[cur ^ 1].data() : nullptr,
                                d.router_norm, fc1, d.router_fc1_bias, of(d.router_fc2), d.router_fc2_bias,
                                of(d.router_out), d.balancing_biases, R, K, float(c.rms_norm_eps), rows_on});
    };
    if (d.router_fc1.dtype == DType::BF16) call(cuda_decoding::bf16_of(d.router_fc1));
    else call(cuda_decoding::f32_of(d.router_fc1));
}

template <class F> void CudaDecoder::Impl::with_kv(DevLayer &d, int64_t slot, F &&f) {
    const int64_t at = slot * o.max_len * Dk;
    auto call = [&](auto *typed) {
        using T = std::remove_pointer_t<decltype(typed)>;
        f(reinterpret_cast<T *>(d.kc.data()) + at, reinterpret_cast<T *>(d.vc.data()) + at);
    };
    if (kv == DType::BF16) call(static_cast<uint16_t *>(nullptr));
    else call(static_cast<float *>(nullptr));
}

} // namespace zaya
