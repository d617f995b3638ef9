#include "data/shards.h"

#include "core/error.h"
#include "core/atomic_file.h"

#include <bit>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zaya {

static_assert(std::endian::native == std::endian::little, "shards are little-endian; a big-endian host needs swaps");

namespace {

constexpr size_t kFlushBytes = size_t(1) << 22;

std::string errno_str() { return std::strerror(errno); }

template <class T> void put(uint8_t *p, T v) { std::memcpy(p, &v, sizeof v); }
template <class T> T get(const uint8_t *p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

std::string printable(const uint8_t *p, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += (p[i] >= 0x20 && p[i] < 0x7f) ? char(p[i]) : '?';
    return s;
}

} // namespace

TokenDType token_dtype_for_vocab(uint64_t vocab_size) {
    return vocab_size <= 65536 ? TokenDType::U16 : TokenDType::U32;
}

const char *token_dtype_name(TokenDType t) {
    return t == TokenDType::U8 ? "u8" : t == TokenDType::U16 ? "u16" : "u32";
}
size_t token_dtype_size(TokenDType t) { return t == TokenDType::U8 ? 1 : t == TokenDType::U16 ? 2 : 4; }

namespace {
// The largest vocabulary a dtype holds.
uint64_t dtype_max_vocab(TokenDType t) {
    return t == TokenDType::U8 ? 256 : t == TokenDType::U16 ? 65536 : uint64_t(INT32_MAX);
}
} // namespace

void shard_header_encode(const ShardHeader &h, uint8_t out[kShardHeaderBytes]) {
    std::memset(out, 0, kShardHeaderBytes);
    std::memcpy(out, kShardMagic, 8);
    put<uint32_t>(out + 8, kShardVersion);
    put<uint32_t>(out + 12, uint32_t(h.dtype));
    put<uint64_t>(out + 16, h.count);
    put<uint64_t>(out + 24, h.vocab_size);
}

ShardHeader shard_header_decode(const uint8_t *b, size_t file_size, const std::string &label) {
    if (file_size < kShardHeaderBytes)
        fail("{}: truncated token shard: {} bytes, shorter than the {}-byte header", label, file_size,
             kShardHeaderBytes);
    if (std::memcmp(b, kShardMagic, 8) != 0)
        fail("{}: not a zaya token shard: magic '{}', expected 'ZAYATOK1'", label, printable(b, 8));
    const auto version = get<uint32_t>(b + 8);
    if (version != kShardVersion)
        fail("{}: token shard version {} not supported (this zaya reads version {})", label, version, kShardVersion);
    const auto dtype = get<uint32_t>(b + 12);
    if (dtype > 2) fail("{}: token shard dtype {} unknown (0 = u16, 1 = u32, 2 = u8)", label, dtype);
    ShardHeader h;
    h.dtype = TokenDType(dtype);
    h.count = get<uint64_t>(b + 16);
    h.vocab_size = get<uint64_t>(b + 24);
    if (h.vocab_size == 0 || h.vocab_size > uint64_t(INT32_MAX))
        fail("{}: token shard vocab size {} out of range [1, {}]", label, h.vocab_size, INT32_MAX);
    if (h.vocab_size > dtype_max_vocab(h.dtype))
        fail("{}: token shard dtype {} cannot hold vocab size {}", label, token_dtype_name(h.dtype), h.vocab_size);
    for (size_t i = 32; i < kShardHeaderBytes; ++i)
        if (b[i] != 0) fail("{}: token shard header byte {} (reserved) is {}, expected 0", label, i, b[i]);
    const uint64_t avail = file_size - kShardHeaderBytes, esize = token_dtype_size(h.dtype);
    if (h.count > avail / esize || h.count * esize != avail)
        fail("{}: token shard header says {} {} tokens ({} bytes) but the file holds {} bytes after the header",
             label, h.count, token_dtype_name(h.dtype), h.count > UINT64_MAX / esize ? 0 : h.count * esize, avail);
    return h;
}

// ---- ShardWriter ----

ShardWriter::ShardWriter(std::string path, uint64_t vocab_size)
    : ShardWriter(std::move(path), vocab_size, token_dtype_for_vocab(vocab_size)) {}

ShardWriter::ShardWriter(std::string path, uint64_t vocab_size, TokenDType dtype) : vocab_(vocab_size), dtype_(dtype) {
    if (vocab_size == 0 || vocab_size > dtype_max_vocab(dtype))
        fail("{}: vocab size {} out of range for dtype {}", path, vocab_size, token_dtype_name(dtype));
    file_ = std::make_unique<AtomicFile>(std::move(path));
    uint8_t hdr[kShardHeaderBytes];
    shard_header_encode({dtype_, 0, vocab_}, hdr); // count patched in finish()
    file_->write(hdr, sizeof hdr);
    buf_.reserve(kFlushBytes + 4);
}

ShardWriter::~ShardWriter() = default;

void ShardWriter::append(const int32_t *tokens, size_t n) {
    const size_t es = token_dtype_size(dtype_);
    for (size_t i = 0; i < n; ++i) {
        const int32_t t = tokens[i];
        if (t < 0 || uint64_t(t) >= vocab_)
            fail("{}: token {} (at position {}) outside the vocabulary [0, {})", file_->path(), t, count_ + i, vocab_);
        const size_t at = buf_.size();
        buf_.resize(at + es);
        if (dtype_ == TokenDType::U8)
            buf_[at] = uint8_t(t);
        else if (dtype_ == TokenDType::U16)
            put<uint16_t>(buf_.data() + at, uint16_t(t));
        else
            put<uint32_t>(buf_.data() + at, uint32_t(t));
        if (buf_.size() >= kFlushBytes) flush();
    }
    count_ += n;
}

void ShardWriter::flush() {
    file_->write(buf_.data(), buf_.size());
    buf_.clear();
}

void ShardWriter::finish() {
    flush();
    uint8_t hdr[kShardHeaderBytes];
    shard_header_encode({dtype_, count_, vocab_}, hdr);
    file_->write_at(0, hdr, sizeof hdr);
    file_->commit();
}

void shard_write(const std::string &path, const std::vector<int32_t> &tokens, uint64_t vocab_size) {
    ShardWriter w(path, vocab_size);
    w.append(tokens.data(), tokens.size());
    w.finish();
}

// ---- Shard ----

std::unique_ptr<Shard> Shard::open(const std::string &path) {
    std::unique_ptr<Shard> s(new Shard());
    s->path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open token shard: {}", path, errno_str());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const std::string err = errno_str();
        ::close(fd);
        fail("{}: cannot stat: {}", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path);
    }
    const size_t n = size_t(st.st_size);
    if (n < kShardHeaderBytes) { // mmap of an empty file fails; report what matters instead
        ::close(fd);
        std::vector<uint8_t> none(kShardHeaderBytes, 0);
        shard_header_decode(none.data(), n, path);
    }
    void *m = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    const std::string err = errno_str();
    ::close(fd); // the mapping keeps the file alive
    if (m == MAP_FAILED) fail("{}: mmap of {} bytes failed: {}", path, n, err);
    s->map_ = m;
    s->map_size_ = n; // from here the destructor unmaps, also if validation throws
    const auto *bytes = static_cast<const uint8_t *>(m);
    s->header_ = shard_header_decode(bytes, n, path);
    s->tokens_ = bytes + kShardHeaderBytes;
    // One pass over the tokens: an out-of-range id would otherwise index past the embedding table mid-training.
    const uint64_t vocab = s->header_.vocab_size;
    uint64_t bad = UINT64_MAX;
    if (s->header_.dtype == TokenDType::U8) {
        for (uint64_t i = 0; i < s->header_.count && bad == UINT64_MAX; ++i)
            if (s->tokens_[i] >= vocab) bad = i;
    } else if (s->header_.dtype == TokenDType::U16) {
        for (uint64_t i = 0; i < s->header_.count && bad == UINT64_MAX; ++i)
            if (get<uint16_t>(s->tokens_ + 2 * i) >= vocab) bad = i;
    } else {
        for (uint64_t i = 0; i < s->header_.count && bad == UINT64_MAX; ++i)
            if (get<uint32_t>(s->tokens_ + 4 * i) >= vocab) bad = i;
    }
    if (bad != UINT64_MAX)
        fail("{}: token {} at position {} is outside the vocabulary [0, {})", path, s->at(bad), bad, vocab);
    return s;
}

Shard::~Shard() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
}

int32_t Shard::at(uint64_t i) const {
    if (header_.dtype == TokenDType::U8) return int32_t(tokens_[i]);
    if (header_.dtype == TokenDType::U16) return int32_t(get<uint16_t>(tokens_ + 2 * i));
    return int32_t(get<uint32_t>(tokens_ + 4 * i));
}

void Shard::copy(uint64_t begin, uint64_t n, int32_t *out) const {
    if (begin > header_.count || n > header_.count - begin)
        fail("{}: read of tokens [{}, {}) past the end ({} tokens)", path_, begin, begin + n, header_.count);
    if (header_.dtype == TokenDType::U8) {
        for (uint64_t i = 0; i < n; ++i) out[i] = int32_t(tokens_[begin + i]);
    } else if (header_.dtype == TokenDType::U16) {
        for (uint64_t i = 0; i < n; ++i) out[i] = int32_t(get<uint16_t>(tokens_ + 2 * (begin + i)));
    } else {
        for (uint64_t i = 0; i < n; ++i) out[i] = int32_t(get<uint32_t>(tokens_ + 4 * (begin + i)));
    }
}

} // namespace zaya
