// Whole-document packing (data/packing.h, `--pack documents`): best-fit decreasing, documents found across shard
// boundaries, every document once per epoch in one row and never cut unless longer than a row, padding not learned,
// resume, and validation rows.
#include "core/error.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/manifest.h"
#include "data/packing.h"
#include "data/shards.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

using namespace zaya;
using zaya::test::TempDir;

namespace {

constexpr int32_t kEos = 3, kPad = 0;

// Documents of the given lengths (EOS included), each made of its own token id (100 + index) then EOS, written as
// one stream cut into shards of `shard_tokens`; the validation split gets `val_docs` more.
struct Docs {
    TempDir dir;
    std::vector<uint64_t> lengths;
    std::shared_ptr<const DataSet> data;
    Docs(std::vector<uint64_t> train, uint64_t shard_tokens, std::vector<uint64_t> val = {}) : lengths(train) {
        DataManifest m;
        m.vocab_size = 4096;
        m.dtype = "u16";
        m.eos_id = kEos;
        m.pad_id = kPad;
        auto write = [&](const std::string &split, const std::vector<uint64_t> &lens, SplitInfo &info) {
            std::vector<int32_t> stream;
            for (size_t i = 0; i < lens.size(); ++i) {
                stream.insert(stream.end(), lens[i] - 1, int32_t(100 + i));
                stream.push_back(kEos);
            }
            for (size_t at = 0, k = 0; at < stream.size(); at += shard_tokens, ++k) {
                const size_t end = std::min<size_t>(stream.size(), at + shard_tokens);
                const std::vector<int32_t> part(stream.begin() + long(at), stream.begin() + long(end));
                const std::string name = split + "_" + std::to_string(k) + ".bin";
                shard_write(dir.str(name), part, m.vocab_size);
                info.shards.push_back(name);
                info.tokens += part.size();
            }
            info.docs = lens.size();
        };
        write("train", train, m.train);
        if (!val.empty()) write("val", val, m.val);
        manifest_save(m, dir.str());
        data = DataSet::open(dir.str());
    }
};

// Document index → (row, count of its tokens) over the rows of one row of packed tokens; checks each row's layout:
// whole documents back to back, then padding with flag 0.
void scan_row(const int32_t *t, const int32_t *learned, int64_t n, std::map<int32_t, int> &seen) {
    int64_t i = 0;
    while (i < n && t[i] != kPad) {
        const int32_t id = t[i];
        ASSERT_GE(id, 100);
        int64_t j = i;
        while (j < n && t[j] == id) ++j;
        seen[id - 100] += 1;
        if (j < n) { // a whole document: its EOS follows
            ASSERT_EQ(t[j], kEos);
            i = j + 1;
        } else {
            i = j; // cut at the row's end: only a document longer than a row
        }
    }
    for (; i < n; ++i) {
        ASSERT_EQ(t[i], kPad);
        ASSERT_EQ(learned[i], 0);
    }
}

} // namespace

TEST(Packing, BestFitDecreasing) {
    // longest first: 6 → row 0 (2 free), 5 → row 1 (3), 4 → row 2 (4), 3 → row 1 (0), 2 → row 0 (0),
    // 1 → row 2 (3)
    const std::vector<uint64_t> lengths = {5, 3, 4, 2, 6, 1};
    const std::vector<uint32_t> order = {0, 1, 2, 3, 4, 5};
    const auto rows = pack_best_fit(lengths, order, 8);
    EXPECT_EQ(rows, (std::vector<std::vector<uint32_t>>{{4, 3}, {0, 1}, {2, 5}}));
    // a document longer than a row counts as a full row: three full rows, ties in the given order
    EXPECT_EQ(pack_best_fit({20, 8, 8}, {2, 1, 0}, 8), (std::vector<std::vector<uint32_t>>{{2}, {1}, {0}}));
}

TEST(Packing, DocumentsAcrossShardsAndRows) {
    Docs d({5, 9, 3, 12, 4, 7, 2, 30}, 10); // shards of 10 tokens: most documents straddle a boundary
    const std::vector<DocSpan> docs = split_documents(d.data->train(), kEos);
    ASSERT_EQ(docs.size(), d.lengths.size());
    for (size_t i = 0; i < docs.size(); ++i) EXPECT_EQ(docs[i].length, d.lengths[i]);

    const int64_t seq = 15; // rows of 16: the 30-token document is cut
    TrainLoader l(d.data, seq, 7, 0, 1, Packing::Documents);
    ASSERT_NE(l.packed(), nullptr);
    EXPECT_EQ(l.packed()->truncated(), 1u);
    std::map<int32_t, int> seen;
    const uint64_t rows = l.chunks_per_epoch();
    for (uint64_t r = 0; r < rows; ++r) {
        const TokenBatch b = l.next_batch(1);
        ASSERT_EQ(b.learned.size(), b.tokens.size());
        scan_row(b.tokens.data(), b.learned.data(), seq + 1, seen);
        // padding is left out of the model's inputs; every other target is learned (no loss masks here)
        ASSERT_EQ(b.lengths.size(), 1u);
        const int64_t filled = std::find(b.tokens.begin(), b.tokens.end(), kPad) - b.tokens.begin();
        EXPECT_EQ(b.lengths[0], filled);
        EXPECT_EQ(b.inputs().num_tokens(), filled - 1);
        const std::vector<int32_t> t = b.targets();
        ASSERT_EQ(int64_t(t.size()), filled - 1);
        for (int64_t p = 0; p + 1 < filled; ++p) EXPECT_EQ(t[size_t(p)], b.tokens[size_t(p + 1)]);
    }
    for (size_t i = 0; i < d.lengths.size(); ++i) EXPECT_EQ(seen[int32_t(i)], 1) << "document " << i;
    // 16 (the cut one) | 12 + 4 | 9 + 7 | 5 + 3 + 2 and padding: best-fit decreasing fills 4 rows of 16
    EXPECT_EQ(rows, 4u);
    EXPECT_EQ(l.state().epoch, 0u);
    l.next_batch(1);
    EXPECT_EQ(l.state().epoch, 1u);
}

TEST(Packing, ResumeGivesIdenticalRowsAndRefusesTheOtherPacking) {
    Docs d({5, 9, 3, 12, 4, 7, 2, 6, 11, 8, 3, 5}, 16);
    TrainLoader a(d.data, 15, 3, 0, 1, Packing::Documents);
    for (int i = 0; i < 5; ++i) a.next_batch(2); // into the second epoch
    const LoaderState s = a.state();
    EXPECT_EQ(s.packing, Packing::Documents);
    EXPECT_EQ(s.chunks, 12u); // the guard counts documents
    EXPECT_EQ(loader_state_from_json(nlohmann::json::parse(loader_state_to_json(s).dump()), "t"), s); // as saved
    TrainLoader b(d.data, 15, 99, 0, 1, Packing::Documents);
    b.restore(s);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(a.next_batch(2).tokens, b.next_batch(2).tokens);
    TrainLoader c(d.data, 15, 3);
    EXPECT_NE(test::error_of([&] { c.restore(s); })
                  .find("loader state is for --pack documents, this run uses --pack chunks"),
              std::string::npos);
}

TEST(Packing, ValidationPacksEveryDocumentOnce) {
    Docs d({5, 5}, 64, {4, 6, 3, 9, 2});
    ValBatches v(d.data, 2, 9, 0, 1, Packing::Documents); // rows of 10: BFD gives {9}, {6, 4}, {3, 2}
    EXPECT_EQ(v.num_chunks(), 3u);
    TokenBatch b;
    std::map<int32_t, int> seen;
    int batches = 0;
    while (v.next(b)) {
        ++batches;
        for (int64_t i = 0; i < b.sequences; ++i)
            scan_row(b.row(i), b.learned.data() + i * 10, 10, seen);
    }
    EXPECT_EQ(batches, 2);
    EXPECT_EQ(seen.size(), 5u);
}
