#include "data/packing.h"

#include "core/error.h"

#include <algorithm>
#include <map>

namespace zaya {

namespace {

// Tokens [begin, begin + n) of the split's stream, across shard boundaries, and their mask flags (1 without masks).
void read_split(const TokenSplit &split, uint64_t begin, uint64_t n, int32_t *out, int32_t *learned) {
    uint64_t shard_begin = 0;
    for (size_t s = 0; s < split.shards.size() && n > 0; ++s) {
        const uint64_t size = split.shards[s]->size();
        if (begin < shard_begin + size) {
            const uint64_t at = begin - shard_begin, take = std::min(n, size - at);
            split.shards[s]->copy(at, take, out);
            if (split.masks.empty()) std::fill(learned, learned + take, 1);
            else split.masks[s]->copy(at, take, learned);
            out += take, learned += take, begin += take, n -= take;
        }
        shard_begin += size;
    }
    ZAYA_ASSERT(n == 0);
}

} // namespace

std::vector<DocSpan> split_documents(const TokenSplit &split, int32_t eos) {
    std::vector<DocSpan> docs;
    constexpr uint64_t kBlock = uint64_t(1) << 20;
    std::vector<int32_t> buf;
    uint64_t stream = 0, start = 0;
    for (const auto &shard : split.shards) {
        for (uint64_t at = 0; at < shard->size(); at += kBlock) {
            const uint64_t n = std::min(kBlock, shard->size() - at);
            buf.resize(size_t(n));
            shard->copy(at, n, buf.data());
            for (uint64_t i = 0; i < n; ++i)
                if (buf[size_t(i)] == eos) {
                    docs.push_back({start, stream + i + 1 - start});
                    start = stream + i + 1;
                }
            stream += n;
        }
    }
    if (start < stream) docs.push_back({start, stream - start});
    return docs;
}

std::vector<std::vector<uint32_t>> pack_best_fit(const std::vector<uint64_t> &lengths,
                                                 const std::vector<uint32_t> &order, uint64_t capacity) {
    std::vector<uint32_t> by_length = order;
    std::stable_sort(by_length.begin(), by_length.end(), [&](uint32_t a, uint32_t b) {
        return std::min(lengths[a], capacity) > std::min(lengths[b], capacity);
    });
    std::vector<std::vector<uint32_t>> rows;
    std::multimap<uint64_t, size_t> free_space; // free tokens → row; equal free space: the earliest row first
    for (uint32_t d : by_length) {
        const uint64_t len = std::min(lengths[d], capacity);
        auto it = free_space.lower_bound(len);
        size_t row;
        uint64_t left;
        if (it == free_space.end()) {
            row = rows.size();
            rows.emplace_back();
            left = capacity;
        } else {
            row = it->second;
            left = it->first;
            free_space.erase(it);
        }
        rows[row].push_back(d);
        if (left - len > 0) free_space.emplace(left - len, row);
    }
    return rows;
}

uint64_t read_packed_row(const TokenSplit &split, const std::vector<DocSpan> &docs, const std::vector<uint32_t> &row,
                         uint64_t capacity, int32_t pad, int32_t *out, int32_t *learned) {
    uint64_t at = 0;
    for (uint32_t d : row) {
        const uint64_t n = std::min(docs[d].length, capacity - at);
        read_split(split, docs[d].begin, n, out + at, learned + at);
        at += n;
    }
    std::fill(out + at, out + capacity, pad);
    std::fill(learned + at, learned + capacity, 0);
    return at;
}

} // namespace zaya
