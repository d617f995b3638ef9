#include "data/shard_set_writer.h"

#include "core/error.h"

#include <algorithm>
#include <filesystem>

namespace fs = std::filesystem;

namespace zaya {

ShardSetWriter::ShardSetWriter(std::string dir, std::string split, uint64_t vocab_size, uint64_t shard_tokens)
    : dir_(std::move(dir)), split_(std::move(split)), vocab_(vocab_size), shard_tokens_(shard_tokens) {
    if (shard_tokens_ == 0) fail("shard size must be at least 1 token");
}

ShardSetWriter::~ShardSetWriter() = default;

std::string ShardSetWriter::shard_name(const std::string &split, size_t index) {
    return fmt::format("{}_{:06d}.bin", split, index);
}

void ShardSetWriter::append_document(const std::vector<int32_t> &tokens) {
    size_t at = 0;
    while (at < tokens.size()) {
        if (!cur_) {
            const std::string name = shard_name(split_, info_.shards.size());
            cur_ = std::make_unique<ShardWriter>((fs::path(dir_) / name).string(), vocab_);
            info_.shards.push_back(name);
        }
        const size_t n = size_t(std::min<uint64_t>(tokens.size() - at, shard_tokens_ - cur_->count()));
        cur_->append(tokens.data() + at, n);
        at += n;
        if (cur_->count() == shard_tokens_) {
            cur_->finish();
            cur_.reset();
        }
    }
    info_.docs += 1;
    info_.tokens += tokens.size();
}

SplitInfo ShardSetWriter::finish() {
    if (cur_) {
        cur_->finish();
        cur_.reset();
    }
    return info_;
}

} // namespace zaya
