#include "infer/engine_decoder.h"

#include "core/error.h"
#include "infer/cuda_decoder.h"
#include "infer/decoder.h"

#include <algorithm>
#include <vector>

namespace zaya {

namespace {

// The CPU: the batched Decoder; the greedy tokens are the host argmax of its logits (as Sampler's greedy path).
class CpuEngineDecoder final : public EngineDecoder {
  public:
    CpuEngineDecoder(const InferModel &m, const EngineDecoderOptions &o)
        : dec_(m, o.max_tokens, o.max_seqs), V_(m.config.vocab_size),
          max_length_(o.max_length > 0 ? std::min(o.max_length, m.config.max_position_embeddings)
                                       : m.config.max_position_embeddings) {}
    int64_t max_seqs() const override { return dec_.max_seqs(); }
    int64_t max_length() const override { return max_length_; }
    std::string device() const override { return "cpu"; }
    SequenceCache new_sequence() override { return dec_.new_sequence(); }
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
};

// The GPU: CudaDecoder, one sequence. Its chunks of one token after the first run as decode steps (a CUDA graph);
// longer chunks as prefill passes.
class CudaEngineDecoder final : public EngineDecoder {
  public:
    CudaEngineDecoder(const InferModel &m, const EngineDecoderOptions &o)
        : max_length_(std::min(o.max_length > 0 ? o.max_length : kDefaultMaxLength, m.config.max_position_embeddings)),
          dec_(m, CudaDecoder::Options{.max_len = max_length_}), description_(CudaDecoder::device_description()) {}
    int64_t max_seqs() const override { return 1; }
    int64_t max_length() const override { return max_length_; }
    std::string device() const override { return description_; }
    SequenceCache new_sequence() override {
        dec_.reset();
        return SequenceCache{};
    }
    void forward(std::span<SequenceCache *const> seqs, std::span<const std::span<const int32_t>> chunks, float *logits,
                 int32_t *greedy) override {
        if (seqs.size() != 1 || chunks.size() != 1)
            fail("the GPU decoder runs one sequence at a time; {} were fed together", seqs.size());
        SequenceCache &seq = *seqs[0];
        const std::span<const int32_t> chunk = chunks[0];
        if (seq.length != dec_.length())
            fail("the GPU decoder holds a sequence of {} tokens, not this one of {}", dec_.length(), seq.length);
        const bool step = chunk.size() == 1 && seq.length > 0;
        if (logits) {
            if (step) dec_.step(chunk[0], logits);
            else dec_.prefill(chunk, logits);
        } else {
            greedy[0] = step ? dec_.step_greedy(chunk[0]) : dec_.prefill_greedy(chunk);
        }
        seq.length += int64_t(chunk.size());
    }

  private:
    // The device cache's default length, allocated up front (80 KiB per token for ZAYA1-8B: 2.5 GiB at 32k): the
    // model's context, up to 32k tokens unless asked for more.
    static constexpr int64_t kDefaultMaxLength = 32768;
    int64_t max_length_;
    CudaDecoder dec_;
    std::string description_;
};

} // namespace

std::unique_ptr<EngineDecoder> make_engine_decoder(const InferModel &m, const EngineDecoderOptions &o) {
    if (o.max_length < 0) fail("the maximum sequence length must be ≥ 0 (0: default), got {}", o.max_length);
    if (o.device == "cpu") return std::make_unique<CpuEngineDecoder>(m, o);
    if (o.device == "cuda") return std::make_unique<CudaEngineDecoder>(m, o);
    fail("--device must be cpu or cuda, got '{}'", o.device);
}

} // namespace zaya
