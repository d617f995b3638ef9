#include "data/manifest.h"

#include "core/error.h"
#include "core/atomic_file.h"

#include <nlohmann/json.hpp>

#include <filesystem>

namespace fs = std::filesystem;

namespace zaya {

namespace {

constexpr const char *kFormat = "zaya-tokens";
constexpr int kVersion = 1, kMaskedVersion = 2;

nlohmann::ordered_json split_json(const SplitInfo &s, bool masked) {
    nlohmann::ordered_json j = {{"docs", s.docs}, {"tokens", s.tokens}, {"shards", s.shards}};
    if (masked) j["masks"] = s.masks;
    return j;
}

const nlohmann::json &field(const nlohmann::json &j, const std::string &name, const std::string &file) {
    const auto it = j.find(name);
    if (it == j.end()) fail("{}: missing field \"{}\"", file, name);
    return *it;
}

uint64_t get_u64(const nlohmann::json &j, const std::string &name, const std::string &file) {
    const auto &v = field(j, name, file);
    if (!v.is_number_unsigned()) fail("{}: \"{}\" must be a non-negative integer, got {}", file, name, v.dump());
    return v.get<uint64_t>();
}

int32_t get_id(const nlohmann::json &j, const std::string &name, const std::string &file) {
    const auto &v = field(j, name, file);
    if (!v.is_number_integer() || v.get<int64_t>() < -1 || v.get<int64_t>() > INT32_MAX)
        fail("{}: \"{}\" must be a token id or -1, got {}", file, name, v.dump());
    return int32_t(v.get<int64_t>());
}

std::string get_str(const nlohmann::json &j, const std::string &name, const std::string &file) {
    const auto &v = field(j, name, file);
    if (!v.is_string()) fail("{}: \"{}\" must be a string, got {}", file, name, v.dump());
    return v.get<std::string>();
}

std::vector<std::string> get_strs(const nlohmann::json &j, const std::string &name, const std::string &file) {
    const auto &v = field(j, name, file);
    std::vector<std::string> out;
    if (!v.is_array()) fail("{}: \"{}\" must be an array of strings", file, name);
    for (const auto &e : v) {
        if (!e.is_string()) fail("{}: \"{}\" must be an array of strings, has {}", file, name, e.dump());
        out.push_back(e.get<std::string>());
    }
    return out;
}

// A name inside the data directory: no directories, so a manifest cannot point elsewhere.
std::string plain_name(const std::string &s, const std::string &what, const std::string &file) {
    if (s.empty() || s.find('/') != std::string::npos || s == "." || s == "..")
        fail("{}: {} \"{}\" must be a file name inside the data directory", file, what, s);
    return s;
}

SplitInfo get_split(const nlohmann::json &j, const std::string &name, const std::string &file, bool masked) {
    const auto &v = field(j, name, file);
    if (!v.is_object()) fail("{}: \"{}\" must be an object", file, name);
    const std::string f = file + " (" + name + ")";
    SplitInfo s{get_u64(v, "docs", f), get_u64(v, "tokens", f), get_strs(v, "shards", f), {}};
    for (const auto &sh : s.shards) plain_name(sh, "shard", f);
    if (masked) {
        s.masks = get_strs(v, "masks", f);
        if (s.masks.size() != s.shards.size())
            fail("{}: {} \"masks\" for {} \"shards\"; there is one mask per shard", f, s.masks.size(),
                 s.shards.size());
        for (const auto &mk : s.masks) plain_name(mk, "mask", f);
    }
    return s;
}

} // namespace

void manifest_save(const DataManifest &m, const std::string &data_dir) {
    nlohmann::ordered_json j = {
        {"format", kFormat},
        {"version", m.loss_mask ? kMaskedVersion : kVersion},
        {"tokenizer", m.tokenizer},
        {"tokenizer_trained", m.tokenizer_trained},
        {"vocab_size", m.vocab_size},
        {"dtype", m.dtype},
        {"bos_id", m.bos_id},
        {"eos_id", m.eos_id},
        {"pad_id", m.pad_id},
        {"unk_id", m.unk_id},
        {"val_percent", m.val_percent},
        {"shard_tokens", m.shard_tokens},
        {"loss_mask", m.loss_mask},
        {"train", split_json(m.train, m.loss_mask)},
        {"val", split_json(m.val, m.loss_mask)},
        {"sources", m.sources},
        {"skipped", m.skipped},
    };
    std::string text;
    try {
        text = j.dump(2) + "\n";
    } catch (const nlohmann::json::exception &e) { // a non-UTF-8 file name
        fail("{}: cannot encode manifest: {}", (fs::path(data_dir) / kManifestName).string(), e.what());
    }
    write_file_atomic((fs::path(data_dir) / kManifestName).string(), text);
}

DataManifest manifest_load(const std::string &data_dir) {
    const std::string file = (fs::path(data_dir) / kManifestName).string();
    std::error_code ec;
    if (!fs::exists(file, ec))
        fail("{}: not found: {} is not a prepared data directory (run `zaya prepare --out {}`)", file, data_dir,
             data_dir);
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(read_file_bytes(file));
    } catch (const nlohmann::json::exception &e) {
        fail("{}: invalid JSON: {}", file, e.what());
    }
    if (!j.is_object()) fail("{}: expected a JSON object", file);
    if (get_str(j, "format", file) != kFormat) fail("{}: \"format\" is not \"{}\"", file, kFormat);
    const auto version = get_u64(j, "version", file);
    if (version != kVersion && version != kMaskedVersion)
        fail("{}: version {} not supported (this zaya reads {} and {})", file, version, kVersion, kMaskedVersion);
    DataManifest m;
    if (j.contains("loss_mask")) {
        const auto &lm = j["loss_mask"];
        if (!lm.is_boolean()) fail("{}: \"loss_mask\" must be true or false", file);
        m.loss_mask = lm.get<bool>();
    }
    if (m.loss_mask != (version == kMaskedVersion))
        fail("{}: \"loss_mask\" {} does not fit version {} (loss masks come with version {})", file, m.loss_mask,
             version, kMaskedVersion);
    m.tokenizer = plain_name(get_str(j, "tokenizer", file), "tokenizer", file);
    const auto &tt = field(j, "tokenizer_trained", file);
    if (!tt.is_boolean()) fail("{}: \"tokenizer_trained\" must be true or false", file);
    m.tokenizer_trained = tt.get<bool>();
    m.vocab_size = get_u64(j, "vocab_size", file);
    if (m.vocab_size == 0 || m.vocab_size > uint64_t(INT32_MAX))
        fail("{}: \"vocab_size\" {} out of range", file, m.vocab_size);
    m.dtype = get_str(j, "dtype", file);
    if (m.dtype != "u16" && m.dtype != "u32")
        fail("{}: \"dtype\" must be \"u16\" or \"u32\", got \"{}\"", file, m.dtype);
    m.bos_id = get_id(j, "bos_id", file);
    m.eos_id = get_id(j, "eos_id", file);
    m.pad_id = get_id(j, "pad_id", file);
    m.unk_id = get_id(j, "unk_id", file);
    const std::pair<const char *, int32_t> ids[] = {
        {"bos_id", m.bos_id}, {"eos_id", m.eos_id}, {"pad_id", m.pad_id}, {"unk_id", m.unk_id}};
    for (const auto &[name, id] : ids)
        if (id >= 0 && uint64_t(id) >= m.vocab_size)
            fail("{}: \"{}\" {} ≥ vocab_size {}", file, name, id, m.vocab_size);
    const auto &vp = field(j, "val_percent", file);
    if (!vp.is_number()) fail("{}: \"val_percent\" must be a number", file);
    m.val_percent = vp.get<double>();
    m.shard_tokens = get_u64(j, "shard_tokens", file);
    m.train = get_split(j, "train", file, m.loss_mask);
    m.val = get_split(j, "val", file, m.loss_mask);
    m.sources = get_strs(j, "sources", file);
    if (j.contains("skipped")) m.skipped = get_strs(j, "skipped", file);
    return m;
}

} // namespace zaya
