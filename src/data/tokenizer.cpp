#include "data/tokenizer.h"

#include "core/error.h"
#include "core/atomic_file.h"
#include "data/hf_chat_template.h"
#include "data/hf_tokenizer.h"

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_map>

namespace zaya {

Tokenizer Tokenizer::load(const std::string &path) {
    if (std::filesystem::is_directory(path)) {
        const std::optional<std::string> file = find_in(path);
        if (!file) fail("{}: a directory with no tokenizer.model or tokenizer.json", path);
        return load(*file);
    }
    Tokenizer t = load_file(path);
    // A model directory's chat template belongs to its tokenizer, as in transformers; one that does not load is
    // an error only for the chats that need it (chat_template()).
    const std::string dir = std::filesystem::path(path).parent_path().string();
    try {
        if (std::optional<HfChatTemplate> ct = HfChatTemplate::find_in(dir.empty() ? "." : dir))
            t.chat_template_ = std::make_shared<const HfChatTemplate>(std::move(*ct));
    } catch (const Error &e) {
        t.chat_template_error_ = e.what();
    }
    return t;
}

Tokenizer Tokenizer::load_file(const std::string &path) {
    if (HfTokenizer::looks_like_json(path)) {
        Tokenizer t;
        t.hf_ = HfTokenizer::load(path);
        t.path_ = path;
        return t;
    }
    auto sp = std::make_shared<sentencepiece::SentencePieceProcessor>();
    const auto st = sp->Load(path);
    if (!st.ok()) fail("{}: cannot load sentencepiece tokenizer: {}", path, st.ToString());
    Tokenizer t;
    // Where "\n" is no piece, no piece can contain it and it always encodes as the byte piece <0x0A>; then
    // encoding line by line gives exactly the same ids, and is faster (sentencepiece's BPE is superlinear in
    // the length of a text, and a line is short).
    // Lines are not independent where the model adds a dummy prefix or removes extra whitespace (Llama's): there
    // the text " a \n b " encodes otherwise line by line, and the shortcut is off.
    const int nl_byte = sp->PieceToId("<0x0A>");
    if (sp->PieceToId("\n") == sp->unk_id() && nl_byte != sp->unk_id() && sp->IsByte(nl_byte))
        t.newline_byte_id_ = nl_byte;
    t.sp_ = std::move(sp);
    t.path_ = path;
    auto controls = std::make_shared<std::vector<std::pair<std::string, int32_t>>>();
    for (int id = 0; id < t.sp_->GetPieceSize(); ++id)
        if (t.sp_->IsControl(id) && !t.sp_->IdToPiece(id).empty()) controls->push_back({t.sp_->IdToPiece(id), id});
    std::stable_sort(controls->begin(), controls->end(),
                     [](const auto &a, const auto &b) { return a.first.size() > b.first.size(); });
    if (!controls->empty()) t.control_texts_ = std::move(controls);
    if (t.newline_byte_id_ >= 0) {
        const std::string probe = " a \n b ";
        std::vector<int> whole;
        if (!t.sp_->Encode(probe, &whole).ok() || t.encode(probe) != std::vector<int32_t>(whole.begin(), whole.end()))
            t.newline_byte_id_ = -1;
    }
    return t;
}

namespace {

// tokenizer.json's "added_tokens" array alone (it comes before the vocabulary, which may be tens of MB): the text from
// its '[' to the matching ']', strings skipped; empty when the file has none or cannot be read.
std::string added_tokens_text(const std::string &json_path) {
    std::ifstream in(json_path, std::ios::binary);
    std::string head(size_t(4) << 20, '\0'); // added tokens come first; 4 MiB holds Gemma3's thousands of them
    in.read(head.data(), std::streamsize(head.size()));
    head.resize(size_t(in.gcount()));
    const size_t key = head.find("\"added_tokens\"");
    const size_t open = key == std::string::npos ? key : head.find('[', key);
    if (open == std::string::npos) return {};
    int depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = open; i < head.size(); ++i) {
        const char c = head[i];
        if (in_string) {
            if (escaped) escaped = false;
            else if (c == '\\') escaped = true;
            else if (c == '"') in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            ++depth;
        } else if ((c == ']' || c == '}') && --depth == 0) {
            return head.substr(open, i - open + 1);
        }
    }
    return {};
}

// Whether the sentencepiece model spells every added token of the tokenizer.json beside it as that file does. A
// post-trained model may repurpose reserved tokens in tokenizer.json alone (Gemma3's <unusedN> made tool-call
// markers, as ZAYA1-8B's <zyphra_tool_call> at 101-104), leaving tokenizer.model as it was: transformers reads
// tokenizer.json, so then that is the model's tokenizer.
bool sentencepiece_agrees(const std::string &model_path, const std::string &json_path) {
    const nlohmann::json added = nlohmann::json::parse(added_tokens_text(json_path), nullptr, false);
    if (!added.is_array()) return true; // (none to disagree on, or unreadable: tokenizer.model as ever)
    sentencepiece::SentencePieceProcessor sp;
    if (!sp.Load(model_path).ok()) return true; // (its own error comes when it is loaded)
    for (const nlohmann::json &t : added) {
        if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
            !t["content"].is_string())
            continue;
        // (Tokens past the model's pieces, as a <mask> transformers appended, are additions: no disagreement.)
        const int64_t id = t["id"].get<int64_t>();
        if (id >= 0 && id < sp.GetPieceSize() && sp.IdToPiece(int(id)) != t["content"].get<std::string>())
            return false;
    }
    return true;
}

} // namespace

std::optional<std::string> Tokenizer::find_in(const std::string &dir) {
    const auto model = std::filesystem::path(dir) / "tokenizer.model";
    const auto json = std::filesystem::path(dir) / "tokenizer.json";
    const bool has_model = std::filesystem::is_regular_file(model), has_json = std::filesystem::is_regular_file(json);
    if (has_model && (!has_json || sentencepiece_agrees(model.string(), json.string()))) return model.string();
    if (has_json) return json.string();
    return std::nullopt;
}

const char *Tokenizer::file_name() const { return hf_ ? "tokenizer.json" : "tokenizer.model"; }

const char *Tokenizer::kind() const {
    return !hf_ ? "sentencepiece" : hf_->byte_level() ? "byte-level BPE" : "SentencePiece-style BPE";
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    if (hf_) return hf_->encode(text);
    std::vector<int32_t> out;
    std::vector<int> ids;
    auto encode_part = [&](std::string_view part) {
        const auto st = sp_->Encode(part, &ids);
        if (!st.ok()) fail("{}: encode failed: {}", path_, st.ToString());
        out.insert(out.end(), ids.begin(), ids.end());
    };
    if (newline_byte_id_ < 0) {
        encode_part(text);
        return out;
    }
    size_t p = 0;
    while (p < text.size()) {
        size_t q = text.find('\n', p);
        const bool newline = q != std::string_view::npos;
        if (!newline) q = text.size();
        if (q > p) encode_part(text.substr(p, q - p));
        if (newline) out.push_back(newline_byte_id_);
        p = q + 1;
    }
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t> &ids) const {
    const int32_t v = vocab_size();
    for (const int32_t id : ids)
        if (id < 0 || id >= v) fail("{}: cannot decode token {}: vocabulary is [0, {})", path_, id, v);
    if (hf_) return hf_->decode(ids, shown_);
    const std::vector<int> in(ids.begin(), ids.end()); // sentencepiece's ids are int
    std::string out;
    const auto st = sp_->Decode(in, &out);
    if (!st.ok()) fail("{}: decode failed: {}", path_, st.ToString());
    return out;
}

std::string Tokenizer::piece(int32_t id) const {
    if (id < 0 || id >= vocab_size()) fail("{}: no token {}: vocabulary is [0, {})", path_, id, vocab_size());
    return hf_ ? hf_->piece(id) : sp_->IdToPiece(id);
}

std::string Tokenizer::token_bytes(int32_t id) const {
    const std::string p = piece(id);
    if (hf_) return hf_->token_bytes(id, std::binary_search(shown_.begin(), shown_.end(), id));
    if (sp_->IsControl(id)) return {};
    if (sp_->IsByte(id)) return std::string(1, char(std::stoi(p.substr(3, 2), nullptr, 16))); // "<0xNN>"
    if (sp_->IsUnknown(id)) return decode({id});
    std::string out;
    static constexpr std::string_view kSpace = "\xe2\x96\x81"; // U+2581 '▁'
    for (size_t i = 0; i < p.size();) {
        if (p.compare(i, kSpace.size(), kSpace) == 0) out += ' ', i += kSpace.size();
        else out += p[i++];
    }
    return out;
}

bool Tokenizer::is_control(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return false;
    return hf_ ? hf_->is_control(id) && !std::binary_search(shown_.begin(), shown_.end(), id) : sp_->IsControl(id);
}

bool Tokenizer::show_as_text(std::string_view piece) {
    const int32_t id = piece_id(piece);
    if (!hf_ || id < 0 || !hf_->is_control(id)) return false;
    if (!std::binary_search(shown_.begin(), shown_.end(), id))
        shown_.insert(std::upper_bound(shown_.begin(), shown_.end(), id), id);
    return true;
}

const HfChatTemplate *Tokenizer::chat_template() const {
    if (!chat_template_error_.empty()) throw Error(chat_template_error_);
    return chat_template_.get();
}

void Tokenizer::set_chat_template(std::shared_ptr<const HfChatTemplate> t) {
    chat_template_ = std::move(t);
    chat_template_error_.clear();
}

std::vector<int32_t> Tokenizer::encode_with_control(std::string_view text) const {
    if (hf_) return hf_->encode(text);
    if (!control_texts_) return encode(text);
    std::vector<int32_t> out;
    size_t plain = 0; // start of the text not yet encoded
    for (size_t i = 0; i < text.size();) {
        const auto hit = std::find_if(control_texts_->begin(), control_texts_->end(), [&](const auto &c) {
            return text.compare(i, c.first.size(), c.first) == 0;
        });
        if (hit == control_texts_->end()) {
            ++i;
            continue;
        }
        const std::vector<int32_t> ids = encode(text.substr(plain, i - plain));
        out.insert(out.end(), ids.begin(), ids.end());
        out.push_back(hit->second);
        i += hit->first.size();
        plain = i;
    }
    const std::vector<int32_t> ids = encode(text.substr(plain));
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
}

int32_t Tokenizer::vocab_size() const { return hf_ ? hf_->vocab_size() : sp_->GetPieceSize(); }
int32_t Tokenizer::bos_id() const { return hf_ ? hf_->bos_id() : sp_->bos_id(); }
int32_t Tokenizer::piece_id(std::string_view piece) const {
    if (hf_) return hf_->piece_id(piece);
    const int id = sp_->PieceToId(piece);
    return id == sp_->unk_id() && piece != sp_->IdToPiece(id) ? -1 : int32_t(id);
}

int32_t Tokenizer::eos_id() const { return hf_ ? hf_->eos_id() : sp_->eos_id(); }
int32_t Tokenizer::pad_id() const { return hf_ ? hf_->pad_id() : sp_->pad_id(); }
int32_t Tokenizer::unk_id() const { return hf_ ? hf_->unk_id() : sp_->unk_id(); }

namespace {

// Feeds the lines of the files, in order, to the trainer (no comma-joined "input" flag: any path works).
class LineIterator : public sentencepiece::SentenceIterator {
  public:
    explicit LineIterator(const std::vector<std::string> &files) : files_(files) { Next(); }
    bool done() const override { return done_; }
    void Next() override {
        while (true) {
            if (in_.is_open() && std::getline(in_, line_)) return;
            if (in_.is_open() && in_.bad()) {
                status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal,
                                                      files_[next_ - 1] + ": read failed");
                done_ = true;
                return;
            }
            in_.close();
            if (next_ == files_.size()) {
                done_ = true;
                return;
            }
            in_.clear();
            in_.open(files_[next_++], std::ios::binary);
            if (!in_) {
                status_ = sentencepiece::util::Status(sentencepiece::util::StatusCode::kNotFound,
                                                      files_[next_ - 1] + ": cannot open");
                done_ = true;
                return;
            }
        }
    }
    const std::string &value() const override { return line_; }
    sentencepiece::util::Status status() const override { return status_; }

  private:
    const std::vector<std::string> &files_;
    size_t next_ = 0;
    std::ifstream in_;
    std::string line_;
    bool done_ = false;
    sentencepiece::util::Status status_;
};

} // namespace

void train_tokenizer(const std::vector<std::string> &input_files, int vocab_size, const std::string &model_path,
                     const TokenizerTrainOptions &opts) {
    if (input_files.empty()) fail("{}: no input files to train the tokenizer on", model_path);
    // 4 special pieces + 256 byte pieces come first; fewer would leave no room for characters or merges.
    if (vocab_size <= 260 + 1) fail("tokenizer vocab size {} too small: byte fallback alone takes 260 ids", vocab_size);
    for (const auto &f : input_files) {
        std::ifstream probe(f, std::ios::binary);
        if (!probe) fail("{}: cannot open tokenizer training file", f);
    }
    const std::unordered_map<std::string, std::string> kw = {
        {"model_type", "bpe"},
        {"vocab_size", std::to_string(vocab_size)},
        {"byte_fallback", "true"},
        {"character_coverage", fmt::format("{}", opts.character_coverage)},
        {"pad_id", std::to_string(kTrainedPadId)},
        {"unk_id", std::to_string(kTrainedUnkId)},
        {"bos_id", std::to_string(kTrainedBosId)},
        {"eos_id", std::to_string(kTrainedEosId)},
        {"pad_piece", "<pad>"},
        {"unk_piece", "<unk>"},
        {"bos_piece", "<s>"},
        {"eos_piece", "</s>"},
        {"normalization_rule_name", "identity"},
        {"add_dummy_prefix", "false"},
        {"remove_extra_whitespaces", "false"},
        {"allow_whitespace_only_pieces", "true"},
        {"split_digits", "true"},
        {"input_sentence_size", std::to_string(opts.max_sentences)},
        {"shuffle_input_sentence", "false"},
        {"max_sentence_length", std::to_string(opts.max_sentence_bytes)},
        {"num_threads", "1"},
        {"minloglevel", opts.verbose ? "0" : "1"},
    };
    LineIterator lines(input_files);
    std::string model;
    const auto st = sentencepiece::SentencePieceTrainer::Train(kw, &lines, &model);
    if (!st.ok()) fail("{}: tokenizer training failed (vocab size {}): {}", model_path, vocab_size, st.ToString());
    write_file_atomic(model_path, model);
}

} // namespace zaya
