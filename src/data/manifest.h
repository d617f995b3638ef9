// `data.json`: the manifest of a prepared data directory (written last, so its presence means the shards are
// complete). Example:
//   {"format": "zaya-tokens", "version": 1, "tokenizer": "tokenizer.model", "tokenizer_trained": true,
//    "vocab_size": 4096, "dtype": "u16", "bos_id": 2, "eos_id": 3, "pad_id": 0, "unk_id": 1,
//    "val_percent": 5.0, "shard_tokens": 67108864,
//    "train": {"docs": 470, "tokens": 3180000, "shards": ["train_000000.bin"]},
//    "val": {"docs": 27, "tokens": 170000, "shards": ["val_000000.bin"]},
//    "sources": ["_sources/about.rst.txt", ...], "skipped": [...]}
// Paths in it are relative to the data directory (tokenizer, shards) or the input keys (sources).
// Fine-tuning data (prompt/completion or chat records, data/sources.h) also has loss masks: "version": 2,
// "loss_mask": true, and in each split "masks": ["train_000000.mask", ...], one u8 shard of 0/1 per token shard
// (1: the token is learned as a target). Version 2 keeps a zaya that does not know masks from training on
// prompts; data without masks stays version 1.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

struct SplitInfo {
    uint64_t docs = 0, tokens = 0;
    std::vector<std::string> shards; // file names inside the data directory, in stream order
    std::vector<std::string> masks;  // with loss masks: one per shard, the same tokens' learn-or-not flags
};

struct DataManifest {
    std::string tokenizer = "tokenizer.model";
    bool tokenizer_trained = false;
    uint64_t vocab_size = 0;
    std::string dtype = "u16";
    int32_t bos_id = -1, eos_id = -1, pad_id = -1, unk_id = -1;
    double val_percent = 0;
    uint64_t shard_tokens = 0;
    bool loss_mask = false; // the splits have mask shards
    SplitInfo train, val;
    std::vector<std::string> sources; // source file keys, in document order
    std::vector<std::string> skipped; // binary files skipped in input directories
};

inline constexpr const char *kManifestName = "data.json";

void manifest_save(const DataManifest &m, const std::string &data_dir);
// Validates types and the fields the loader relies on; errors name DATA_DIR/data.json and the field.
DataManifest manifest_load(const std::string &data_dir);

} // namespace zaya
