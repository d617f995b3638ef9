// zaya tokenize TOKENIZER [--text T | --file F | stdin] [--ids] [--bos]; zaya tokenize TOKENIZER --decode 5,17,3 —
// what a tokenizer makes of a text, token by token: to check a tokenizer.json or tokenizer.model against Hugging
// Face's `tokenizers` or sentencepiece, or to see what a prompt costs. TOKENIZER is a tokenizer file or a directory
// holding one (a model's, a data directory's).
#include "cli/commands.h"
#include "cli/model_arg.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "data/tokenizer.h"

#include <fmt/format.h>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace zaya::cli {

namespace {

struct TokenizeArgs {
    std::string tokenizer, text, file, decode;
    bool has_text = false, ids_only = false, bos = false;
};

void run_tokenize(const TokenizeArgs &a) {
    const Tokenizer tok = Tokenizer::load(a.tokenizer);
    if (!a.decode.empty()) {
        const auto lists = parse_token_lists(a.decode);
        if (lists.size() != 1) fail("--decode takes one list of ids, comma-separated (no ';')");
        for (const int32_t id : lists[0])
            if (id >= tok.vocab_size()) fail("--decode: id {} is past the vocabulary ({} tokens)", id, tok.vocab_size());
        fmt::print("{}\n", tok.decode(lists[0]));
        return;
    }
    const std::string text = !a.file.empty() ? read_file_bytes(a.file)
                             : a.has_text    ? a.text
                                             : std::string(std::istreambuf_iterator<char>(std::cin), {});
    std::vector<int32_t> ids = tok.encode(text);
    if (a.bos) {
        if (tok.bos_id() < 0) fail("--bos: {} has no BOS token", tok.path());
        ids.insert(ids.begin(), tok.bos_id());
    }
    if (a.ids_only) {
        fmt::print("{}\n", fmt::join(ids, ","));
    } else {
        // A piece as a JSON string: spaces, control characters and the pieces' own quotes stay visible.
        for (const int32_t id : ids)
            fmt::print("{}\t{}\n", id,
                       nlohmann::json(tok.piece(id)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    fmt::print(stderr, "{} tokens for {} bytes ({})\n", ids.size(), text.size(), tok.path());
}

} // namespace

void register_tokenize(CLI::App &app) {
    auto *cmd = app.add_subcommand("tokenize", "Show the tokens a tokenizer (tokenizer.model or tokenizer.json) makes "
                                               "of a text, or the text of token ids (--decode)");
    auto a = std::make_shared<TokenizeArgs>();
    cmd->add_option("tokenizer", a->tokenizer,
                    "A tokenizer file, or a directory holding tokenizer.model or tokenizer.json (a model's or a data "
                    "directory's)")
        ->required();
    auto *text = cmd->add_option("--text", a->text, "The text (default: standard input)");
    cmd->add_option("--file", a->file, "Read the text from this file, byte for byte")->check(CLI::ExistingFile);
    cmd->add_flag("--ids", a->ids_only, "Print the ids alone, comma-separated (as --tokens and --decode take them)");
    cmd->add_flag("--bos", a->bos, "Prepend BOS, as a prompt is fed (otherwise no special token is added)");
    cmd->add_option("--decode", a->decode, "Print the text of these ids (comma-separated) instead");
    cmd->callback([a, text] {
        a->has_text = text->count() > 0;
        if (int(a->has_text) + int(!a->file.empty()) + int(!a->decode.empty()) > 1)
            fail("tokenize: give one of --text, --file and --decode");
        run_tokenize(*a);
    });
}

} // namespace zaya::cli
