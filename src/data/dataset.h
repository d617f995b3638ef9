// A prepared data directory opened for reading: data.json plus every train/val shard (and loss-mask shard),
// mmapped and checked against the manifest (vocab size, dtype, token totals, one mask token per token).
#pragma once
#include "data/manifest.h"
#include "data/shards.h"

#include <memory>
#include <string>
#include <vector>

namespace zaya {

struct TokenSplit {
    std::string name; // "train" / "val"
    std::vector<std::unique_ptr<Shard>> shards;
    std::vector<std::unique_ptr<Shard>> masks; // with loss masks: shards[i]'s flags, 1 = learned as a target
    uint64_t tokens = 0;
};

class DataSet {
  public:
    static std::shared_ptr<const DataSet> open(const std::string &data_dir);

    const std::string &dir() const { return dir_; }
    const DataManifest &manifest() const { return manifest_; }
    const TokenSplit &train() const { return train_; }
    const TokenSplit &val() const { return val_; }
    std::string tokenizer_path() const;

  private:
    std::string dir_;
    DataManifest manifest_;
    TokenSplit train_, val_;
};

} // namespace zaya
