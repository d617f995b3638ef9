#include "io/direct_write.h"

#include "core/error.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <new>
#include <unistd.h>

namespace zaya {

void AlignedBytes::Free::operator()(uint8_t *p) const { std::free(p); }

AlignedBytes::AlignedBytes(size_t size) : size_(size) {
    capacity_ = (size + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    if (capacity_ == 0) capacity_ = kDirectAlign;
    void *p = std::aligned_alloc(kDirectAlign, capacity_);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, capacity_); // touched now: no page faults later
    data_.reset(static_cast<uint8_t *>(p));
}

namespace {

struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

// Writes [data, data + n) at the current offset; returns false (errno EINVAL) if O_DIRECT is refused at once.
bool write_all(int fd, const uint8_t *data, size_t n, const std::string &path, bool direct) {
    constexpr size_t kPiece = size_t(32) << 20;
    for (size_t done = 0; done < n;) {
        const ssize_t w = ::write(fd, data + done, std::min(kPiece, n - done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && direct && errno == EINVAL && done == 0) return false;
        if (w < 0) fail("{}: write failed: {}", path, std::strerror(errno));
        if (w == 0) fail("{}: write made no progress", path);
        done += size_t(w);
    }
    return true;
}

} // namespace

void write_file_direct(const std::string &path, const AlignedBytes &bytes) {
    Fd f;
    f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    bool direct = f.fd >= 0;
    if (direct && !write_all(f.fd, bytes.data(), bytes.capacity(), path, true)) {
        ::close(f.fd); // the file system takes O_DIRECT opens but not the writes
        f.fd = -1;
        direct = false;
    }
    if (!direct) {
        f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (f.fd < 0) fail("{}: cannot create: {}", path, std::strerror(errno));
        write_all(f.fd, bytes.data(), bytes.size(), path, false);
    }
    // O_DIRECT wrote whole blocks: cut the padding off.
    if (direct && ::ftruncate(f.fd, off_t(bytes.size())) != 0) fail("{}: truncate failed: {}", path, std::strerror(errno));
    if (::fsync(f.fd) != 0) fail("{}: fsync failed: {}", path, std::strerror(errno));
    const int fd = f.fd;
    f.fd = -1;
    if (::close(fd) != 0) fail("{}: close failed: {}", path, std::strerror(errno));
}

} // namespace zaya
