// Atomic file output: bytes go to `<path>.tmp.<pid>`, which is fsynced and renamed over `path` only by commit(),
// so an error or crash never leaves a half-written file under the real name (a reader sees the old file or the
// new one, never a mix).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya {

class AtomicFile {
  public:
    explicit AtomicFile(std::string path); // creates the temp file
    ~AtomicFile();                         // removes the temp file unless committed
    AtomicFile(const AtomicFile &) = delete;
    AtomicFile &operator=(const AtomicFile &) = delete;

    void write(const void *data, size_t n);
    // Overwrites bytes already written (a header whose fields are known only at the end).
    void write_at(uint64_t offset, const void *data, size_t n);
    // fsync, close, rename over the final path, fsync the directory.
    void commit();
    const std::string &path() const { return path_; }

  private:
    std::string path_, tmp_;
    int fd_ = -1;
    bool committed_ = false;
};

void write_file_atomic(const std::string &path, std::string_view bytes);

// The whole file as bytes; errors name the file.
std::string read_file_bytes(const std::string &path);

} // namespace zaya
