// Whole-document packing (`zaya train --pack documents`, spec B.5: ZAYA1's fine-tuning packed whole examples by
// best-fit decreasing). Instead of fixed windows of the token stream, each row of seq + 1 tokens holds whole
// documents (the spans up to and including each EOS), as many as fit, the rest padding whose targets are not
// learned. No example is cut across two rows, so an answer always sees its prompt; a document longer than a row is
// cut to the row (its first seq + 1 tokens). With --doc-mask the documents of a row also do not see each other.
#pragma once
#include "data/dataset.h"

#include <cstdint>
#include <vector>

namespace zaya {

// A document: [begin, begin + length) of a split's token stream (its shards back to back; a document may continue
// from one shard into the next).
struct DocSpan {
    uint64_t begin = 0, length = 0;
};

// The documents of a split: the spans ending at each `eos`, and a last one without it if the stream does not end
// with one. One pass over the tokens.
std::vector<DocSpan> split_documents(const TokenSplit &split, int32_t eos);

// Best-fit decreasing: the documents of `order` (indices into `lengths`), longest first (ties in `order`'s order),
// each into the row whose free space fits it most tightly, else a new row; lengths above `capacity` count as
// `capacity`. Returns each row's documents in placement order; rows in the order they were opened.
std::vector<std::vector<uint32_t>> pack_best_fit(const std::vector<uint64_t> &lengths,
                                                 const std::vector<uint32_t> &order, uint64_t capacity);

// One packed row of `capacity` tokens: its documents back to back (each cut to what is left of the row), then
// `pad` tokens. `learned` (capacity flags) gets the split's loss-mask flags (1 without masks) and 0 for padding.
// Returns the tokens before the padding.
uint64_t read_packed_row(const TokenSplit &split, const std::vector<DocSpan> &docs, const std::vector<uint32_t> &row,
                         uint64_t capacity, int32_t pad, int32_t *out, int32_t *learned);

} // namespace zaya
