#include "data/prepare.h"

#include "core/error.h"
#include "core/atomic_file.h"
#include "data/hf_chat_template.h"
#include "data/shard_set_writer.h"
#include "data/sources.h"
#include "data/split.h"
#include "data/tokenizer.h"
#include "infer/answer_formats.h"

#include <chrono>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>

#include <unistd.h>

namespace fs = std::filesystem;

namespace zaya {

namespace {

using Clock = std::chrono::steady_clock;
__extension__ typedef unsigned __int128 u128; // exact 64×64-bit products

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Progress lines on stderr, at most one every two seconds; on a terminal they overwrite each other.
class Progress {
  public:
    explicit Progress(bool on) : on_(on), tty_(on && ::isatty(2)) {}
    void note(const std::string &msg, bool force = false) {
        if (!on_ || (!force && since(last_) < 2.0)) return;
        last_ = Clock::now();
        std::fprintf(stderr, tty_ ? "\r\033[Kprepare: %s" : "prepare: %s\n", msg.c_str());
        pending_ = tty_;
    }
    void done(const std::string &msg) {
        if (!on_) return;
        std::fprintf(stderr, tty_ ? "\r\033[Kprepare: %s\n" : "prepare: %s\n", msg.c_str());
        pending_ = false;
        last_ = Clock::now();
    }
    ~Progress() {
        if (pending_) std::fputc('\n', stderr);
    }

  private:
    bool on_, tty_, pending_ = false;
    Clock::time_point last_ = Clock::now() - std::chrono::seconds(10);
};

struct DocRef {
    size_t file = 0;
    uint64_t line = 0;
    uint64_t text_lines = 0; // lines of text, for sampling tokenizer training lines
    bool val = false;
};

std::string doc_key(const SourceFile &f, uint64_t line) {
    return line == 0 ? f.key : f.key + ":" + std::to_string(line);
}

std::string mb(uint64_t bytes) { return fmt::format("{:.1f} MB", double(bytes) / 1e6); }

// Removes the outputs of an earlier run, so no stale shard outlives it; data.json first, so an interrupted run
// never leaves a manifest pointing at missing shards.
void clear_previous(const fs::path &out) {
    fs::remove(out / kManifestName);
    for (const auto &e : fs::directory_iterator(out)) {
        const std::string name = e.path().filename().string();
        const bool split = name.starts_with("train_") || name.starts_with("val_");
        if (split && (name.ends_with(".bin") || name.ends_with(".mask")))
            fs::remove(e.path());
    }
}

// The train documents' text, one training "sentence" per line, sampled evenly down to `max_lines`.
void write_tokenizer_text(const std::string &path, const std::vector<SourceFile> &files,
                          const std::vector<DocRef> &docs, uint64_t max_lines) {
    uint64_t total = 0;
    for (const auto &d : docs)
        if (!d.val) total += d.text_lines;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) fail("{}: cannot create", path);
    uint64_t line = 0; // index over all train lines
    size_t di = 0;
    for (size_t fi = 0; fi < files.size(); ++fi) {
        if (di < docs.size() && docs[di].file != fi) continue;
        for (const auto &doc : read_documents(files[fi])) {
            const bool val = docs[di++].val;
            if (val) continue;
            std::string_view t = doc.text;
            size_t p = 0;
            while (p <= t.size()) {
                size_t q = t.find('\n', p);
                if (q == std::string_view::npos) q = t.size();
                // keep line i iff ⌊(i+1)·max/total⌋ > ⌊i·max/total⌋: exactly max lines, evenly spread
                const bool keep = total <= max_lines ||
                                  u128(line + 1) * max_lines / total >
                                      u128(line) * max_lines / total;
                if (keep && q > p) out << t.substr(p, q - p) << '\n'; // blank lines teach nothing
                ++line;
                p = q + 1;
            }
        }
    }
    out.close();
    if (!out) fail("{}: write failed", path);
}

// A document's ids (followed by EOS) and, for masked data, per id whether it is learned as a target: all of a text;
// a completion and its EOS but not its prompt; a chat's assistant turns (data/chat_template.h). Prompts and chats
// open with BOS, as the server's prompts do; text documents do not.
std::vector<int32_t> encode_document(const Tokenizer &tok, const Document &d, std::vector<uint8_t> *learned) {
    std::vector<int32_t> ids;
    std::vector<uint8_t> flags;
    const int32_t bos = tok.bos_id();
    switch (d.kind) {
    case DocKind::Text:
        ids = tok.encode(d.text);
        flags.assign(ids.size(), 1);
        break;
    case DocKind::Completion: {
        if (bos >= 0) ids.push_back(bos);
        const std::vector<int32_t> p = tok.encode(d.prompt), c = tok.encode(d.completion);
        ids.insert(ids.end(), p.begin(), p.end());
        flags.assign(ids.size(), 0);
        ids.insert(ids.end(), c.begin(), c.end());
        flags.resize(ids.size(), 1);
        break;
    }
    case DocKind::Chat:
        ids = chat_tokens(tok, d.messages, bos, /*generation_prompt=*/false, &flags, d.variables);
        break;
    }
    ids.push_back(tok.eos_id());
    flags.push_back(d.kind == DocKind::Chat ? 0 : 1); // a chat ends at its <end_of_turn>, learned already
    if (learned) *learned = std::move(flags);
    return ids;
}

uint64_t count_lines(std::string_view t) {
    uint64_t n = 1;
    for (char c : t) n += c == '\n';
    return n;
}

} // namespace

PrepareResult prepare_data(const PrepareOptions &o) {
    const auto t0 = Clock::now();
    if (o.out_dir.empty()) fail("no output directory given (--out)");
    if (!(o.val_percent >= 0 && o.val_percent <= 50)) fail("--val-percent {} out of range [0, 50]", o.val_percent);
    if (o.shard_tokens == 0) fail("--shard-tokens must be at least 1");
    if (o.tokenizer.empty() && (o.vocab_size < 262 || o.vocab_size > (1 << 20)))
        fail("--vocab-size {} out of range [262, {}] (byte fallback alone takes 260 ids)", o.vocab_size, 1 << 20);
    // A given tokenizer is read first: a bad one fails before the inputs are.
    const std::optional<Tokenizer> given =
        o.tokenizer.empty() ? std::nullopt : std::optional<Tokenizer>(Tokenizer::load(o.tokenizer));
    Progress progress(o.progress);
    const fs::path out(o.out_dir);
    std::error_code ec;
    fs::create_directories(out, ec);
    if (ec || !fs::is_directory(out)) fail("--out {}: cannot create directory: {}", o.out_dir, ec.message());

    // 1. Inputs, and every document read once: errors come now, not after tokenizer training.
    SourceList src = collect_sources(o.inputs, o.out_dir);
    if (src.files.empty()) fail("no text files found in the inputs ({} binary files skipped)", src.skipped.size());
    uint64_t total_bytes = 0;
    for (const auto &f : src.files) total_bytes += f.bytes;
    progress.done(fmt::format("{} file{} ({}){}", src.files.size(), src.files.size() == 1 ? "" : "s", mb(total_bytes),
                              src.skipped.empty() ? "" : fmt::format(", {} binary files skipped", src.skipped.size())));
    std::vector<DocRef> docs;
    std::vector<std::string> keys;
    uint64_t kinds[3] = {0, 0, 0}; // text, prompt/completion, chat documents
    for (size_t fi = 0; fi < src.files.size(); ++fi) {
        for (const auto &d : read_documents(src.files[fi])) {
            ++kinds[int(d.kind)];
            docs.push_back({fi, d.line, count_lines(d.text), false});
            keys.push_back(doc_key(src.files[fi], d.line));
        }
        progress.note(fmt::format("read {}/{} files, {} documents", fi + 1, src.files.size(), docs.size()));
    }
    if (docs.empty()) fail("the inputs hold no documents (every file or JSONL text is empty)");
    const bool masked = kinds[1] + kinds[2] > 0; // any prompt/completion or chat record: every document gets a mask
    if (masked)
        progress.done(fmt::format("{} documents: {} text, {} prompt/completion, {} chat (only answers are learned)",
                                  docs.size(), kinds[0], kinds[1], kinds[2]));
    const std::vector<bool> val = assign_val_split(keys, o.val_percent);
    for (size_t i = 0; i < docs.size(); ++i) docs[i].val = val[i];
    clear_previous(out);

    // 2. Tokenizer.
    PrepareResult r;
    DataManifest &m = r.manifest;
    // A given tokenizer keeps its kind's name (tokenizer.model or tokenizer.json); a trained one is sentencepiece's.
    const std::string tok_name = given ? given->file_name() : "tokenizer.model";
    const std::string tok_path = (out / tok_name).string();
    const auto t_tok = Clock::now();
    if (given) {
        if (!fs::exists(tok_path) || !fs::equivalent(given->path(), tok_path))
            write_file_atomic(tok_path, read_file_bytes(given->path()));
    } else {
        const std::string text_path = (out / "tokenizer_train.txt.tmp").string();
        write_tokenizer_text(text_path, src.files, docs, o.tokenizer_max_sentences);
        progress.done(fmt::format("training a {}-token BPE tokenizer on the train documents ...", o.vocab_size));
        try {
            TokenizerTrainOptions topt;
            topt.max_sentences = o.tokenizer_max_sentences;
            train_tokenizer({text_path}, o.vocab_size, tok_path, topt);
        } catch (...) {
            fs::remove(text_path, ec);
            throw;
        }
        fs::remove(text_path, ec);
        progress.done(fmt::format("tokenizer trained in {:.1f} s", since(t_tok)));
    }
    r.tokenizer_seconds = since(t_tok);
    const char *const chat_files[] = {"chat_template.jinja", "tokenizer_config.json"};
    if (!given) // a trained tokenizer has no chat template; a previous preparation's is not its
        for (const char *name : chat_files) fs::remove(out / name, ec);
    Tokenizer tok = given ? *given : Tokenizer::load(tok_path); // the copy is the given file, byte for byte
    if (tok.eos_id() < 0) fail("{}: the tokenizer has no EOS token, needed between documents", tok.path());
    apply_chat_template_option(tok, o.chat_template);
    // The chat format goes with the data, so the models trained on it are prompted in it. A template that does not
    // load fails only a preparation with chats.
    const HfChatTemplate *chat_format = nullptr;
    try {
        chat_format = tok.chat_template();
    } catch (const Error &) {
        if (kinds[2] > 0) throw;
    }
    if (chat_format) chat_format->save(o.out_dir);
    else if (given && !fs::equivalent(fs::absolute(given->path()).parent_path(), out, ec))
        for (const char *name : chat_files) fs::remove(out / name, ec);
    m.tokenizer = tok_name;
    // One tokenizer per data directory: a previous preparation's of the other kind would only mislead (the given
    // file itself, wherever it lies, is never removed).
    for (const char *name : {"tokenizer.model", "tokenizer.json"}) {
        const fs::path other = out / name;
        if (tok_name == name || !fs::exists(other) || (given && fs::equivalent(given->path(), other))) continue;
        fs::remove(other, ec);
    }
    m.tokenizer_trained = o.tokenizer.empty();
    m.vocab_size = uint64_t(tok.vocab_size());
    m.dtype = token_dtype_name(token_dtype_for_vocab(m.vocab_size));
    m.bos_id = tok.bos_id();
    m.eos_id = tok.eos_id();
    m.pad_id = tok.pad_id();
    m.unk_id = tok.unk_id();
    m.val_percent = o.val_percent;
    m.shard_tokens = o.shard_tokens;
    m.loss_mask = masked;

    // 3. Tokenize, in batches encoded in parallel and appended in document order (so output is deterministic).
    const auto t_enc = Clock::now();
    ShardSetWriter train(o.out_dir, "train", m.vocab_size, o.shard_tokens, masked);
    ShardSetWriter valw(o.out_dir, "val", m.vocab_size, o.shard_tokens, masked);
    std::vector<Document> batch;
    std::vector<bool> batch_val;
    uint64_t batch_bytes = 0, done_docs = 0, done_tokens = 0, learned_tokens = 0;
    size_t di = 0;
    auto flush = [&] {
        const auto n = int64_t(batch.size());
        std::vector<std::vector<int32_t>> ids(batch.size());
        std::vector<std::vector<uint8_t>> learned(batch.size());
        std::exception_ptr err;
#pragma omp parallel for schedule(dynamic, 1)
        for (int64_t i = 0; i < n; ++i) {
            try {
                ids[size_t(i)] = encode_document(tok, batch[size_t(i)], &learned[size_t(i)]);
            } catch (...) {
#pragma omp critical
                err = std::current_exception();
            }
        }
        if (err) std::rethrow_exception(err);
        for (size_t i = 0; i < batch.size(); ++i) {
            (batch_val[i] ? valw : train).append_document(ids[i], masked ? &learned[i] : nullptr);
            done_tokens += ids[i].size();
            for (uint8_t f : learned[i]) learned_tokens += f;
        }
        done_docs += batch.size();
        batch.clear();
        batch_val.clear();
        batch_bytes = 0;
        progress.note(fmt::format("tokenized {}/{} documents, {} tokens ({:.0f} s)", done_docs, docs.size(),
                                  done_tokens, since(t_enc)));
    };
    const ToolFormat tool_format = template_tool_format(tok); // chats with tools as the server writes them
    for (size_t fi = 0; fi < src.files.size(); ++fi) {
        for (auto &d : read_documents(src.files[fi], tool_format)) {
            ZAYA_ASSERT(di < docs.size() && docs[di].file == fi && docs[di].line == d.line);
            batch_val.push_back(docs[di++].val);
            batch_bytes += d.text.size();
            batch.push_back(std::move(d));
            if (batch_bytes >= (uint64_t(8) << 20)) flush();
        }
    }
    flush();
    ZAYA_ASSERT(di == docs.size());
    m.train = train.finish();
    m.val = valw.finish();
    r.encode_seconds = since(t_enc);
    const double learned_pct = 100.0 * double(learned_tokens) / double(std::max<uint64_t>(done_tokens, 1));
    progress.done(fmt::format("tokenized {} documents, {} tokens in {:.1f} s{}", done_docs, done_tokens,
                              r.encode_seconds,
                              masked ? fmt::format("; {} of them ({:.0f}%) learned (loss masks leave out prompts)",
                                                   learned_tokens, learned_pct)
                                     : std::string()));
    for (const auto &f : src.files) m.sources.push_back(f.key);
    m.skipped = src.skipped;
    manifest_save(m, o.out_dir); // last: its presence marks a complete data directory
    r.seconds = since(t0);
    return r;
}

} // namespace zaya
