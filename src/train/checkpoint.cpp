#include "train/checkpoint.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/config_json.h"
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>
#include <filesystem>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

namespace zaya {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char *kFormat = "zaya-checkpoint";
constexpr int kVersion = 1;

// The optimizer-side tensors of a checkpoint, by name: flat state buffers, their sizes fixed by the layout.
struct StateTensor {
    const char *name;
    real *data;
    size_t numel;
};
std::vector<StateTensor> state_tensors(Trainer &t) {
    const ParamGroups &g = t.optimizer().groups();
    BalancingController &b = t.balancing();
    const size_t nb = size_t(b.num_layers() * b.num_classes());
    return {{"muon.momentum", t.optimizer().muon_momentum(), g.muon_state_size},
            {"adamw.exp_avg", t.optimizer().exp_avg(), g.adamw_state_size},
            {"adamw.exp_avg_sq", t.optimizer().exp_avg_sq(), g.adamw_state_size},
            {"balancing.exp_avg", b.exp_avg(), nb},
            {"balancing.exp_avg_sq", b.exp_avg_sq(), nb}};
}

std::string file_xxh64(const std::string &path) {
    std::string bytes = read_file_bytes(path);
    return fmt::format("{:016x}", XXH64(bytes.data(), bytes.size(), 0));
}

// Makes a directory's entries (new files, renames) durable.
void fsync_dir(const fs::path &dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) fail("cannot open directory '{}': {}", dir.string(), std::strerror(errno));
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) fail("cannot fsync directory '{}': {}", dir.string(), std::strerror(errno));
}

// Copies a checkpoint tensor into `dst` after checking its dtype and element count.
void read_exact(const SafetensorsFile &f, const std::string &name, real *dst, size_t numel) {
    const TensorInfo *t = f.find(name);
    if (!t) fail("{}: checkpoint tensor '{}' is missing", f.path(), name);
    if (t->dtype != DType::F32 || size_t(t->numel()) != numel)
        fail("{}: checkpoint tensor '{}' has {} {} elements, expected {} F32", f.path(), name, t->numel(),
             dtype_name(t->dtype), numel);
    tensor_read_f32(*t, dst);
}

} // namespace

std::string checkpoint_save(Trainer &t, const std::string &run_dir) {
    if (!t.has_loader()) fail("checkpoint_save: the trainer has no data loader whose position could be saved");
    const int64_t step = t.optimizer().step_count();
    const fs::path root = fs::path(run_dir) / "checkpoints";
    const std::string name = fmt::format("step_{:08d}", step);
    const fs::path tmp = root / (name + ".tmp"), final_dir = root / name;
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) fail("cannot create checkpoint directory '{}': {}", tmp.string(), ec.message());

    const Model &m = t.model();
    std::vector<TensorToWrite> params;
    for (const ParamView &v : m.layout.views) params.push_back({v.name, DType::F32, v.shape, m.params.data() + v.offset});
    safetensors_write((tmp / "model.safetensors").string(), params);
    std::vector<TensorToWrite> state;
    for (const StateTensor &s : state_tensors(t)) state.push_back({s.name, DType::F32, {int64_t(s.numel)}, s.data});
    safetensors_write((tmp / "optimizer.safetensors").string(), state);

    json files = json::object();
    for (const char *f : {"model.safetensors", "optimizer.safetensors"})
        files[f] = {{"bytes", fs::file_size(tmp / f)}, {"xxh64", file_xxh64((tmp / f).string())}};
    json manifest = {{"format", kFormat},
                     {"version", kVersion},
                     {"step", step},
                     {"balancing_step", t.balancing().step_count()},
                     {"loader", loader_state_to_json(t.loader_state())},
                     {"model_config", config_to_json(m.config)},
                     {"train_config", train_config_to_json(t.config())},
                     {"files", files}};
    write_file_atomic((tmp / "manifest.json").string(), manifest.dump(2) + "\n"); // last: marks it complete
    fsync_dir(tmp);

    // Move into place; an older checkpoint of the same step is replaced only once the new one is complete.
    const fs::path old = root / (name + ".old");
    fs::remove_all(old, ec);
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir, ec);
    if (ec) fail("cannot rename '{}' to '{}': {}", tmp.string(), final_dir.string(), ec.message());
    fs::remove_all(old, ec);
    fsync_dir(root);
    write_file_atomic((root / "latest").string(), name + "\n");
    return final_dir.string();
}

void checkpoint_load(Trainer &t, const std::string &dir) {
    const fs::path d(dir);
    const std::string manifest_path = (d / "manifest.json").string();
    if (!fs::exists(manifest_path)) fail("{}: not a complete checkpoint (no manifest.json)", dir);
    json j = json::parse(read_file_bytes(manifest_path), nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("{}: not valid JSON", manifest_path);
    if (j.value("format", "") != kFormat || j.value("version", 0) != kVersion)
        fail("{}: not a zaya checkpoint of version {}", manifest_path, kVersion);
    try {
        for (const char *f : {"model.safetensors", "optimizer.safetensors"}) {
            const json &info = j.at("files").at(f);
            const fs::path p = d / f;
            if (!fs::exists(p)) fail("{}: file '{}' named by the manifest is missing", dir, f);
            if (fs::file_size(p) != info.at("bytes").get<uintmax_t>())
                fail("{}: '{}' has {} bytes, the manifest says {} (truncated?)", dir, f, fs::file_size(p),
                     info.at("bytes").get<uintmax_t>());
            if (file_xxh64(p.string()) != info.at("xxh64").get<std::string>())
                fail("{}: '{}' does not match its checksum (corrupted)", dir, f);
        }
        if (config_to_json(config_from_json(j.at("model_config"), manifest_path)) != config_to_json(t.model().config))
            fail("{}: the checkpoint's model config differs from this run's", manifest_path);

        Model &m = t.mutable_model();
        auto params = SafetensorsFile::open((d / "model.safetensors").string());
        for (const ParamView &v : m.layout.views) read_exact(*params, v.name, m.params.data() + v.offset, v.numel);
        auto state = SafetensorsFile::open((d / "optimizer.safetensors").string());
        for (const StateTensor &s : state_tensors(t)) read_exact(*state, s.name, s.data, s.numel);
        t.optimizer().set_step_count(j.at("step").get<int64_t>());
        t.balancing().set_step_count(j.at("balancing_step").get<int64_t>());
        t.restore_loader(loader_state_from_json(j.at("loader"), manifest_path));
    } catch (const json::exception &e) {
        fail("{}: malformed manifest: {}", manifest_path, e.what());
    }
}

std::optional<std::string> checkpoint_latest(const std::string &run_dir) {
    const fs::path root = fs::path(run_dir) / "checkpoints";
    if (!fs::exists(root / "latest")) return std::nullopt;
    std::string name = read_file_bytes((root / "latest").string());
    while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
    if (name.empty() || name.find('/') != std::string::npos) fail("{}: malformed 'latest' pointer", root.string());
    return (root / name).string();
}

std::vector<std::string> checkpoint_list(const std::string &run_dir) {
    const fs::path root = fs::path(run_dir) / "checkpoints";
    std::vector<std::string> names;
    std::error_code ec;
    if (!fs::is_directory(root)) return {};
    for (const auto &e : fs::directory_iterator(root, ec)) {
        const std::string n = e.path().filename().string();
        if (e.is_directory() && n.size() == 13 && n.rfind("step_", 0) == 0 &&
            n.find_first_not_of("0123456789", 5) == std::string::npos)
            names.push_back(n);
    }
    std::sort(names.rbegin(), names.rend()); // zero-padded: lexicographic = numeric
    std::vector<std::string> out;
    for (const auto &n : names) out.push_back((root / n).string());
    return out;
}

std::string checkpoint_resume(Trainer &t, const std::string &run_dir,
                              const std::function<void(const std::string &)> &warn) {
    std::vector<std::string> candidates;
    std::optional<std::string> latest;
    try {
        latest = checkpoint_latest(run_dir);
    } catch (const Error &e) {
        warn(e.what());
    }
    if (latest) candidates.push_back(*latest);
    for (const auto &d : checkpoint_list(run_dir))
        if (!latest || fs::path(d) != fs::path(*latest)) candidates.push_back(d);
    for (const auto &d : candidates) {
        try {
            checkpoint_load(t, d);
            return d;
        } catch (const Error &e) {
            warn(fmt::format("skipping damaged checkpoint: {}", e.what()));
        }
    }
    fail("no loadable checkpoint under '{}'", (fs::path(run_dir) / "checkpoints").string());
}

void checkpoint_prune(const std::string &run_dir, int64_t keep) {
    if (keep < 1) fail("keep must be at least 1, got {}", keep);
    const std::optional<std::string> latest = checkpoint_latest(run_dir);
    const std::vector<std::string> all = checkpoint_list(run_dir);
    std::error_code ec;
    for (size_t i = size_t(keep); i < all.size(); ++i)
        if (!latest || fs::path(all[i]) != fs::path(*latest)) fs::remove_all(all[i], ec);
}

} // namespace zaya
