#include "data/shard_set_writer.h"

#include "core/error.h"

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;

namespace zaya {

ShardSetWriter::ShardSetWriter(std::string dir, std::string split, uint64_t vocab_size, uint64_t shard_tokens,
                               bool masked)
    : dir_(std::move(dir)), split_(std::move(split)), vocab_(vocab_size), shard_tokens_(shard_tokens),
      masked_(masked) {
    if (shard_tokens_ == 0) fail("shard size must be at least 1 token");
}

ShardSetWriter::~ShardSetWriter() = default;

std::string ShardSetWriter::shard_name(const std::string &split, size_t index) {
    return fmt::format("{}_{:06d}.bin", split, index);
}

std::string ShardSetWriter::mask_name(const std::string &split, size_t index) {
    return fmt::format("{}_{:06d}.mask", split, index);
}

void ShardSetWriter::append_document(const std::vector<int32_t> &tokens, const std::vector<uint8_t> *learned) {
    ZAYA_ASSERT(masked_ == (learned != nullptr) && (!learned || learned->size() == tokens.size()));
    std::vector<int32_t> flags;
    if (learned) flags.assign(learned->begin(), learned->end());
    size_t at = 0;
    while (at < tokens.size()) {
        if (!cur_) {
            const size_t index = info_.shards.size();
            info_.shards.push_back(shard_name(split_, index));
            cur_ = std::make_unique<ShardWriter>((fs::path(dir_) / info_.shards.back()).string(), vocab_);
            if (masked_) {
                info_.masks.push_back(mask_name(split_, index));
                cur_mask_ = std::make_unique<ShardWriter>((fs::path(dir_) / info_.masks.back()).string(), 2,
                                                          TokenDType::U8);
            }
        }
        const size_t n = size_t(std::min<uint64_t>(tokens.size() - at, shard_tokens_ - cur_->count()));
        cur_->append(tokens.data() + at, n);
        if (masked_) cur_mask_->append(flags.data() + at, n);
        at += n;
        if (cur_->count() == shard_tokens_) finish_shard();
    }
    info_.docs += 1;
    info_.tokens += tokens.size();
}

void ShardSetWriter::finish_shard() {
    // The mask first: a token shard never exists without its mask (data.json, written last, names both).
    if (cur_mask_) cur_mask_->finish();
    cur_->finish();
    cur_.reset();
    cur_mask_.reset();
}

SplitInfo ShardSetWriter::finish() {
    if (cur_) finish_shard();
    return info_;
}

} // namespace zaya
