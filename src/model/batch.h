// A batch of token sequences packed back to back ("varlen"): sequence s owns rows [seq_start[s], seq_start[s+1]).
// Positions restart at 0 in every sequence, so a batch computes exactly what each sequence computes alone
// (the same as transformers with right padding).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace zaya {

struct Batch {
    std::vector<int32_t> tokens;    // [N]
    std::vector<int32_t> positions; // [N]
    std::vector<int64_t> seq_start; // [B+1]
    // Context parallelism (TokenBatch::chunk): the inputs of each row's parts 0 and 1 in turn, back to back in
    // tokens — at most chunk_len each, fewer or none where a packed row's padding begins. Empty otherwise.
    std::vector<int64_t> part_tokens;

    static Batch from_sequences(const std::vector<std::vector<int32_t>> &seqs);
    int64_t num_tokens() const { return int64_t(tokens.size()); }
    int64_t num_sequences() const { return int64_t(seq_start.size()) - 1; }
    // Next-token targets: tokens shifted left within each sequence, −1 at each sequence's last position.
    std::vector<int32_t> next_token_targets() const;
};

} // namespace zaya
