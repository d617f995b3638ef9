// Writing a whole file image with O_DIRECT: the device reads straight from our memory — no copy into the page
// cache, almost no CPU — which is what lets a background checkpoint writer keep the disk busy while training
// threads occupy every core (bench: `zaya bench checkpoint`).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace zaya {

constexpr size_t kDirectAlign = 4096; // O_DIRECT alignment of addresses, offsets and lengths

// Zeroed bytes at a kDirectAlign-aligned address, with capacity rounded up to a multiple of kDirectAlign.
class AlignedBytes {
  public:
    AlignedBytes() = default;
    explicit AlignedBytes(size_t size);
    uint8_t *data() const { return data_.get(); }
    size_t size() const { return size_; }
    size_t capacity() const { return capacity_; }

  private:
    struct Free {
        void operator()(uint8_t *p) const;
    };
    std::unique_ptr<uint8_t, Free> data_;
    size_t size_ = 0, capacity_ = 0;
};

// Creates `path` and writes `bytes` (its first size() bytes) with O_DIRECT in 32 MiB pieces, then truncates to
// size() and fsyncs. Falls back to ordinary writes where the file system refuses O_DIRECT (tmpfs). Errors
// (ENOSPC, EIO, ...) name the file; a partly written file is left for the caller to remove.
void write_file_direct(const std::string &path, const AlignedBytes &bytes);

} // namespace zaya
