#include "core/atomic_file.h"

#include "core/error.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace zaya {

namespace {
std::string errno_str() { return std::strerror(errno); }
} // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
    tmp_ = fmt::format("{}.tmp.{}", path_, ::getpid());
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("{}: cannot create {}: {}", path_, tmp_, errno_str());
}

AtomicFile::~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail("{}: write to {} failed: {}", path_, tmp_, errno_str());
        p += w;
        n -= size_t(w);
    }
}

void AtomicFile::write_at(uint64_t offset, const void *data, size_t n) {
    const char *p = static_cast<const char *>(data);
    while (n > 0) {
        const ssize_t w = ::pwrite(fd_, p, n, off_t(offset));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail("{}: write to {} failed: {}", path_, tmp_, errno_str());
        p += w;
        n -= size_t(w);
        offset += uint64_t(w);
    }
}

void AtomicFile::commit() {
    if (::fsync(fd_) != 0) fail("{}: fsync of {} failed: {}", path_, tmp_, errno_str());
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("{}: close of {} failed: {}", path_, tmp_, errno_str());
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) fail("{}: rename from {} failed: {}", path_, tmp_, errno_str());
    committed_ = true;
    // Make the rename itself durable.
    fs::path parent = fs::path(path_).parent_path();
    if (parent.empty()) parent = ".";
    const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("{}: cannot open directory {} to fsync: {}", path_, parent.string(), errno_str());
    const int rc = ::fsync(dfd);
    const std::string err = errno_str();
    ::close(dfd);
    if (rc != 0) fail("{}: fsync of directory {} failed: {}", path_, parent.string(), err);
}

void write_file_atomic(const std::string &path, std::string_view bytes) {
    AtomicFile f(path);
    f.write(bytes.data(), bytes.size());
    f.commit();
}

std::string read_file_bytes(const std::string &path) {
    std::error_code ec;
    if (fs::is_directory(path, ec)) fail("{}: is a directory, expected a file", path);
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("{}: cannot open: {}", path, errno_str());
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (in.bad()) fail("{}: read failed: {}", path, errno_str());
    return s;
}

} // namespace zaya
