// The held-out validation split: which documents go to val, decided from each document's key alone, so the
// choice is stable when other documents are added or the corpus moves (keys are relative names).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

// A document's position in [0, 10000): 64-bit FNV-1a of the key, mixed by splitmix64 so similar keys spread.
uint32_t split_score(std::string_view key);

// val[i] = split_score(keys[i]) < val_percent × 100 (so fractional percentages work). When val_percent > 0 and
// there are ≥ 2 documents, each split gets at least one: the lowest-scoring train document moves to val if val
// came out empty, the highest-scoring val document moves to train if train did (ties: the earlier document).
// One document always goes to train; val_percent 0 means no validation split.
std::vector<bool> assign_val_split(const std::vector<std::string> &keys, double val_percent);

} // namespace zaya
