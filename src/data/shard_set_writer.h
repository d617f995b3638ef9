// Writes one split ("train" / "val") as a series of shards `<split>_000000.bin`, `<split>_000001.bin`, ...
// of at most `shard_tokens` tokens each. A document may continue into the next shard: the split is one token
// stream, and cutting at shard size rather than document ends keeps every shard full. With loss masks, each shard
// has a mask shard `<split>_000000.mask` (u8, 0/1 per token) cut at the same points.
#pragma once
#include "data/manifest.h"
#include "data/shards.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zaya {

class ShardSetWriter {
  public:
    ShardSetWriter(std::string dir, std::string split, uint64_t vocab_size, uint64_t shard_tokens,
                   bool masked = false);
    ~ShardSetWriter();

    // The document's tokens, already followed by its EOS, and (masked writers only) per token whether it is
    // learned as a target.
    void append_document(const std::vector<int32_t> &tokens, const std::vector<uint8_t> *learned = nullptr);
    // Finishes the last shard; an empty split writes no file.
    SplitInfo finish();

    static std::string shard_name(const std::string &split, size_t index);
    static std::string mask_name(const std::string &split, size_t index);

  private:
    void finish_shard();
    std::string dir_, split_;
    uint64_t vocab_, shard_tokens_;
    bool masked_;
    std::unique_ptr<ShardWriter> cur_, cur_mask_;
    SplitInfo info_;
};

} // namespace zaya
