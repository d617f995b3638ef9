#include "data/dataset.h"

#include "core/error.h"

#include <filesystem>

namespace fs = std::filesystem;

namespace zaya {

namespace {

TokenSplit open_split(const std::string &dir, const std::string &name, const SplitInfo &info,
                      const DataManifest &m) {
    const std::string manifest_file = (fs::path(dir) / kManifestName).string();
    TokenSplit s;
    s.name = name;
    for (const auto &f : info.shards) {
        auto shard = Shard::open((fs::path(dir) / f).string());
        if (shard->vocab_size() != m.vocab_size)
            fail("{}: vocab size {} differs from {}'s {}", shard->path(), shard->vocab_size(), manifest_file,
                 m.vocab_size);
        if (token_dtype_name(shard->dtype()) != m.dtype)
            fail("{}: dtype {} differs from {}'s {}", shard->path(), token_dtype_name(shard->dtype()), manifest_file,
                 m.dtype);
        s.tokens += shard->size();
        s.shards.push_back(std::move(shard));
    }
    for (size_t i = 0; i < info.masks.size(); ++i) { // manifest_load checked there is one per shard
        auto mask = Shard::open((fs::path(dir) / info.masks[i]).string());
        if (mask->dtype() != TokenDType::U8 || mask->vocab_size() != 2)
            fail("{}: not a loss mask (dtype {}, vocab {}; a mask is u8 with vocab 2)", mask->path(),
                 token_dtype_name(mask->dtype()), mask->vocab_size());
        if (mask->size() != s.shards[i]->size())
            fail("{}: {} flags for the {} tokens of {}", mask->path(), mask->size(), s.shards[i]->size(),
                 s.shards[i]->path());
        s.masks.push_back(std::move(mask));
    }
    if (s.tokens != info.tokens)
        fail("{}: {} shards hold {} tokens, the manifest says {} (shards replaced or truncated?)", manifest_file, name,
             s.tokens, info.tokens);
    return s;
}

} // namespace

std::shared_ptr<const DataSet> DataSet::open(const std::string &data_dir) {
    auto d = std::make_shared<DataSet>();
    d->dir_ = data_dir;
    d->manifest_ = manifest_load(data_dir);
    d->train_ = open_split(data_dir, "train", d->manifest_.train, d->manifest_);
    d->val_ = open_split(data_dir, "val", d->manifest_.val, d->manifest_);
    return d;
}

std::string DataSet::tokenizer_path() const { return (fs::path(dir_) / manifest_.tokenizer).string(); }

} // namespace zaya
