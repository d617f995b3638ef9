// Training and validation batches over a prepared data directory (data/dataset.h).
//
// Chunks. Each shard of a split is cut into chunks of T+1 tokens starting every T tokens (chunk c covers
// [c·T, c·T + T + 1)), so every token after a shard's first is a target exactly once per pass; chunks never
// cross a shard boundary (a shard's last < T tokens are unused — nothing at the default 64M-token shards).
// Sequences run across document boundaries, separated by EOS, as in GPT-2-style pretraining. With loss masks
// (fine-tuning data, data/manifest.h) a target whose flag is 0 — a prompt token — becomes −1: no loss, no
// gradient.
//
// Document masking (`zaya train --doc-mask`, spec B.5's recommendation): a row is cut after each EOS into
// sequences of their own, so attention, the CCA conv and the value shift do not cross a document boundary and
// positions restart at 0; the target after an EOS (the next document's first token, which nothing visible predicts)
// becomes −1. The chunks, their order and the loader state are the same either way.
//
// Training order. Epoch e visits every chunk of the train split once, in a permutation drawn by Fisher–Yates
// from Rng(seed ^ kLoaderStream, e). The loader's whole position is LoaderState {seed, epoch, cursor} (plus
// seq_len and chunk count as a guard against restoring into different data): restoring it regenerates the
// permutation and yields bit-identical batches from there on. A batch that runs off the end of an epoch
// continues into the next one.
//
// Packing (data/packing.h). `Packing::Documents` replaces the chunks by rows of whole documents, packed by
// best-fit decreasing: each epoch permutes the documents (the same random stream), packs them in that order and
// visits the rows in a second permutation; validation packs its documents in order. The loader state's "chunks"
// guard then counts documents, and its "packing" names the mode.
//
// Ranks. A global batch of B sequences is the next B chunks; rank r of w takes sequences [r·B/w, (r+1)·B/w)
// (B must divide by w). Every rank steps through the same global order, so all ranks hold the same state and
// one saved state resumes them all.
#pragma once
#include "data/dataset.h"
#include "data/packing.h"
#include "model/batch.h"

#include <nlohmann/json_fwd.hpp>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zaya {

// B sequences of T+1 tokens: row i holds inputs row[0..T) and targets row[1..T].
struct TokenBatch {
    int64_t sequences = 0, seq_len = 0;
    std::vector<int32_t> tokens;  // [sequences, seq_len + 1]
    std::vector<int32_t> learned; // [sequences, seq_len + 1] loss-mask flags (0/1); empty: every token is learned
    // [sequences] tokens of each row before its padding (packed rows); empty: every row is full. Padding is not
    // fed to the model: it costs nothing and is not routed (the balancing controller never counts it).
    std::vector<int64_t> lengths;
    // [sequences] the position of each row's first token in its sequence (context parallelism's parts, chunk());
    // empty: 0.
    std::vector<int64_t> first_positions;

    const int32_t *row(int64_t i) const { return tokens.data() + i * (seq_len + 1); }
    // The inputs row i gives the model: its tokens but the last, padding left out.
    int64_t inputs_of(int64_t i) const {
        return lengths.empty() ? seq_len : std::max<int64_t>(lengths[size_t(i)] - 1, 0);
    }
    bool any_inputs() const { // false for packed rows of one-token documents only: nothing to run
        for (int64_t i = 0; i < sequences; ++i)
            if (inputs_of(i) > 0) return true;
        return false;
    }
    // The model's input batch: each row's first T tokens (inputs_of); with doc_eos ≥ 0 (document masking), each
    // row cut after every doc_eos into sequences whose positions start at 0.
    Batch inputs(int32_t doc_eos = -1) const;
    // One per input: each row's last T tokens, −1 where the mask says the token is not learned and (doc_eos ≥ 0)
    // where the input is doc_eos. The same order as inputs()' tokens.
    std::vector<int32_t> targets(int32_t doc_eos = -1) const;
    int64_t learned_targets(int32_t doc_eos = -1) const; // how many targets are not −1
    void resize(int64_t sequences, int64_t seq_len, bool masked);
    // Rank r of n's parts of every row (context parallelism, model/chunk_exchange.h): 2·sequences rows of T/(2n)
    // inputs and their targets (flags too), each row's parts 0 and 1 in turn, at chunk_part_start's positions — or,
    // with doc_eos ≥ 0 (document masking), at their positions in the document under way where the part begins
    // (inputs(doc_eos) then cuts the parts at each EOS as it cuts whole rows). Of a packed row, a part takes the
    // tokens before the row's padding: fewer than T/(2n) inputs, or none (lengths). T must divide by 2n.
    TokenBatch chunk(int r, int n, int32_t doc_eos = -1) const;
    // The most sequences inputs() makes of `rows` rows: every token its own document at worst.
    // With context_parallel n > 1: the most a rank's parts of them make (chunk(r, n): 2·rows rows of seq_len/(2n)).
    static int64_t max_sequences(int64_t rows, int64_t seq_len, bool doc_mask, int64_t context_parallel = 1) {
        if (context_parallel > 1) return max_sequences(2 * rows, seq_len / (2 * context_parallel), doc_mask);
        return doc_mask ? rows * seq_len : rows;
    }
};

enum class Packing { Chunks, Documents };
Packing packing_from_string(const std::string &s); // "chunks" | "documents"
const char *packing_name(Packing p);

// How rows are made and cut: `zaya train` / `zaya eval` --pack and --doc-mask.
struct RowLayout {
    Packing packing = Packing::Chunks;
    bool doc_mask = false;
    // The id rows are cut after (TokenBatch::inputs' doc_eos): the data's EOS with doc_mask, else −1. Fails, naming
    // the data directory, when doc_mask is asked of data without an EOS id.
    int32_t cut_eos(const DataSet &data) const;
};

struct LoaderState {
    uint64_t seed = 0, epoch = 0, cursor = 0; // cursor: rows of this epoch already consumed (global)
    int64_t seq_len = 0;
    uint64_t chunks = 0; // chunks per epoch (documents with Packing::Documents); a guard, not a position
    Packing packing = Packing::Chunks;

    bool operator==(const LoaderState &) const = default;
};

nlohmann::json loader_state_to_json(const LoaderState &s);
LoaderState loader_state_from_json(const nlohmann::json &j, const std::string &label);

// The chunks of one split: chunk index → (shard, offset).
class ChunkIndex {
  public:
    ChunkIndex(const TokenSplit &split, int64_t seq_len);
    uint64_t size() const { return total_; }
    // tokens of chunk c, seq_len + 1 of them, and their mask flags when `learned` is given (the split has masks)
    void read(uint64_t c, int32_t *out, int32_t *learned = nullptr) const;
    bool masked() const { return !split_->masks.empty(); }

  private:
    const TokenSplit *split_;
    int64_t seq_len_;
    std::vector<uint64_t> first_; // first chunk index of each shard, plus the total
    uint64_t total_ = 0;
};

// Whole documents packed into rows of seq_len + 1 tokens (data/packing.h), for one split.
class PackedRows {
  public:
    PackedRows(const TokenSplit &split, const DataManifest &m, int64_t seq_len);
    size_t num_documents() const { return docs_.size(); }
    size_t truncated() const { return truncated_; } // documents longer than a row, cut to it
    // Packs the documents of `order` (best-fit decreasing); returns the rows.
    std::vector<std::vector<uint32_t>> pack(const std::vector<uint32_t> &order) const;
    int64_t read(const std::vector<uint32_t> &row, int32_t *out, int32_t *learned) const; // tokens before padding

  private:
    const TokenSplit *split_;
    std::vector<DocSpan> docs_;
    std::vector<uint64_t> lengths_;
    uint64_t capacity_;
    int32_t pad_;
    size_t truncated_ = 0;
};

class TrainLoader {
  public:
    TrainLoader(std::shared_ptr<const DataSet> data, int64_t seq_len, uint64_t seed, int rank = 0,
                int world_size = 1, Packing packing = Packing::Chunks);

    // The next global batch of `global_batch` sequences; returns this rank's slice.
    TokenBatch next_batch(int64_t global_batch);

    LoaderState state() const;
    void restore(const LoaderState &s); // errors if it does not fit this data / seq_len
    uint64_t chunks_per_epoch() const { return perm_.size(); } // rows of this epoch
    const PackedRows *packed() const { return packed_ ? &*packed_ : nullptr; }

  private:
    void start_epoch(uint64_t epoch);
    uint64_t guard() const { return packed_ ? packed_->num_documents() : index_.size(); }
    std::shared_ptr<const DataSet> data_;
    ChunkIndex index_;
    std::optional<PackedRows> packed_;
    std::vector<std::vector<uint32_t>> rows_; // Packing::Documents: this epoch's rows
    int64_t seq_len_;
    uint64_t seed_, epoch_ = 0, cursor_ = 0;
    int rank_, world_;
    std::vector<uint64_t> perm_;
};

// Validation: the val split's chunks in order, non-overlapping, batches of B (the last may be smaller);
// rank r takes sequences [r·b/w, (r+1)·b/w) of each batch of b (ranks may get unequal counts in the last).
class ValBatches {
  public:
    ValBatches(std::shared_ptr<const DataSet> data, int64_t batch, int64_t seq_len, int rank = 0,
               int world_size = 1, Packing packing = Packing::Chunks);
    bool next(TokenBatch &out); // false when done
    void reset() { next_chunk_ = 0; }
    int64_t num_batches() const;
    uint64_t num_chunks() const { return packed_ ? rows_.size() : index_.size(); } // rows

  private:
    std::shared_ptr<const DataSet> data_;
    ChunkIndex index_;
    std::optional<PackedRows> packed_;
    std::vector<std::vector<uint32_t>> rows_; // Packing::Documents: the documents in order, packed
    int64_t batch_, seq_len_;
    int rank_, world_;
    uint64_t next_chunk_ = 0;
};

inline ValBatches val_batches(std::shared_ptr<const DataSet> data, int64_t batch, int64_t seq_len, int rank = 0,
                              int world_size = 1, Packing packing = Packing::Chunks) {
    return ValBatches(std::move(data), batch, seq_len, rank, world_size, packing);
}

} // namespace zaya
