// `zaya prepare`: text files, directories and JSONL → a tokenizer plus train/val token shards in a data directory.
//
// Steps: list the inputs (data/sources.h) and read every document once to validate it (so a bad JSONL line
// fails before minutes of tokenizer training); pick the validation documents (data/split.h); train a BPE
// tokenizer on the train documents or copy the given one to DATA_DIR/tokenizer.model (or .json); tokenize every
// document, append EOS, and stream the tokens into shards; write data.json last.
// The output depends only on the input files and options: running twice gives byte-identical files.
#pragma once
#include "data/manifest.h"

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

inline constexpr const char *kDefaultCorpus = "/usr/share/doc/python3.11/html/_sources";

struct PrepareOptions {
    std::vector<std::string> inputs;
    std::string out_dir;
    std::string tokenizer;   // an existing tokenizer.model or tokenizer.json; empty: train one
    int vocab_size = 4096;   // when training
    // How chats are written (data/hf_chat_template.h apply_chat_template_option): a Jinja file, "builtin", or empty
    // for the tokenizer's own. The format is kept in the data directory (chat_template.jinja) for the models trained
    // on it.
    std::string chat_template;
    double val_percent = 5;  // [0, 50]
    uint64_t shard_tokens = uint64_t(64) << 20;
    // Tokenizer training reads at most this many lines, spread evenly over the train documents.
    uint64_t tokenizer_max_sentences = 2'000'000;
    bool progress = true; // progress lines on stderr
};

struct PrepareResult {
    DataManifest manifest;
    double seconds = 0, tokenizer_seconds = 0, encode_seconds = 0;
};

PrepareResult prepare_data(const PrepareOptions &o);

} // namespace zaya
