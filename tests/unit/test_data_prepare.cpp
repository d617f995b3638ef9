// `zaya prepare` (src/data/prepare.h, sources.h, split.h): documents and EOS placement, the validation split,
// determinism, a given tokenizer, and the input errors (JSONL file:line, binary files, missing paths).
#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/prepare.h"
#include "data/sources.h"
#include "data/split.h"
#include "data/tokenizer.h"
#include "test_helpers.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace zaya;
using zaya::test::TempDir;

namespace {

std::string words(uint64_t seed, int n) {
    const char *w[] = {"alpha", "beta", "gamma", "delta", "data", "token", "shard", "model", "def", "return"};
    Rng rng(seed, 1);
    std::string s;
    for (int i = 0; i < n; ++i) {
        s += w[rng.next() % 10];
        s += i % 12 == 11 ? "\n" : (i % 12 == 5 ? "  " : " ");
    }
    return s;
}

void write_text(const fs::path &p, const std::string &text) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << text;
}

std::string bytes_of(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The corpus: three text files in a tree, a JSONL file with three records (and a blank line), plus files
// that must be ignored: a binary file, a hidden directory, a Latin-1 file.
struct Corpus {
    TempDir dir;
    std::vector<std::string> docs; // document texts in the order prepare sorts them
    Corpus() {
        const fs::path root = dir.path / "corpus";
        write_text(root / "a.txt", words(1, 300));
        write_text(root / "b.md", "# Title\n\n" + words(2, 200));
        write_text(root / "sub/c.py", "def f(x):\n    return x  # ü\n" + words(3, 250));
        std::string jl;
        for (int i = 0; i < 3; ++i) {
            jsonl_line(jl, words(10 + uint64_t(i), 80 + 20 * i));
            if (i == 0) jl += "\n";
        }
        write_text(root / "d.jsonl", jl);
        write_text(root / "img.png", std::string("\x89PNG\r\n\x1a\n\0\0\0", 11));
        write_text(root / "latin1.txt", "caf\xe9\n");
        write_text(root / ".git/HEAD", "ref: refs/heads/main\n");
        // sorted by key: corpus/a.txt, corpus/b.md, corpus/d.jsonl (3 records), corpus/sub/c.py
        docs = {words(1, 300), "# Title\n\n" + words(2, 200), words(10, 80), words(11, 100), words(12, 120),
                "def f(x):\n    return x  # ü\n" + words(3, 250)};
    }
    static void jsonl_line(std::string &out, const std::string &text) {
        std::string esc;
        for (char c : text) esc += c == '\n' ? std::string("\\n") : std::string(1, c);
        out += "{\"id\": 1, \"text\": \"" + esc + "\"}\n";
    }
    std::string root() const { return (dir.path / "corpus").string(); }
};

PrepareOptions opts(const std::string &input, const std::string &out) {
    PrepareOptions o;
    o.inputs = {input};
    o.out_dir = out;
    o.vocab_size = 320;
    o.val_percent = 20;
    o.progress = false;
    return o;
}

std::vector<int32_t> read_split(const TokenSplit &s) {
    std::vector<int32_t> all;
    for (const auto &sh : s.shards) {
        std::vector<int32_t> t(sh->size());
        sh->copy(0, t.size(), t.data());
        all.insert(all.end(), t.begin(), t.end());
    }
    return all;
}

std::string error_of(const PrepareOptions &o) { return test::error_of([&] { prepare_data(o); }); }

} // namespace

TEST(DataPrepare, DocumentsEosAndSplit) {
    Corpus c;
    const std::string out = c.dir.str("data");
    const PrepareResult r = prepare_data(opts(c.root(), out));
    const DataManifest &m = r.manifest;
    EXPECT_EQ(m.train.docs + m.val.docs, 6u);
    EXPECT_GE(m.val.docs, 1u);
    EXPECT_GE(m.train.docs, 1u);
    EXPECT_EQ(m.sources,
              (std::vector<std::string>{"corpus/a.txt", "corpus/b.md", "corpus/d.jsonl", "corpus/sub/c.py"}));
    // .git is not even looked at
    EXPECT_EQ(m.skipped, (std::vector<std::string>{"corpus/img.png", "corpus/latin1.txt"}));
    EXPECT_TRUE(m.tokenizer_trained);
    EXPECT_EQ(m.vocab_size, 320u);
    EXPECT_EQ(m.eos_id, 3);
    EXPECT_EQ(m.dtype, "u16");
    EXPECT_TRUE(fs::exists(fs::path(out) / "tokenizer.model"));
    EXPECT_FALSE(fs::exists(fs::path(out) / "tokenizer_train.txt.tmp"));

    // Each split is its documents' tokens, each followed by EOS, in corpus order; the split follows split.h.
    auto data = DataSet::open(out);
    const Tokenizer tok = Tokenizer::load(data->tokenizer_path());
    const std::vector<std::string> keys = {"corpus/a.txt", "corpus/b.md", "corpus/d.jsonl:1", "corpus/d.jsonl:3",
                                           "corpus/d.jsonl:4", "corpus/sub/c.py"};
    const std::vector<bool> val = assign_val_split(keys, 20);
    std::vector<int32_t> want_train, want_val;
    for (size_t i = 0; i < c.docs.size(); ++i) {
        auto &w = val[i] ? want_val : want_train;
        const auto ids = tok.encode(c.docs[i]);
        EXPECT_EQ(std::count(ids.begin(), ids.end(), 3), 0);
        w.insert(w.end(), ids.begin(), ids.end());
        w.push_back(tok.eos_id());
    }
    EXPECT_EQ(read_split(data->train()), want_train);
    EXPECT_EQ(read_split(data->val()), want_val);
    EXPECT_EQ(m.train.tokens, want_train.size());
}

TEST(DataPrepare, DeterministicAndGivenTokenizer) {
    Corpus c;
    PrepareOptions o = opts(c.root(), c.dir.str("one"));
    o.shard_tokens = 500; // several shards per split
    const auto r1 = prepare_data(o);
    o.out_dir = c.dir.str("two");
    prepare_data(o);
    EXPECT_GT(r1.manifest.train.shards.size(), 1u);
    for (const auto &name : fs::directory_iterator(c.dir.str("one"))) {
        const auto other = fs::path(c.dir.str("two")) / name.path().filename();
        EXPECT_EQ(bytes_of(name.path()), bytes_of(other)) << name.path();
    }
    // A given tokenizer (here the one just trained) gives the same shards, and is copied in.
    o.out_dir = c.dir.str("three");
    o.tokenizer = c.dir.str("one/tokenizer.model");
    const auto r3 = prepare_data(o);
    EXPECT_FALSE(r3.manifest.tokenizer_trained);
    for (const auto &name : r1.manifest.train.shards)
        EXPECT_EQ(bytes_of(fs::path(c.dir.str("one")) / name), bytes_of(fs::path(c.dir.str("three")) / name));
    EXPECT_EQ(bytes_of(c.dir.str("one/tokenizer.model")), bytes_of(c.dir.str("three/tokenizer.model")));

    // Re-preparing into a directory with more shards removes the stale ones.
    o.out_dir = c.dir.str("one");
    o.shard_tokens = 1 << 20;
    const auto r4 = prepare_data(o);
    EXPECT_EQ(r4.manifest.train.shards.size(), 1u);
    EXPECT_FALSE(fs::exists(c.dir.str("one/train_000001.bin")));
    EXPECT_EQ(DataSet::open(c.dir.str("one"))->train().tokens, r1.manifest.train.tokens);
}

TEST(DataPrepare, JsonlErrorsNameFileAndLine) {
    TempDir d;
    write_text(d.path / "bad.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"broken\n");
    EXPECT_NE(error_of(opts(d.str("bad.jsonl"), d.str("o"))).find("bad.jsonl:2: invalid JSON"), std::string::npos);
    write_text(d.path / "nofield.jsonl", "{\"text\": \"fine\"}\n\n{\"body\": \"x\"}\n");
    EXPECT_NE(error_of(opts(d.str("nofield.jsonl"), d.str("o")))
                  .find("nofield.jsonl:3: expected exactly one of \"text\", \"prompt\"+\"completion\" or \"messages\" "
                        "(found none)"),
              std::string::npos);
    write_text(d.path / "num.jsonl", "{\"text\": 5}\n");
    EXPECT_NE(error_of(opts(d.str("num.jsonl"), d.str("o"))).find("num.jsonl:1: \"text\" is number"),
              std::string::npos);
    write_text(d.path / "arr.jsonl", "[\"text\"]\n");
    EXPECT_NE(error_of(opts(d.str("arr.jsonl"), d.str("o"))).find("arr.jsonl:1: expected a JSON object"),
              std::string::npos);
    EXPECT_FALSE(fs::exists(d.path / "o" / "data.json"));
}

TEST(DataPrepare, InputErrors) {
    TempDir d;
    EXPECT_NE(error_of(opts(d.str("nope"), d.str("o"))).find("--input " + d.str("nope") + ": no such file"),
              std::string::npos);
    write_text(d.path / "bin.dat", std::string("a\0b", 3));
    EXPECT_NE(error_of(opts(d.str("bin.dat"), d.str("o"))).find("bin.dat: not a UTF-8 text file"), std::string::npos);
    fs::create_directories(d.path / "emptydir");
    EXPECT_NE(error_of(opts(d.str("emptydir"), d.str("o"))).find("no text files"), std::string::npos);
    write_text(d.path / "empty.txt", "");
    EXPECT_NE(error_of(opts(d.str("empty.txt"), d.str("o"))).find("no documents"), std::string::npos);
    write_text(d.path / "ok.txt", "hello\n");
    PrepareOptions o = opts(d.str("ok.txt"), d.str("o"));
    o.val_percent = 60;
    EXPECT_NE(error_of(o).find("--val-percent 60"), std::string::npos);
}

TEST(DataPrepare, OutputInsideInputIsNotRead) {
    Corpus c;
    const std::string out = (fs::path(c.root()) / "prepared").string();
    const auto r1 = prepare_data(opts(c.root(), out));
    const auto r2 = prepare_data(opts(c.root(), out)); // data.json from run 1 must not become a document
    EXPECT_EQ(r1.manifest.sources, r2.manifest.sources);
    EXPECT_EQ(r1.manifest.train.tokens, r2.manifest.train.tokens);
}

TEST(DataSplit, Assignment) {
    EXPECT_EQ(assign_val_split({"only"}, 5), std::vector<bool>{false});
    // Two documents at 5%: each split still gets one.
    const auto two = assign_val_split({"a", "b"}, 5);
    EXPECT_NE(two[0], two[1]);
    EXPECT_EQ(assign_val_split({"a", "b", "c"}, 0), std::vector<bool>(3, false));
    std::vector<std::string> keys;
    for (int i = 0; i < 10000; ++i) keys.push_back("doc" + std::to_string(i));
    const auto v = assign_val_split(keys, 5);
    const auto n_val = std::count(v.begin(), v.end(), true);
    EXPECT_GT(n_val, 400);
    EXPECT_LT(n_val, 600);
    // A document's side depends on its key only.
    std::vector<std::string> fewer(keys.begin(), keys.begin() + 5000);
    const auto w = assign_val_split(fewer, 5);
    for (size_t i = 0; i < fewer.size(); ++i) EXPECT_EQ(w[i], v[i]);
    EXPECT_THROW(assign_val_split(keys, 51), Error);
}

TEST(DataSources, Utf8) {
    EXPECT_TRUE(is_utf8_text("plain ascii\n"));
    EXPECT_TRUE(is_utf8_text("Grüße 世界 🙂"));
    EXPECT_FALSE(is_utf8_text(std::string("a\0b", 3)));
    EXPECT_FALSE(is_utf8_text("caf\xe9"));         // Latin-1
    EXPECT_FALSE(is_utf8_text("\xc0\xaf"));         // overlong
    EXPECT_FALSE(is_utf8_text("\xed\xa0\x80"));     // surrogate
    EXPECT_FALSE(is_utf8_text("\xe4\xb8"));         // truncated
}
