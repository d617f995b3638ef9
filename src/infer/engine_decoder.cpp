#include "infer/engine_decoder.h"

#include "core/error.h"
#include "infer/cuda_decoder.h"
#include "infer/decoder.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace zaya {

namespace {

// The CPU: the batched Decoder; the greedy tokens are the host argmax of its logits (as Sampler's greedy path).
class CpuEngineDecoder final : public EngineDecoder {
  public:
    CpuEngineDecoder(const InferModel &m, const EngineDecoderOptions &o)
        : dec_(m, o.max_tokens, o.max_seqs, kv_dtype_for(o.kv_dtype, m.attention_dtype()),
               matmul_precision_for(o.precision, m.weight_dtype), o.batch_invariant),
          V_(m.config.vocab_size),
          max_length_(o.max_length > 0 ? std::min(o.max_length, m.config.max_position_embeddings)
                                       : m.config.max_position_embeddings) {}
    int64_t max_seqs() const override { return dec_.max_seqs(); }
    int64_t max_length() const override { return max_length_; }
    std::string device() const override { return "cpu"; }
    DType kv_dtype() const override { return dec_.kv_dtype(); }
    std::string matmul_inputs() const override { // int8 linears quantize their rows whatever the precision
        return dec_.model().weight_dtype == DType::I8 ? "int8" : cpu::matmul_precision_name(dec_.precision());
    }
    bool batch_invariant() const override { return dec_.batch_invariant(); }
    bool host_cache() const override { return true; }
    bool can_start_sequence() const override { return true; }
    SequenceCache new_sequence() override { return dec_.new_sequence(); }
    void forward_scored(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks,
                        float *logits, size_t scored, float *rows) override {
        // The decoder's logits of each chunk's last token and of every token of the scored one; each chunk's last
        // row, and the scored chunk's rows, copied out.
        rows_.assign(chunks.size(), 1);
        rows_[scored] = int64_t(chunks[scored].size());
        scratch_.resize((chunks.size() - 1 + chunks[scored].size()) * size_t(V_));
        dec_.forward(seqs, chunks, scratch_.data(), rows_);
        size_t row = 0;
        for (size_t i = 0; i < chunks.size(); ++i) {
            const float *first = scratch_.data() + row * size_t(V_);
            if (i == scored) std::copy_n(first, chunks[i].size() * size_t(V_), rows);
            row += size_t(rows_[i]);
            std::copy_n(scratch_.data() + (row - 1) * size_t(V_), V_, logits + i * size_t(V_));
        }
    }
    void forward_rows(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks,
                      std::span<const int64_t> rows, float *logits) override {
        dec_.forward(seqs, chunks, logits, rows);
    }
    void forward(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks, float *logits,
                 int32_t *greedy) override {
        if (logits) return dec_.forward(seqs, chunks, logits);
        scratch_.resize(seqs.size() * size_t(V_));
        dec_.forward(seqs, chunks, scratch_.data());
        for (size_t i = 0; i < seqs.size(); ++i) {
            const float *row = scratch_.data() + i * size_t(V_);
            greedy[i] = int32_t(std::max_element(row, row + V_) - row);
        }
    }

  private:
    Decoder dec_;
    int64_t V_, max_length_;
    std::vector<float> scratch_;
    std::vector<int64_t> rows_;
};

// The GPU decoder's sequences (slots): up to 8, the rows one pass of its linears takes. Its cache length, allocated
// up front for every slot (ZAYA1-8B in bf16: 40 KiB per token, 1.25 GiB a slot at 32k; twice that with an fp32
// cache): the model's context, up to 32k tokens unless asked for more.
int64_t gpu_slots(const EngineDecoderOptions &o) { return std::clamp<int64_t>(o.max_seqs, 1, 8); }
int64_t gpu_max_length(const InferModel &m, const EngineDecoderOptions &o) {
    return std::min<int64_t>(o.max_length > 0 ? o.max_length : 32768, m.config.max_position_embeddings);
}

// The GPU: CudaDecoder with a slot per sequence (up to 8, the rows one pass of its linears takes). A step's
// one-token chunks run together as one decode step (a CUDA graph); its prompt chunks together as one prefill pass
// (CudaDecoder::prefill of several slots), a scored one as a prefill of its own.
class CudaEngineDecoder final : public EngineDecoder {
  public:
    CudaEngineDecoder(const InferModel &m, const EngineDecoderOptions &o)
        : max_length_(gpu_max_length(m, o)),
          dec_(m, CudaDecoder::Options{.max_len = max_length_, .max_seqs = gpu_slots(o), .kv_dtype = o.kv_dtype}),
          V_(m.config.vocab_size), description_(CudaDecoder::device_description()),
          inputs_(cpu::matmul_precision_name(gpu_matmul_precision(std::nullopt, m.weight_dtype))),
          free_(std::make_shared<std::vector<int64_t>>()) {
        for (int64_t s = dec_.max_seqs() - 1; s >= 0; --s) free_->push_back(s);
    }
    int64_t max_seqs() const override { return dec_.max_seqs(); }
    int64_t max_length() const override { return max_length_; }
    std::string device() const override { return description_; }
    DType kv_dtype() const override { return dec_.kv_dtype(); }
    std::string matmul_inputs() const override { return inputs_; }
    bool batch_invariant() const override { return false; }
    bool host_cache() const override { return false; }
    bool can_start_sequence() const override { return !free_->empty(); }
    SequenceCache new_sequence() override {
        if (free_->empty()) fail("the GPU decoder's {} sequence slots are all in use", dec_.max_seqs());
        const int64_t slot = free_->back();
        free_->pop_back();
        dec_.reset(slot);
        SequenceCache seq;
        std::weak_ptr<std::vector<int64_t>> pool = free_;
        seq.device_slot = std::shared_ptr<const int64_t>(new int64_t(slot), [pool](const int64_t *p) {
            if (auto f = pool.lock()) f->push_back(*p);
            delete p;
        });
        return seq;
    }
    void forward(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks, float *logits,
                 int32_t *greedy) override {
        run(seqs, chunks, logits, greedy, SIZE_MAX, nullptr);
    }
    void forward_scored(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks,
                        float *logits, size_t scored, float *rows) override {
        run(seqs, chunks, logits, nullptr, scored, rows);
    }
    void forward_rows(std::span<SequenceCache *const>, std::span<const std::span<const int32_t>>,
                      std::span<const int64_t>, float *) override {
        fail("speculative decoding needs the CPU decoder: the GPU's sequences live in device slots, not cut back");
    }

  private:
    // forward; chunks[scored] (if any) as a prefill whose every row's logits go to rows.
    void run(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks, float *logits,
             int32_t *greedy, size_t scored, float *rows) {
        const int64_t S = dec_.max_seqs();
        std::vector<int32_t> step_tokens(static_cast<size_t>(S), -1);
        std::vector<std::pair<size_t, int64_t>> stepped; // (row of seqs, slot)
        std::vector<size_t> fed;                          // rows of seqs whose chunk is a prompt's (not scored)
        std::vector<int64_t> fed_slots;
        std::vector<std::span<const int32_t>> fed_chunks;
        for (size_t i = 0; i < seqs.size(); ++i) {
            SequenceCache &seq = *seqs[i];
            if (!seq.device_slot) fail("this sequence does not belong to the GPU decoder (no device slot)");
            const int64_t slot = *seq.device_slot;
            const std::span<const int32_t> chunk = chunks[i];
            if (seq.length != dec_.length(slot))
                fail("the GPU decoder's slot {} holds {} tokens, not this sequence's {}", slot, dec_.length(slot),
                     seq.length);
            if (i == scored) {
                dec_.prefill_rows(slot, chunk, rows);
                std::copy_n(rows + (chunk.size() - 1) * size_t(V_), V_, logits + i * size_t(V_));
            } else if (chunk.size() == 1 && seq.length > 0) {
                step_tokens[size_t(slot)] = chunk[0];
                stepped.emplace_back(i, slot);
            } else {
                fed.push_back(i), fed_slots.push_back(slot), fed_chunks.push_back(chunk);
            }
            seq.length += int64_t(chunk.size());
        }
        if (!fed.empty()) { // into fed order, then to each chunk's row
            fed_logits_.resize(logits ? fed.size() * size_t(V_) : 0), fed_greedy_.resize(fed.size());
            dec_.prefill(fed_slots, fed_chunks, logits ? fed_logits_.data() : nullptr, fed_greedy_.data());
            for (size_t j = 0; j < fed.size(); ++j) {
                if (logits) std::copy_n(fed_logits_.data() + j * size_t(V_), V_, logits + fed[j] * size_t(V_));
                else greedy[fed[j]] = fed_greedy_[j];
            }
        }
        if (stepped.empty()) return;
        if (logits) {
            rows_.resize(size_t(S * V_));
            dec_.step(step_tokens, rows_.data(), nullptr);
            for (const auto &[i, slot] : stepped)
                std::copy_n(rows_.data() + slot * V_, V_, logits + i * size_t(V_));
        } else {
            std::vector<int32_t> best(static_cast<size_t>(S), -1);
            dec_.step(step_tokens, nullptr, best.data());
            for (const auto &[i, slot] : stepped) greedy[i] = best[size_t(slot)];
        }
    }

    int64_t max_length_;
    CudaDecoder dec_;
    int64_t V_;
    std::string description_, inputs_;
    std::shared_ptr<std::vector<int64_t>> free_; // free slots (the leases of live sequences hold the others)
    std::vector<float> rows_;                    // a step's logits, [slots, V]
    std::vector<float> fed_logits_;              // a step's prompt chunks' last logits, [chunks, V]
    std::vector<int32_t> fed_greedy_;
};

} // namespace

int64_t default_prefill_chunk(const std::string &device) {
    return device == "cuda" ? CudaDecoder::Options{}.prefill_chunk : 256;
}

cpu::MatmulPrecision gpu_matmul_precision(std::optional<cpu::MatmulPrecision> asked, DType weight_dtype) {
    const cpu::MatmulPrecision gpu = matmul_precision_for(std::nullopt, weight_dtype);
    if (asked && *asked != gpu)
        fail("--precision {} applies to the CPU decoder: the GPU decoder's linears take {} rows for {} weights "
             "(--precision auto)",
             cpu::matmul_precision_name(*asked), cpu::matmul_precision_name(gpu), dtype_name(weight_dtype));
    return gpu;
}

std::unique_ptr<EngineDecoder> make_engine_decoder(const InferModel &m, const EngineDecoderOptions &o) {
    if (o.max_length < 0) fail("the maximum sequence length must be ≥ 0 (0: default), got {}", o.max_length);
    if (o.device == "cpu") return std::make_unique<CpuEngineDecoder>(m, o);
    if (o.device == "cuda") {
        gpu_matmul_precision(o.precision, m.weight_dtype);
        if (o.batch_invariant)
            fail("batch-invariant decoding runs on the CPU: the GPU decoder's GEMMs sum a row by how many share "
                 "them");
        try {
            return std::make_unique<CudaEngineDecoder>(m, o);
        } catch (const Error &e) { // out of device memory: say what the cache takes and how to make it smaller
            if (std::string_view(e.what()).find("cannot allocate") == std::string_view::npos) throw;
            const int64_t slots = gpu_slots(o), len = gpu_max_length(m, o);
            const DType kv = CudaDecoder::kv_dtype_for(o.kv_dtype, m.layers);
            fail("{} (the GPU decoder holds the weights and {} sequence(s) × {} tokens of {} cache, {:.1f} GiB; "
                 "--max-batch and --max-context make it smaller)",
                 e.what(), slots, len, dtype_name(kv),
                 double(slots * len) * double(SequenceCache::bytes_per_token(m.config, kv)) / double(1 << 30));
        }
    }
    fail("--device must be cpu or cuda, got '{}'", o.device);
}

} // namespace zaya
