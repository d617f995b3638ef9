// Safetensors reading (mmap, validated before use) and writing (atomic: temp file, fsync, rename).
//
// Format: 8-byte little-endian header length N, N bytes of JSON
//   { "__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ... }
// then the data block; offsets are relative to the start of the data block.
#pragma once
#include "core/dtype.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

struct TensorInfo {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;
    const uint8_t *data = nullptr; // points into the mapped file
    size_t nbytes = 0;
    std::string file; // path of the file holding it (for error messages)

    int64_t numel() const;
    std::string shape_str() const; // "[4, 8]"
};

// Parses and validates a whole safetensors image held in memory (`label` names it in errors).
// Checks: size ≥ 8, header length within the buffer, UTF-8 JSON object, every entry an object with a
// supported dtype, a shape of non-negative integers, data_offsets [begin, end] with begin ≤ end ≤ data size,
// end − begin == numel × dtype size (no overflow), no two tensors overlapping, metadata a string map.
// Throws zaya::Error naming the label and the tensor/field on any violation. TensorInfo::data points into `bytes`.
struct SafetensorsHeader {
    std::vector<TensorInfo> tensors; // in order of data offset
    std::map<std::string, std::string> metadata;
};
SafetensorsHeader safetensors_parse(const uint8_t *bytes, size_t size, const std::string &label);

// One memory-mapped safetensors file.
class SafetensorsFile {
  public:
    static std::unique_ptr<SafetensorsFile> open(const std::string &path);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile &) = delete;
    SafetensorsFile &operator=(const SafetensorsFile &) = delete;

    const std::string &path() const { return path_; }
    const std::vector<TensorInfo> &tensors() const { return header_.tensors; }
    const std::map<std::string, std::string> &metadata() const { return header_.metadata; }
    const TensorInfo *find(std::string_view name) const; // nullptr if absent

  private:
    SafetensorsFile() = default;
    std::string path_;
    void *map_ = nullptr;
    size_t map_size_ = 0;
    SafetensorsHeader header_;
};

// All tensors of a model directory: `model.safetensors`, or the shards listed by
// `model.safetensors.index.json` ({"weight_map": {name: file}}). Each name must live in exactly the file the
// index says; a name present in two files, a shard missing from disk or a path escaping the directory is an
// error. A directory may also be given a single .safetensors path directly.
class SafetensorSet {
  public:
    static SafetensorSet open(const std::string &dir_or_file);

    const TensorInfo *find(std::string_view name) const; // nullptr if absent
    std::vector<std::string> names() const;               // sorted
    size_t size() const { return by_name_.size(); }

  private:
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, const TensorInfo *, std::less<>> by_name_;
};

// Copies a tensor into fp32 (converting from BF16/F16). `out` holds numel() floats.
void tensor_read_f32(const TensorInfo &t, float *out);

struct TensorToWrite {
    std::string name;
    DType dtype = DType::F32; // dtype stored in the file
    std::vector<int64_t> shape;
    const float *data = nullptr; // fp32 source, converted to `dtype` on write
    const void *raw = nullptr;   // or: bytes already in `dtype`, written as they are (e.g. bf16 weights)
};

// Where a written tensor ended up: byte offset of its data from the start of the file, its size as stored, and
// the xxh64 (seed 0) of those stored bytes — what a checkpoint manifest records.
struct WrittenTensor {
    uint64_t offset = 0, nbytes = 0, xxh64 = 0;
};

// Where everything of a safetensors file goes: `prefix` is the 8-byte header length and the JSON header, padded
// with spaces so that the data block starts at a multiple of `data_align` (8 by default; checkpoints use 4096 so
// that the data can be written with O_DIRECT); tensors (xxh64 left 0) follow contiguously in the given order (the
// reference reader rejects gaps). Validates names and shapes; errors name `path`.
struct SafetensorsLayout {
    std::string prefix;
    std::vector<WrittenTensor> tensors;
    std::vector<uint64_t> numel;
    uint64_t file_size = 0;
};
SafetensorsLayout safetensors_layout(const std::string &path, const std::vector<TensorToWrite> &tensors,
                                     const std::map<std::string, std::string> &metadata, size_t data_align = 8);

// Writes a safetensors file laid out as above, atomically: `<path>.tmp.<pid>`, fsync, rename over `path`, fsync
// the directory. If `written` is given it receives one entry per tensor, in order (hashes are computed from
// memory while writing, no second read).
void safetensors_write(const std::string &path, const std::vector<TensorToWrite> &tensors,
                       const std::map<std::string, std::string> &metadata = {},
                       std::vector<WrittenTensor> *written = nullptr, size_t data_align = 8);

} // namespace zaya
