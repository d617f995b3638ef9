#include "data/loader.h"

#include "core/error.h"
#include "core/rng.h"
#include "model/chunk_exchange.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace zaya {

namespace {

// Separates the loader's random stream from every other user of the same seed (e.g. weight init).
constexpr uint64_t kLoaderStream = 0x6c6f616465720001ull;
__extension__ typedef unsigned __int128 u128; // exact 64×64-bit products

void check_rank(int rank, int world) {
    if (world < 1 || rank < 0 || rank >= world) fail("rank {} out of range for world size {}", rank, world);
}

} // namespace

// ---- TokenBatch ----

Batch TokenBatch::inputs(int32_t doc_eos) const {
    Batch b;
    b.tokens.reserve(size_t(sequences * seq_len));
    b.positions.reserve(size_t(sequences * seq_len));
    b.seq_start.push_back(0);
    for (int64_t i = 0; i < sequences; ++i) {
        const int64_t n = inputs_of(i);
        if (!first_positions.empty()) b.part_tokens.push_back(n); // a rank's parts (chunk()), empty ones too
        if (n == 0) continue;
        const int64_t start = int64_t(b.tokens.size());
        b.tokens.insert(b.tokens.end(), row(i), row(i) + n);
        auto pos = int32_t(first_positions.empty() ? 0 : first_positions[size_t(i)]);
        for (int64_t t = 0; t < n; ++t) {
            b.positions.push_back(pos++);
            if (row(i)[t] == doc_eos && t + 1 < n) { // a document ends here: the next token starts one
                b.seq_start.push_back(start + t + 1);
                pos = 0;
            }
        }
        b.seq_start.push_back(start + n);
    }
    return b;
}

std::vector<int32_t> TokenBatch::targets(int32_t doc_eos) const {
    std::vector<int32_t> t;
    t.reserve(size_t(sequences * seq_len));
    for (int64_t i = 0; i < sequences; ++i)
        for (int64_t p = 0; p < inputs_of(i); ++p) {
            const bool unlearned = !learned.empty() && learned[size_t(i * (seq_len + 1) + 1 + p)] == 0;
            t.push_back(unlearned || (doc_eos >= 0 && row(i)[p] == doc_eos) ? -1 : row(i)[p + 1]);
        }
    return t;
}

int64_t TokenBatch::learned_targets(int32_t doc_eos) const {
    if (learned.empty() && doc_eos < 0 && lengths.empty()) return sequences * seq_len;
    const std::vector<int32_t> t = targets(doc_eos);
    return int64_t(std::count_if(t.begin(), t.end(), [](int32_t x) { return x >= 0; }));
}

void TokenBatch::resize(int64_t rows, int64_t T, bool masked) {
    sequences = rows;
    seq_len = T;
    tokens.resize(size_t(rows * (T + 1)));
    learned.resize(masked ? tokens.size() : 0);
    lengths.clear();
    first_positions.clear();
}

TokenBatch TokenBatch::chunk(int r, int n, int32_t doc_eos) const {
    ZAYA_ASSERT(n > 0 && r >= 0 && r < n && seq_len % (2 * n) == 0 && first_positions.empty());
    const int64_t Tc = seq_len / (2 * n);
    TokenBatch c;
    c.resize(2 * sequences, Tc, !learned.empty());
    for (int64_t i = 0; i < sequences; ++i)
        for (int part = 0; part < 2; ++part) { // Tc inputs and the target after the last: Tc + 1 tokens
            const int64_t at = chunk_part_start(r, n, part, seq_len);
            if (!lengths.empty()) // a packed row: the part's tokens before the padding, none past it
                c.lengths.push_back(std::clamp<int64_t>(lengths[size_t(i)] - at, 0, Tc + 1));
            const auto from = ptrdiff_t(i * (seq_len + 1) + at), to = ptrdiff_t((2 * i + part) * (Tc + 1));
            std::copy_n(tokens.begin() + from, Tc + 1, c.tokens.begin() + to);
            if (!learned.empty()) std::copy_n(learned.begin() + from, Tc + 1, c.learned.begin() + to);
            int64_t doc_start = 0; // with document masking: where the document under way at `at` began
            if (doc_eos >= 0)
                for (int64_t t = at - 1; t >= 0; --t)
                    if (row(i)[t] == doc_eos) {
                        doc_start = t + 1;
                        break;
                    }
            c.first_positions.push_back(at - doc_start);
        }
    return c;
}

// ---- LoaderState ----

Packing packing_from_string(const std::string &s) {
    if (s == "chunks") return Packing::Chunks;
    if (s == "documents") return Packing::Documents;
    fail("packing must be 'chunks' or 'documents', got '{}'", s);
}

const char *packing_name(Packing p) { return p == Packing::Chunks ? "chunks" : "documents"; }

int32_t RowLayout::cut_eos(const DataSet &data) const {
    if (!doc_mask) return -1;
    if (data.manifest().eos_id < 0) fail("--doc-mask: {} names no eos_id to cut documents at", data.dir());
    return data.manifest().eos_id;
}

nlohmann::json loader_state_to_json(const LoaderState &s) {
    nlohmann::json j = {
        {"seed", s.seed}, {"epoch", s.epoch}, {"cursor", s.cursor}, {"seq_len", s.seq_len}, {"chunks", s.chunks}};
    if (s.packing != Packing::Chunks) j["packing"] = packing_name(s.packing); // older states: chunks
    return j;
}

LoaderState loader_state_from_json(const nlohmann::json &j, const std::string &label) {
    if (!j.is_object()) fail("{}: loader state must be a JSON object", label);
    auto u64 = [&](const char *name) {
        const auto it = j.find(name);
        if (it == j.end() || !it->is_number_unsigned())
            fail("{}: loader state field \"{}\" missing or not a non-negative integer", label, name);
        return it->get<uint64_t>();
    };
    LoaderState s;
    s.seed = u64("seed");
    s.epoch = u64("epoch");
    s.cursor = u64("cursor");
    s.seq_len = int64_t(u64("seq_len"));
    s.chunks = u64("chunks");
    if (const auto it = j.find("packing"); it != j.end()) {
        if (!it->is_string()) fail("{}: loader state field \"packing\" must be a string", label);
        s.packing = packing_from_string(it->get<std::string>());
    }
    return s;
}

// ---- ChunkIndex ----

ChunkIndex::ChunkIndex(const TokenSplit &split, int64_t seq_len) : split_(&split), seq_len_(seq_len) {
    if (seq_len < 1) fail("sequence length {} must be at least 1", seq_len);
    const auto T = uint64_t(seq_len);
    for (const auto &s : split.shards) {
        first_.push_back(total_);
        total_ += s->size() > T ? (s->size() - 1) / T : 0;
    }
    first_.push_back(total_);
}

void ChunkIndex::read(uint64_t c, int32_t *out, int32_t *learned) const {
    ZAYA_ASSERT(c < total_ && (learned == nullptr || masked()));
    // the shard whose chunk range holds c (empty shards share a start with the next one)
    const size_t s = size_t(std::upper_bound(first_.begin(), first_.end(), c) - first_.begin()) - 1;
    const uint64_t begin = (c - first_[s]) * uint64_t(seq_len_), n = uint64_t(seq_len_) + 1;
    split_->shards[s]->copy(begin, n, out);
    if (learned) split_->masks[s]->copy(begin, n, learned);
}

// ---- PackedRows ----

PackedRows::PackedRows(const TokenSplit &split, const DataManifest &m, int64_t seq_len)
    : split_(&split), capacity_(uint64_t(seq_len) + 1), pad_(m.pad_id >= 0 ? m.pad_id : m.eos_id) {
    if (m.eos_id < 0) fail("--pack documents: the data names no eos_id to find documents by");
    docs_ = split_documents(split, m.eos_id);
    for (const DocSpan &d : docs_) {
        lengths_.push_back(d.length);
        truncated_ += d.length > capacity_;
    }
}

std::vector<std::vector<uint32_t>> PackedRows::pack(const std::vector<uint32_t> &order) const {
    return pack_best_fit(lengths_, order, capacity_);
}

int64_t PackedRows::read(const std::vector<uint32_t> &row, int32_t *out, int32_t *learned) const {
    return int64_t(read_packed_row(*split_, docs_, row, capacity_, pad_, out, learned));
}

// ---- TrainLoader ----

namespace {
// Fisher–Yates with `rng`'s next draws: the chunks' order from the start (bit for bit as before packing existed).
template <class T> void shuffle(std::vector<T> &v, Rng &rng) {
    for (uint64_t i = v.size() - 1; v.size() > 1 && i > 0; --i) {
        const auto j = uint64_t(u128(rng.next()) * (i + 1) >> 64); // uniform in [0, i]
        std::swap(v[i], v[j]);
    }
}
} // namespace

TrainLoader::TrainLoader(std::shared_ptr<const DataSet> data, int64_t seq_len, uint64_t seed, int rank,
                         int world_size, Packing packing)
    : data_(std::move(data)), index_(data_->train(), seq_len), seq_len_(seq_len), seed_(seed), rank_(rank),
      world_(world_size) {
    check_rank(rank, world_size);
    if (packing == Packing::Documents) {
        packed_.emplace(data_->train(), data_->manifest(), seq_len);
        if (packed_->num_documents() == 0) fail("{}: the train split has no documents", data_->dir());
    } else if (index_.size() == 0) {
        fail("{}: the train split ({} tokens) has no sequence of {} tokens; use a smaller --seq or more data",
             data_->dir(), data_->train().tokens, seq_len + 1);
    }
    start_epoch(0);
}

void TrainLoader::start_epoch(uint64_t epoch) {
    epoch_ = epoch;
    cursor_ = 0;
    Rng rng(seed_ ^ kLoaderStream, epoch);
    if (packed_) { // the documents in a fresh order, packed, and the rows in another
        std::vector<uint32_t> order(packed_->num_documents());
        for (size_t i = 0; i < order.size(); ++i) order[i] = uint32_t(i);
        shuffle(order, rng);
        rows_ = packed_->pack(order);
    }
    perm_.resize(packed_ ? rows_.size() : index_.size());
    for (uint64_t i = 0; i < perm_.size(); ++i) perm_[i] = i;
    shuffle(perm_, rng);
}

TokenBatch TrainLoader::next_batch(int64_t global_batch) {
    if (global_batch < 1 || global_batch % world_ != 0)
        fail("batch size {} must be a positive multiple of the world size {}", global_batch, world_);
    const int64_t per_rank = global_batch / world_, lo = rank_ * per_rank, hi = lo + per_rank;
    TokenBatch b;
    b.resize(per_rank, seq_len_, index_.masked() || packed_); // packed rows: padding is not learned
    if (packed_) b.lengths.resize(size_t(per_rank));
    for (int64_t i = 0; i < global_batch; ++i) {
        if (cursor_ == perm_.size()) start_epoch(epoch_ + 1);
        const uint64_t c = perm_[cursor_++];
        const int64_t at = (i - lo) * (seq_len_ + 1);
        if (i < lo || i >= hi) continue;
        int32_t *learned = b.learned.empty() ? nullptr : b.learned.data() + at;
        if (packed_) b.lengths[size_t(i - lo)] = packed_->read(rows_[c], b.tokens.data() + at, learned);
        else index_.read(c, b.tokens.data() + at, learned);
    }
    return b;
}

LoaderState TrainLoader::state() const {
    return {seed_, epoch_, cursor_, seq_len_, guard(), packed_ ? Packing::Documents : Packing::Chunks};
}

void TrainLoader::restore(const LoaderState &s) {
    if (s.seq_len != seq_len_)
        fail("{}: loader state is for sequences of {} tokens, this run uses {}", data_->dir(), s.seq_len, seq_len_);
    const Packing mine = packed_ ? Packing::Documents : Packing::Chunks;
    if (s.packing != mine)
        fail("{}: loader state is for --pack {}, this run uses --pack {}", data_->dir(), packing_name(s.packing),
             packing_name(mine));
    const char *unit = packed_ ? "documents" : "chunks per epoch";
    if (s.chunks != guard())
        fail("{}: loader state is for {} {} but this data has {} (different data directory?)", data_->dir(),
             s.chunks, unit, guard());
    seed_ = s.seed;
    start_epoch(s.epoch);
    if (s.cursor > perm_.size())
        fail("{}: loader state cursor {} past the epoch's {} rows", data_->dir(), s.cursor, perm_.size());
    cursor_ = s.cursor;
}

// ---- ValBatches ----

ValBatches::ValBatches(std::shared_ptr<const DataSet> data, int64_t batch, int64_t seq_len, int rank,
                       int world_size, Packing packing)
    : data_(std::move(data)), index_(data_->val(), seq_len), batch_(batch), seq_len_(seq_len), rank_(rank),
      world_(world_size) {
    check_rank(rank, world_size);
    if (batch < 1) fail("validation batch size {} must be at least 1", batch);
    if (packing == Packing::Documents) { // the documents in order, packed
        packed_.emplace(data_->val(), data_->manifest(), seq_len);
        std::vector<uint32_t> order(packed_->num_documents());
        for (size_t i = 0; i < order.size(); ++i) order[i] = uint32_t(i);
        rows_ = packed_->pack(order);
    }
}

int64_t ValBatches::num_batches() const { return int64_t((num_chunks() + uint64_t(batch_) - 1) / uint64_t(batch_)); }

bool ValBatches::next(TokenBatch &out) {
    if (next_chunk_ >= num_chunks()) return false;
    const auto b = int64_t(std::min<uint64_t>(uint64_t(batch_), num_chunks() - next_chunk_));
    const int64_t lo = rank_ * b / world_, hi = (rank_ + 1) * b / world_;
    out.resize(hi - lo, seq_len_, index_.masked() || packed_);
    if (packed_) out.lengths.resize(size_t(hi - lo));
    for (int64_t i = lo; i < hi; ++i) {
        const int64_t at = (i - lo) * (seq_len_ + 1);
        int32_t *learned = out.learned.empty() ? nullptr : out.learned.data() + at;
        if (packed_)
            out.lengths[size_t(i - lo)] =
                packed_->read(rows_[size_t(next_chunk_ + uint64_t(i))], out.tokens.data() + at, learned);
        else index_.read(next_chunk_ + uint64_t(i), out.tokens.data() + at, learned);
    }
    next_chunk_ += uint64_t(b);
    return true;
}

} // namespace zaya
