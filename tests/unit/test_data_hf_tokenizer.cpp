// tokenizer.json (src/data/hf_tokenizer.h) against Hugging Face `tokenizers` itself: the ids it encoded and the text
// it decoded for tests/golden/tokenizer (tools/gen_tokenizer_goldens.py: a Gemma3-style and a Llama-style tokenizer
// as transformers 5 saves them, the Gemma one with added tokens of every matching rule, and byte-level ones dressed
// as GPT-2's, Llama 3's, Qwen2's and a mix of the other options).
#include "core/error.h"
#include "data/tokenizer.h"
#include "test_helpers.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

using namespace zaya;
using zaya::test::TempDir;
using nlohmann::json;

namespace {

json read_json(const std::string &path) {
    std::ifstream in(path);
    return json::parse(in);
}

const json &cases() {
    static const json j = read_json(zaya::test::golden_dir("tokenizer") + "/cases.json");
    return j["cases"];
}

std::string case_file(const std::string &c, const char *name) {
    return zaya::test::golden_dir("tokenizer") + "/" + c + "/" + name;
}

// The error message of load(path), "" if it loads.
std::string load_error(const std::string &path) {
    try {
        Tokenizer::load(path);
    } catch (const Error &e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(HfTokenizer, EncodesAndDecodesAsTokenizers) {
    for (const auto &[name, c] : cases().items()) {
        SCOPED_TRACE(name);
        const Tokenizer tok = Tokenizer::load(case_file(name, "tokenizer.json"));
        EXPECT_STREQ(tok.file_name(), "tokenizer.json");
        EXPECT_EQ(tok.vocab_size(), c["vocab_size"].get<int32_t>());
        // The special ids tokenizer_config.json names (the file itself names none: found by name).
        EXPECT_EQ(tok.bos_id(), c["special"]["bos"].get<int32_t>());
        EXPECT_EQ(tok.eos_id(), c["special"]["eos"].get<int32_t>());
        EXPECT_EQ(tok.pad_id(), c["special"]["pad"].get<int32_t>());
        EXPECT_EQ(tok.unk_id(), c["special"]["unk"].get<int32_t>());
        for (const json &t : c["texts"]) {
            const std::string text = t["text"].get<std::string>();
            SCOPED_TRACE(text);
            const auto ids = t["ids"].get<std::vector<int32_t>>();
            EXPECT_EQ(tok.encode(text), ids);
            EXPECT_EQ(tok.decode(ids), t["decoded"].get<std::string>());
        }
        for (const json &d : c["decodes"]) // byte pieces that are not whole characters
            EXPECT_EQ(tok.decode(d["ids"].get<std::vector<int32_t>>()), d["decoded"].get<std::string>());
    }
}

TEST(HfTokenizer, GoldensComeFromTheSentencepieceModels) {
    // The same model through sentencepiece: its ids are the golden ones, and for the Gemma-style tokenizer
    // tokenizers' equal them except where text spells a control token (sentencepiece never matches those).
    for (const char *name : {"gemma", "llama"}) {
        SCOPED_TRACE(name);
        const Tokenizer sp = Tokenizer::load(case_file(name, "tokenizer.model"));
        EXPECT_STREQ(sp.file_name(), "tokenizer.model");
        int same = 0;
        for (const json &t : cases()[name]["texts"]) {
            const auto ids = t["sentencepiece_ids"].get<std::vector<int32_t>>();
            EXPECT_EQ(sp.encode(t["text"].get<std::string>()), ids);
            same += ids == t["ids"].get<std::vector<int32_t>>();
        }
        if (std::string(name) == "gemma") {
            EXPECT_EQ(same, int(cases()[name]["texts"].size()) - 1);
        }
    }
}

TEST(HfTokenizer, TokenBytesSpellTheDecodedText) {
    // Every case but the Llama-style one, whose decoder strips the text's first space, and the mixed byte-level one,
    // whose decoder replaces each run of digits of the whole text (a number of several tokens with one '#').
    for (const char *name : {"gemma", "gemma_added", "gpt2", "llama3", "qwen2"}) {
        SCOPED_TRACE(name);
        const Tokenizer tok = Tokenizer::load(case_file(name, "tokenizer.json"));
        for (const json &t : cases()[name]["texts"]) {
            std::string spelled;
            for (const int32_t id : t["ids"].get<std::vector<int32_t>>()) spelled += tok.token_bytes(id);
            EXPECT_EQ(spelled, t["decoded"].get<std::string>());
        }
    }
    const Tokenizer tok = Tokenizer::load(case_file("gemma", "tokenizer.json"));
    EXPECT_TRUE(tok.is_control(tok.bos_id()));
    EXPECT_EQ(tok.token_bytes(tok.eos_id()), "");
    EXPECT_FALSE(tok.is_control(tok.piece_id("<start_of_turn>")));
    EXPECT_EQ(tok.piece(tok.piece_id("<end_of_turn>")), "<end_of_turn>");
    EXPECT_EQ(tok.piece_id("no such piece"), -1);
    EXPECT_THROW(tok.decode({tok.vocab_size()}), Error);
}

TEST(HfTokenizer, FindsAModelDirectorysTokenizer) {
    TempDir d;
    EXPECT_FALSE(Tokenizer::find_in(d.str("")).has_value());
    EXPECT_NE(load_error(d.str("")).find("a directory with no tokenizer.model or tokenizer.json"), std::string::npos);
    std::filesystem::copy_file(case_file("gemma", "tokenizer.json"), d.str("tokenizer.json"));
    EXPECT_EQ(Tokenizer::find_in(d.str("")), d.str("tokenizer.json"));
    EXPECT_EQ(Tokenizer::load(d.str("")).path(), d.str("tokenizer.json")); // load takes the directory too
    std::filesystem::copy_file(case_file("gemma", "tokenizer.model"), d.str("tokenizer.model"));
    EXPECT_EQ(Tokenizer::find_in(d.str("")), d.str("tokenizer.model")); // sentencepiece's own file first
    EXPECT_STREQ(Tokenizer::load(d.str("")).file_name(), "tokenizer.model");
    // A post-trained model's tokenizer.json that repurposes a token the sentencepiece model spells otherwise (as
    // ZAYA1-8B's <zyphra_tool_call> takes a Gemma3 <unusedN>): that file is the model's tokenizer.
    std::ifstream in(case_file("gemma", "tokenizer.json"));
    nlohmann::json j = nlohmann::json::parse(in);
    const Tokenizer sp = Tokenizer::load(d.str("tokenizer.model"));
    bool renamed = false;
    for (nlohmann::json &t : j["added_tokens"])
        if (t["content"] == "<start_of_turn>") {
            t["content"] = "<zyphra_tool_call>";
            renamed = true;
            EXPECT_EQ(sp.piece(t["id"].get<int32_t>()), "<start_of_turn>");
        }
    ASSERT_TRUE(renamed);
    std::ofstream(d.str("tokenizer.json"), std::ios::trunc) << j.dump(2);
    EXPECT_EQ(Tokenizer::find_in(d.str("")), d.str("tokenizer.json"));
    const Tokenizer repurposed = Tokenizer::load(d.str(""));
    EXPECT_STREQ(repurposed.file_name(), "tokenizer.json");
    EXPECT_EQ(repurposed.piece_id("<zyphra_tool_call>"), sp.piece_id("<start_of_turn>"));
}

TEST(HfTokenizer, RefusesWhatItCannotReadExactly) {
    TempDir d;
    const json good = read_json(case_file("gemma", "tokenizer.json"));
    auto error_with = [&](const std::function<void(json &)> &edit) {
        json j = good;
        edit(j);
        std::ofstream(d.str("tokenizer.json")) << j.dump();
        return load_error(d.str("tokenizer.json"));
    };
    auto expect_has = [](const std::string &msg, const std::string &part) {
        EXPECT_NE(msg.find(part), std::string::npos) << msg;
    };
    EXPECT_EQ(error_with([](json &) {}), "");
    expect_has(error_with([](json &j) { j["model"]["type"] = "WordPiece"; }), "model.type 'WordPiece'");
    expect_has(error_with([](json &j) { j["pre_tokenizer"] = {{"type", "Whitespace"}}; }),
               "pre_tokenizer.type 'Whitespace'");
    expect_has(error_with([](json &j) { j["normalizer"] = {{"type", "Lowercase"}}; }), "normalizer.type 'Lowercase'");
    expect_has(error_with([](json &j) {
                   j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(?<x"}}}, {"behavior", "Isolated"}};
               }),
               "pre_tokenizer.pattern.Regex: the regular expression '(?<x' does not compile");
    expect_has(error_with([](json &j) { j["normalizer"]["pattern"] = {{"Regex", "[a-"}}; }),
               "normalizer.pattern.Regex: the regular expression '[a-' does not compile");
    expect_has(error_with([](json &j) {
                   j["decoder"]["decoders"][1] = {{"type", "WordPiece"}};
               }),
               "decoder.decoders[1].type 'WordPiece'");
    expect_has(error_with([](json &j) { j["model"]["merges"][0] = {"▁", "no such piece"}; }),
               "model.merges[0] ('▁', 'no such piece'): 'no such piece' is not in model.vocab");
    expect_has(error_with([](json &j) { j["model"]["dropout"] = 0.1; }), "model.dropout 0.1");
    expect_has(error_with([](json &j) { j["model"]["vocab"]["▁"] = -4; }), "model.vocab[\"▁\"] must be a token id");
    expect_has(error_with([](json &j) { j["added_tokens"][0].erase("content"); }),
               "added_tokens[0] has no \"content\"");
    expect_has(error_with([](json &j) { j.erase("model"); }), "no \"model\" object");
    std::ofstream(d.str("broken.json")) << "{\"model\": ";
    expect_has(load_error(d.str("broken.json")), "broken.json: not valid JSON");
}
