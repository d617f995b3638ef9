// Token shards (src/data/shards.h): round trips, every corrupt-file case, and splitting a stream into shards.
#include "core/error.h"
#include "data/shard_set_writer.h"
#include "data/shards.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace zaya;
using zaya::test::TempDir;

namespace {

std::vector<uint8_t> read_bytes(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const std::string &path, const std::vector<uint8_t> &b) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(b.data()), std::streamsize(b.size()));
}

template <class T> void poke(std::vector<uint8_t> &b, size_t at, T v) { std::memcpy(b.data() + at, &v, sizeof v); }

// Expects Shard::open to fail with a message naming the file and containing `needle`.
void expect_open_error(const std::string &path, const std::string &needle) {
    try {
        Shard::open(path);
        ADD_FAILURE() << "no error for " << needle;
    } catch (const Error &e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
        EXPECT_NE(msg.find(needle), std::string::npos) << "'" << needle << "' not in: " << msg;
    }
}

std::vector<int32_t> iota_tokens(size_t n, int32_t vocab) {
    std::vector<int32_t> t(n);
    for (size_t i = 0; i < n; ++i) t[i] = int32_t((i * 7919) % size_t(vocab));
    return t;
}

} // namespace

TEST(DataShards, RoundTripU16) {
    TempDir d;
    const auto toks = iota_tokens(1000, 4096);
    shard_write(d.str("a.bin"), toks, 4096);
    const auto bytes = read_bytes(d.str("a.bin"));
    ASSERT_EQ(bytes.size(), 64u + 2 * toks.size());
    EXPECT_EQ(std::memcmp(bytes.data(), "ZAYATOK1", 8), 0);
    auto s = Shard::open(d.str("a.bin"));
    EXPECT_EQ(s->dtype(), TokenDType::U16);
    EXPECT_EQ(s->vocab_size(), 4096u);
    ASSERT_EQ(s->size(), toks.size());
    std::vector<int32_t> back(toks.size());
    s->copy(0, toks.size(), back.data());
    EXPECT_EQ(back, toks);
    EXPECT_EQ(s->at(999), toks[999]);
    EXPECT_THROW(s->copy(990, 11, back.data()), Error);
    EXPECT_FALSE(fs::exists(d.str("a.bin.tmp." + std::to_string(::getpid()))));
}

TEST(DataShards, RoundTripU32AndBoundaryVocab) {
    TempDir d;
    const auto toks = iota_tokens(500, 262144); // Gemma3-sized vocabulary needs u32
    shard_write(d.str("b.bin"), toks, 262144);
    auto s = Shard::open(d.str("b.bin"));
    EXPECT_EQ(s->dtype(), TokenDType::U32);
    std::vector<int32_t> back(toks.size());
    s->copy(0, toks.size(), back.data());
    EXPECT_EQ(back, toks);
    // 65536 ids still fit u16; 65537 do not.
    EXPECT_EQ(token_dtype_for_vocab(65536), TokenDType::U16);
    EXPECT_EQ(token_dtype_for_vocab(65537), TokenDType::U32);
    shard_write(d.str("c.bin"), {65535, 0}, 65536);
    EXPECT_EQ(Shard::open(d.str("c.bin"))->at(0), 65535);
}

TEST(DataShards, EmptyShard) {
    TempDir d;
    shard_write(d.str("e.bin"), {}, 100);
    EXPECT_EQ(Shard::open(d.str("e.bin"))->size(), 0u);
}

TEST(DataShards, WriterRejectsOutOfVocabularyAndLeavesNoFile) {
    TempDir d;
    try {
        shard_write(d.str("w.bin"), {1, 2, 100}, 100);
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("w.bin"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("token 100"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(fs::is_empty(d.path)); // neither the shard nor its temp file
}

TEST(DataShards, CorruptFiles) {
    TempDir d;
    const std::string good = d.str("good.bin"), bad = d.str("bad.bin");
    shard_write(good, iota_tokens(100, 1000), 1000);
    const auto orig = read_bytes(good);

    auto b = orig;
    std::memcpy(b.data(), "GGUF\0\0\0\0", 8);
    write_bytes(bad, b);
    expect_open_error(bad, "magic");

    write_bytes(bad, {orig.begin(), orig.begin() + 40}); // header cut short
    expect_open_error(bad, "truncated");

    write_bytes(bad, {});
    expect_open_error(bad, "truncated");

    write_bytes(bad, {orig.begin(), orig.end() - 10}); // tokens cut short
    expect_open_error(bad, "header says 100 u16 tokens");

    b = orig;
    poke<uint64_t>(b, 16, 101); // count larger than the data
    write_bytes(bad, b);
    expect_open_error(bad, "header says 101");

    b = orig;
    poke<uint64_t>(b, 16, 99); // count smaller: trailing bytes
    write_bytes(bad, b);
    expect_open_error(bad, "header says 99");

    b = orig;
    poke<uint64_t>(b, 16, UINT64_MAX / 2); // count × 2 overflows
    write_bytes(bad, b);
    expect_open_error(bad, "header says");

    b = orig;
    poke<uint32_t>(b, 12, 7);
    write_bytes(bad, b);
    expect_open_error(bad, "dtype 7 unknown");

    b = orig;
    poke<uint32_t>(b, 12, 1); // says u32 but holds u16 data: sizes disagree
    write_bytes(bad, b);
    expect_open_error(bad, "u32");

    b = orig;
    poke<uint64_t>(b, 24, 70000); // u16 cannot hold this vocabulary
    write_bytes(bad, b);
    expect_open_error(bad, "dtype u16 cannot hold vocab size 70000");

    b = orig;
    poke<uint32_t>(b, 8, 2);
    write_bytes(bad, b);
    expect_open_error(bad, "version 2");

    b = orig;
    b[40] = 1;
    write_bytes(bad, b);
    expect_open_error(bad, "reserved");

    b = orig;
    poke<uint16_t>(b, 64 + 2 * 50, 1000); // token == vocab size
    write_bytes(bad, b);
    expect_open_error(bad, "token 1000 at position 50");

    expect_open_error(d.str("missing.bin"), "cannot open");
}

TEST(DataShards, ShardSetSplitsTheStream) {
    TempDir d;
    ShardSetWriter w(d.str(), "train", 1000, 10);
    std::vector<int32_t> all;
    for (int doc = 0; doc < 3; ++doc) {
        std::vector<int32_t> t(7);
        for (int i = 0; i < 7; ++i) t[size_t(i)] = doc * 10 + i;
        all.insert(all.end(), t.begin(), t.end());
        w.append_document(t);
    }
    const SplitInfo info = w.finish();
    EXPECT_EQ(info.docs, 3u);
    EXPECT_EQ(info.tokens, 21u);
    ASSERT_EQ(info.shards, (std::vector<std::string>{"train_000000.bin", "train_000001.bin", "train_000002.bin"}));
    std::vector<int32_t> back;
    for (const auto &name : info.shards) {
        auto s = Shard::open(d.str(name));
        std::vector<int32_t> t(s->size());
        s->copy(0, t.size(), t.data());
        back.insert(back.end(), t.begin(), t.end());
    }
    EXPECT_EQ(back, all);
    EXPECT_EQ(Shard::open(d.str("train_000002.bin"))->size(), 1u);

    ShardSetWriter empty(d.str(), "val", 1000, 10);
    EXPECT_TRUE(empty.finish().shards.empty());
}
