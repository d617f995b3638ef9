// zaya prepare --input PATH... --out DATA_DIR — tokenizer + train/val token shards (src/data/prepare.h).
#include "cli/commands.h"
#include "cli/infer_args.h"
#include "core/error.h"
#include "data/prepare.h"

#include <filesystem>
#include <fmt/format.h>

namespace zaya::cli {

namespace {

void run_prepare(PrepareOptions o, bool vocab_given) {
    if (o.inputs.empty()) {
        if (!std::filesystem::is_directory(kDefaultCorpus))
            fail("no --input given and the default corpus {} is missing: run scripts/setup.sh (as root) to install "
                 "python3.11-doc, or pass --input",
                 kDefaultCorpus);
        o.inputs = {kDefaultCorpus};
    }
    if (vocab_given && !o.tokenizer.empty())
        fail("--vocab-size and --tokenizer exclude each other: a given tokenizer fixes the vocabulary");
    const PrepareResult r = prepare_data(o);
    const DataManifest &m = r.manifest;
    fmt::print("wrote {}\n", o.out_dir);
    fmt::print("tokenizer  {} ({}, vocab {}, eos {}, shards {})\n", m.tokenizer,
               m.tokenizer_trained ? fmt::format("trained BPE, {:.1f} s", r.tokenizer_seconds) : "given",
               m.vocab_size, m.eos_id, m.dtype);
    fmt::print("sources    {} files{}\n", m.sources.size(),
               m.skipped.empty() ? "" : fmt::format(" ({} binary files skipped)", m.skipped.size()));
    fmt::print("train      {} docs, {} tokens, {} shards\n", m.train.docs, m.train.tokens, m.train.shards.size());
    fmt::print("val        {} docs, {} tokens, {} shards\n", m.val.docs, m.val.tokens, m.val.shards.size());
    fmt::print("time       {:.1f} s (tokenizing {:.1f} s)\n", r.seconds, r.encode_seconds);
}

} // namespace

void register_prepare(CLI::App &app) {
    auto *cmd = app.add_subcommand("prepare", "Tokenize text files, directories and JSONL into train/val token shards");
    auto o = std::make_shared<PrepareOptions>();
    cmd->add_option("--input", o->inputs,
                    fmt::format("Text files, directories (recursive) or .jsonl files, a record per line: {{\"text\"}} "
                                "(pretraining), {{\"prompt\", \"completion\"}} or {{\"messages\": [{{\"role\", "
                                "\"content\"}}]}} (fine-tuning: only completions and assistant turns are learned); "
                                "default: {}",
                                kDefaultCorpus));
    cmd->add_option("--out", o->out_dir, "Output data directory")->required();
    auto *vocab = cmd->add_option("--vocab-size", o->vocab_size, "Vocabulary of the BPE tokenizer to train")
                      ->check(CLI::Range(262, 1 << 20))
                      ->capture_default_str();
    cmd->add_option("--tokenizer", o->tokenizer,
                    "Use this tokenizer.model (sentencepiece) or tokenizer.json (Hugging Face), or the one a directory "
                    "holds (a model's: tokenizer.model first, unless its tokenizer.json's added tokens differ), "
                    "instead of training one")
        ->check(CLI::ExistingPath);
    add_chat_template_option(cmd, o->chat_template, "How chat documents are written: ",
                             "; kept in the data directory for the models trained on it");
    cmd->add_option("--val-percent", o->val_percent, "Percent of documents held out for validation")
        ->check(CLI::Range(0.0, 50.0))
        ->capture_default_str();
    cmd->add_option("--shard-tokens", o->shard_tokens, "Tokens per shard file, at most")
        ->check(CLI::PositiveNumber)
        ->capture_default_str();
    cmd->callback([o, vocab] { run_prepare(*o, vocab->count() > 0); });
}

} // namespace zaya::cli
