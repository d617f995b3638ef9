// Token shards: one binary file of token ids, read by mmap.
//
// Layout (little-endian), 64-byte header then the tokens:
//   0  char[8] magic "ZAYATOK1"
//   8  u32     version (1)
//   12 u32     dtype: 0 = u16, 1 = u32 (token writers use u16 whenever vocab ≤ 65536, halving the file),
//              2 = u8 (vocab ≤ 256: the loss-mask shards, data/loss_mask.h)
//   16 u64     token count
//   24 u64     vocab size (every token is < this)
//   32 ..63    reserved, zero
//   64 tokens  count × 2 or 4 bytes
// The 64-byte header keeps the token array aligned for any element size and leaves room to grow.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zaya {

class AtomicFile;

inline constexpr char kShardMagic[8] = {'Z', 'A', 'Y', 'A', 'T', 'O', 'K', '1'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr size_t kShardHeaderBytes = 64;

enum class TokenDType : uint32_t { U16 = 0, U32 = 1, U8 = 2 };

TokenDType token_dtype_for_vocab(uint64_t vocab_size);
const char *token_dtype_name(TokenDType t); // "u16" / "u32" / "u8"
size_t token_dtype_size(TokenDType t);

struct ShardHeader {
    TokenDType dtype = TokenDType::U16;
    uint64_t count = 0;
    uint64_t vocab_size = 0;
};

void shard_header_encode(const ShardHeader &h, uint8_t out[kShardHeaderBytes]);
// Validates magic, version, dtype, vocab and count against `file_size`; errors name `label`.
ShardHeader shard_header_decode(const uint8_t *bytes, size_t file_size, const std::string &label);

// Streams tokens into a new shard file; nothing appears under `path` until finish().
class ShardWriter {
  public:
    // dtype: the narrowest that holds the vocabulary's ids unless given (u8 only when asked for).
    ShardWriter(std::string path, uint64_t vocab_size);
    ShardWriter(std::string path, uint64_t vocab_size, TokenDType dtype);
    ~ShardWriter();
    ShardWriter(const ShardWriter &) = delete;
    ShardWriter &operator=(const ShardWriter &) = delete;

    void append(const int32_t *tokens, size_t n); // each must be in [0, vocab)
    uint64_t count() const { return count_; }
    void finish(); // writes the header with the final count and renames the file into place

  private:
    void flush();
    std::unique_ptr<AtomicFile> file_;
    uint64_t vocab_;
    TokenDType dtype_;
    uint64_t count_ = 0;
    std::vector<uint8_t> buf_;
};

void shard_write(const std::string &path, const std::vector<int32_t> &tokens, uint64_t vocab_size);

// One memory-mapped shard. open() validates the header and that every token is < vocab size.
class Shard {
  public:
    static std::unique_ptr<Shard> open(const std::string &path);
    ~Shard();
    Shard(const Shard &) = delete;
    Shard &operator=(const Shard &) = delete;

    const std::string &path() const { return path_; }
    uint64_t size() const { return header_.count; }
    uint64_t vocab_size() const { return header_.vocab_size; }
    TokenDType dtype() const { return header_.dtype; }
    int32_t at(uint64_t i) const;
    // tokens [begin, begin + n) widened to int32
    void copy(uint64_t begin, uint64_t n, int32_t *out) const;

  private:
    Shard() = default;
    std::string path_;
    void *map_ = nullptr;
    size_t map_size_ = 0;
    ShardHeader header_;
    const uint8_t *tokens_ = nullptr;
};

} // namespace zaya
