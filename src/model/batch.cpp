#include "model/batch.h"

namespace zaya {

Batch Batch::from_sequences(const std::vector<std::vector<int32_t>> &seqs) {
    Batch b;
    b.seq_start.push_back(0);
    for (const auto &s : seqs) {
        for (size_t t = 0; t < s.size(); ++t) {
            b.tokens.push_back(s[t]);
            b.positions.push_back(int32_t(t));
        }
        b.seq_start.push_back(int64_t(b.tokens.size()));
    }
    return b;
}

std::vector<int32_t> Batch::next_token_targets() const {
    std::vector<int32_t> t(tokens.size(), -1);
    for (int64_t s = 0; s < num_sequences(); ++s)
        for (int64_t n = seq_start[size_t(s)]; n + 1 < seq_start[size_t(s + 1)]; ++n) t[size_t(n)] = tokens[size_t(n + 1)];
    return t;
}

} // namespace zaya
