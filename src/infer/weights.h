// The weights an inference run reads, in the dtype they are stored in (spec A.9; design: bf16 stays bf16).
//
// Matrices (every Linear weight, each expert's matrices, the embedding / LM head) are `Mat` views that are used
// in place: fp32 or bf16, either memory-mapped from a checkpoint's safetensors (no copy at all) or owned when
// made from a trained Model or random values. The small rest (norms, biases, residual scales, conv kernels,
// temperatures, balancing biases) is converted to fp32 once, into a buffer carved like ParamLayout with the
// matrices left out.
#pragma once
#include "core/dtype.h"
#include "core/membw.h"
#include "io/direct_write.h"
#include "io/safetensors.h"
#include "model/params.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/linear_i8.h"

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

// W[rows, cols] row-major (PyTorch Linear layout [out, in]).
struct Mat {
    const void *data = nullptr;
    DType dtype = DType::F32; // F32, BF16, or I8 (quantized: `scales` [rows, i8_groups(cols)], ops/cpu/linear_i8.h)
    int64_t rows = 0, cols = 0;
    const float *scales = nullptr;

    size_t bytes() const { return size_t(rows) * row_bytes(); } // the values and, for I8, the scales
    size_t row_bytes() const {
        const size_t scale_bytes = dtype == DType::I8 ? size_t(cpu::i8_groups(cols)) * sizeof(float) : 0;
        return size_t(cols) * dtype_size(dtype) + scale_bytes;
    }
    Mat row_block(int64_t r0, int64_t n) const; // rows [r0, r0+n)
};

// y[N, W.rows] (row stride ldy) = x[N, W.cols] · Wᵀ + b (b may be null), for any dtype. `rows`: x as it is (F32)
// or rounded to bf16 first (BF16: ops/cpu/linear_bf16.h); int8 matrices quantize x whatever it says.
// batch_invariant: each row summed as it would be alone, however many share the call (the dot passes for every N).
void mat_linear(float *y, int64_t ldy, const float *x, const Mat &W, const float *b, int64_t N,
                cpu::MatmulPrecision rows = cpu::MatmulPrecision::F32, bool batch_invariant = false);
// dst[n, :] = row ids[n] of W as fp32.
void mat_gather_rows(float *dst, const Mat &W, const int32_t *ids, int64_t N);

struct LayerMats {
    Mat q_proj, k_proj, v_cur, v_del, o_proj;
    Mat router_down, router_fc1, router_fc2, router_out;
    std::vector<Mat> gate_up, down; // per expert: [2I, D] and [D, I]

  private:
    template <class Self> static auto dense_of(Self &m) {
        return std::array{&m.q_proj,      &m.k_proj,     &m.v_cur,      &m.v_del,     &m.o_proj,
                          &m.router_down, &m.router_fc1, &m.router_fc2, &m.router_out};
    }

  public:
    // Every matrix of the layer that is not an expert's (each token reads all of them).
    std::array<const Mat *, 9> dense() const { return dense_of(*this); }
    std::array<Mat *, 9> dense() { return dense_of(*this); }
};

class InferModel {
  public:
    ZayaConfig config;
    // A loaded directory's end-of-sequence ids beyond config.eos_token_id (io/config_json.h eos_token_ids): the
    // engine's default stop tokens include them.
    std::vector<int64_t> eos_token_ids;
    DType weight_dtype = DType::F32;
    ModelWeights small; // fp32 vectors; its matrix pointers are not used (see LayerMats)
    Mat embed, lm_head;
    std::vector<LayerMats> layers;

    // Takes the model; F32 uses its buffer in place, BF16 rounds the matrices into an owned bf16 copy.
    static std::unique_ptr<InferModel> from_model(Model m, DType dtype);
    // Memory-maps a model directory (model.safetensors or shards + index, native or legacy names); bf16 and fp32
    // matrices are used where they lie. Errors name the directory, file and tensor.
    static std::unique_ptr<InferModel> load(const std::string &dir);
    // Random weights straight in `dtype` (matrices uniform with the init's standard deviation, the rest as
    // model_init_random), for benchmarks of shapes too large to build as an fp32 Model first.
    static std::unique_ptr<InferModel> random(const ZayaConfig &c, DType dtype, uint64_t seed);
    // Replaces every matrix by its int8 quantization (weight_dtype I8: a scale per 64 columns of a row, about half
    // of bf16's bytes; ops/cpu/linear_i8.h), from f32 or bf16, and lets go of the originals (a mapped checkpoint is
    // unmapped). The CPU decoder runs it; the GPU's and save() refuse it.
    void quantize_i8();
    // The element attention's weights had before any quantization: what an `auto` KV cache follows (a bf16
    // checkpoint's cache is bf16, quantized or not; an fp32 one's fp32).
    DType attention_dtype() const {
        return weight_dtype == DType::I8 ? quantized_from_ : layers.empty() ? DType::F32 : layers[0].q_proj.dtype;
    }

    // Writes config.json and the weights in Hugging Face layout (matrices in weight_dtype, as they are; vectors
    // converted to it; balancing biases fp32), in shards of at most max_shard_bytes with
    // model.safetensors.index.json when they do not fit one file. Needs matrices stored contiguously (from_model
    // and random models; not legacy checkpoints).
    void save(const std::string &dir, size_t max_shard_bytes) const;

    size_t matrix_bytes() const; // all matrices (the tied embedding once)
    // Reads one byte of every page of every matrix, so that memory-mapped weights are resident (from the page
    // cache or the disk) before anything is timed. Returns the bytes covered.
    size_t touch_all() const;
    // Bytes of weights one decoded token reads: every non-expert matrix, one expert per layer (top-1), the LM
    // head and one embedding row — the numerator of the memory-bandwidth bound.
    size_t bytes_per_token() const;
    // Those weights as memory regions (expert 0 standing for the chosen one): what a bandwidth bound streams.
    std::vector<MemRegion> per_token_regions() const;

  private:
    void bind_small();
    std::vector<Mat> all_matrices() const; // each once (the tied LM head is the embedding)
    // The fields that hold them, in that order: Mat * (or const Mat * for a const model).
    template <class Self> static auto matrix_fields(Self &m);
    ParamLayout small_layout_;
    RealBuffer small_buf_;
    std::optional<Model> model_;           // from_model(F32): the matrices live here
    AlignedBytes owned_;                   // from_model(BF16) / random: the matrices live here
    std::unique_ptr<SafetensorSet> files_; // load(): mapped files
    DType quantized_from_ = DType::F32;    // I8: the attention weights' element before quantize_i8()
};

// True for the parameters InferModel keeps as Mat (by HF name).
bool is_matrix_param(const std::string &name);

} // namespace zaya
