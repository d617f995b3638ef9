// Tokenizer (src/data/tokenizer.h): BPE training on a small generated corpus, special ids, round trips,
// determinism, and that the line-by-line encoding shortcut gives exactly sentencepiece's ids.
#include "core/error.h"
#include "core/rng.h"
#include "data/tokenizer.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <fstream>

using namespace zaya;
using zaya::test::TempDir;

namespace {

// Prose-and-code-like text over a small alphabet, so a ~380-piece vocabulary has room for merges.
std::string generated_corpus(uint64_t seed, int lines) {
    const char *words[] = {"the", "data", "token", "model", "python", "import", "return", "value", "list",
                           "def", "class", "self", "for", "in", "if", "else", "print", "string", "file", "open"};
    Rng rng(seed, 0);
    std::string s;
    for (int l = 0; l < lines; ++l) {
        s.append(size_t(4 * (rng.next() % 3)), ' ');
        const int n = 3 + int(rng.next() % 8);
        for (int w = 0; w < n; ++w) {
            if (w) s += ' ';
            s += words[rng.next() % 20];
            if (rng.next() % 7 == 0) s += std::to_string(rng.next() % 1000);
            if (rng.next() % 9 == 0) s += "(x):";
        }
        s += rng.next() % 2 ? ".\n" : "\n";
    }
    return s;
}

void write_text(const std::string &path, const std::string &text) {
    std::ofstream(path, std::ios::binary) << text;
}

std::string bytes_of(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

TEST(DataTokenizer, TrainEncodeDecode) {
    TempDir d;
    write_text(d.str("a.txt"), generated_corpus(1, 1500));
    write_text(d.str("b.txt"), generated_corpus(2, 1500));
    train_tokenizer({d.str("a.txt"), d.str("b.txt")}, 384, d.str("tok.model"));
    const Tokenizer tok = Tokenizer::load(d.str("tok.model"));
    EXPECT_EQ(tok.vocab_size(), 384);
    EXPECT_EQ(tok.pad_id(), 0);
    EXPECT_EQ(tok.unk_id(), 1);
    EXPECT_EQ(tok.bos_id(), 2);
    EXPECT_EQ(tok.eos_id(), 3);
    EXPECT_EQ(tok.piece(3), "</s>");
    EXPECT_EQ(tok.piece(4), "<0x00>"); // byte-fallback pieces follow the specials

    // Seen text compresses; unseen characters fall back to bytes; whitespace and newlines survive exactly.
    const std::string seen = "    def open(x): return the value.\n";
    EXPECT_LT(tok.encode(seen).size(), seen.size() / 2);
    for (const std::string &text : {seen, std::string("Grüße, 世界 → ∑ é\ttab\r\n\n  two  spaces\n"),
                                   std::string("\n\n\n"), std::string(""), std::string("no newline at end")}) {
        const auto ids = tok.encode(text);
        for (int32_t id : ids) {
            EXPECT_GE(id, 0);
            EXPECT_LT(id, 384);
            EXPECT_NE(id, tok.unk_id()) << text;
        }
        EXPECT_EQ(tok.decode(ids), text);
    }
    EXPECT_THROW(tok.decode({384}), Error);
    EXPECT_THROW(tok.decode({-1}), Error);
}

TEST(DataTokenizer, LineByLineEncodingMatchesSentencepiece) {
    TempDir d;
    write_text(d.str("a.txt"), generated_corpus(3, 2000));
    train_tokenizer({d.str("a.txt")}, 384, d.str("tok.model"));
    const Tokenizer tok = Tokenizer::load(d.str("tok.model"));
    sentencepiece::SentencePieceProcessor sp;
    ASSERT_TRUE(sp.Load(d.str("tok.model")).ok());
    const std::string text = generated_corpus(4, 200) + "\n\n  x\r\n\n ü\n";
    std::vector<int> ref;
    ASSERT_TRUE(sp.Encode(text, &ref).ok());
    const auto ids = tok.encode(text);
    EXPECT_EQ(std::vector<int>(ids.begin(), ids.end()), ref);
}

TEST(DataTokenizer, TrainingIsDeterministic) {
    TempDir d;
    write_text(d.str("a.txt"), generated_corpus(5, 2000));
    train_tokenizer({d.str("a.txt")}, 384, d.str("one.model"));
    train_tokenizer({d.str("a.txt")}, 384, d.str("two.model"));
    EXPECT_EQ(bytes_of(d.str("one.model")), bytes_of(d.str("two.model")));
}

TEST(DataTokenizer, Errors) {
    TempDir d;
    write_text(d.str("a.txt"), generated_corpus(6, 100));
    EXPECT_THROW(train_tokenizer({d.str("a.txt")}, 200, d.str("t.model")), Error); // below 260 + specials
    EXPECT_THROW(train_tokenizer({d.str("missing.txt")}, 384, d.str("t.model")), Error);
    try {
        Tokenizer::load(d.str("a.txt"));
        ADD_FAILURE() << "no error";
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find("a.txt"), std::string::npos) << e.what();
    }
}
