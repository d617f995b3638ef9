// What the checkpoint writer and reader must agree on (train/checkpoint.h): the manifest's format and version,
// the tensor groups' files and the names of chunk entries.
#pragma once
#include <cstddef>
#include <fmt/format.h>
#include <string>

namespace zaya::checkpoint_format {

constexpr const char *kFormat = "zaya-checkpoint";
constexpr int kVersion = 3;      // written; version 2 (one whole tensor per entry, no chunks) is read too
constexpr int kOldestRead = 2;
constexpr const char *kModel = "model";
constexpr const char *kOptimizer = "optimizer";

// The file of `group` that rank `rank` of `ranks` writes: "model.safetensors" from one process, else
// "model-00001-of-00002.safetensors" (the Hugging Face name of a shard; model tensors are stored whole in them).
inline std::string file_of(const std::string &group, int rank, int ranks) {
    if (ranks == 1) return group + ".safetensors";
    return fmt::format("{}-{:05d}-of-{:05d}.safetensors", group, rank + 1, ranks);
}

// The safetensors entry of elements [at, at + numel) of a tensor of `tensor_numel` elements named `name`.
inline std::string chunk_entry(const std::string &name, size_t at, size_t numel, size_t tensor_numel) {
    if (at == 0 && numel == tensor_numel) return name;
    return fmt::format("{}[{}:{}]", name, at, at + numel);
}

} // namespace zaya::checkpoint_format
