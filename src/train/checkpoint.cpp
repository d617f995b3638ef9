#include "train/checkpoint.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/config_json.h"
#include "io/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <thread>
#include <unistd.h>
#include <xxhash.h>

namespace zaya {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char *kFormat = "zaya-checkpoint";
constexpr int kVersion = 2;
constexpr const char *kModelFile = "model.safetensors";
constexpr const char *kOptimizerFile = "optimizer.safetensors";

std::vector<int64_t> shape_or_flat(const ParamView *v, size_t numel) {
    if (v && v->numel == numel) return v->shape;
    return {int64_t(numel)};
}

// Makes a directory's entries (new files, renames) durable.
void fsync_dir(const fs::path &dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("cannot open directory '{}': {}", dir.string(), std::strerror(errno));
    int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) fail("cannot fsync directory '{}': {}", dir.string(), std::strerror(errno));
}

// Writes `text` to a new file and fsyncs it (not atomic by itself: callers rename it or its directory).
void write_file_synced(const fs::path &path, const std::string &text) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot create '{}': {}", path.string(), std::strerror(errno));
    size_t done = 0;
    while (done < text.size()) {
        const ssize_t w = ::write(fd, text.data() + done, text.size() - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            const int e = errno;
            ::close(fd);
            fail("cannot write '{}': {}", path.string(), std::strerror(e));
        }
        done += size_t(w);
    }
    const int rc = ::fsync(fd);
    ::close(fd);
    if (rc != 0) fail("cannot fsync '{}': {}", path.string(), std::strerror(errno));
}

// Test hook (fault-tolerance tests): ZAYA_FAULT_SLOW_CKPT_MS=N sleeps N ms between the files of a checkpoint,
// widening the window in which a kill lands in the middle of a save.
void fault_pause() {
    if (const char *v = std::getenv("ZAYA_FAULT_SLOW_CKPT_MS"))
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(v)));
}

json read_manifest(const fs::path &dir) {
    const fs::path p = dir / "manifest.json";
    if (!fs::exists(p)) fail("{}: not a complete checkpoint (no manifest.json)", dir.string());
    json j = json::parse(read_file_bytes(p.string()), nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("{}: not valid JSON", p.string());
    if (j.value("format", "") != kFormat) fail("{}: not a zaya checkpoint manifest", p.string());
    if (j.value("version", 0) != kVersion)
        fail("{}: checkpoint format version {} (this zaya reads version {})", p.string(), j.value("version", 0),
             kVersion);
    return j;
}

// Checks the files' sizes and every wanted tensor's manifest entry, header entry and checksum, then copies them
// into their destinations. Nothing is written unless everything checks out.
void verify_and_read(const fs::path &dir, const json &manifest, const std::vector<CheckpointTensor> &wanted) {
    const std::string label = (dir / "manifest.json").string();
    try {
        std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
        for (const auto &[name, info] : manifest.at("files").items()) {
            if (name.find('/') != std::string::npos || name == "..") fail("{}: bad file name '{}'", label, name);
            const fs::path p = dir / name;
            if (!fs::exists(p)) fail("{}: file '{}' named by the manifest is missing", dir.string(), name);
            const uintmax_t want = info.at("bytes").get<uintmax_t>();
            if (fs::file_size(p) != want)
                fail("{}: '{}' has {} bytes, the manifest says {} (truncated?)", dir.string(), name, fs::file_size(p),
                     want);
            files[name] = SafetensorsFile::open(p.string());
        }
        std::map<std::string, const json *> entries;
        for (const json &e : manifest.at("tensors")) entries[e.at("name").get<std::string>()] = &e;

        std::vector<const TensorInfo *> found;
        for (const CheckpointTensor &w : wanted) {
            auto it = entries.find(w.name);
            if (it == entries.end()) fail("{}: the manifest has no tensor '{}'", label, w.name);
            const json &e = *it->second;
            const std::string file = e.at("file").get<std::string>();
            if (file != w.file) fail("{}: tensor '{}' is in '{}', expected '{}'", label, w.name, file, w.file);
            if (e.at("dtype").get<std::string>() != "F32" || e.at("shape").get<std::vector<int64_t>>() != w.shape)
                fail("{}: tensor '{}' is {} {}, this run needs F32 {}", label, w.name, e.at("dtype").get<std::string>(),
                     e.at("shape").dump(), json(w.shape).dump());
            auto f = files.find(file);
            if (f == files.end()) fail("{}: tensor '{}' names file '{}', which the manifest does not list", label, w.name, file);
            const TensorInfo *t = f->second->find(w.name);
            if (!t) fail("{}: tensor '{}' is missing from the file", f->second->path(), w.name);
            if (t->dtype != DType::F32 || t->shape != w.shape)
                fail("{}: tensor '{}' is {} {} in the file, the manifest says F32 {}", f->second->path(), w.name,
                     dtype_name(t->dtype), t->shape_str(), json(w.shape).dump());
            const std::string want = e.at("xxh64").get<std::string>();
            if (fmt::format("{:016x}", XXH64(t->data, t->nbytes, 0)) != want)
                fail("{}: tensor '{}' does not match its checksum (corrupted)", f->second->path(), w.name);
            found.push_back(t);
        }
        for (size_t i = 0; i < wanted.size(); ++i) // F32, checked above: the parts this rank holds are byte copies
            for (const CheckpointPiece &p : wanted[i].pieces)
                if (p.data) std::memcpy(p.data, found[i]->data + p.at * sizeof(real), p.numel * sizeof(real));
    } catch (const json::exception &e) {
        fail("{}: malformed manifest: {}", label, e.what());
    }
}

std::vector<CheckpointTensor> model_tensors(Model &m) {
    std::vector<CheckpointTensor> out;
    for (const ParamView &v : m.layout.views)
        out.push_back({kModelFile, v.name, v.shape, v.numel, {{0, v.numel, -1, m.params.data() + v.offset}}});
    return out;
}

} // namespace

std::vector<CheckpointTensor> checkpoint_tensors(Trainer &t) {
    Model &m = t.mutable_model();
    std::vector<CheckpointTensor> out = model_tensors(m);
    const Optimizer &o = t.optimizer();
    const ParamGroups &g = o.groups();
    const ShardPlan &plan = o.plan();
    const int me = o.rank();
    // Appends a piece, merged with the previous one when the same rank holds both back to back.
    auto add = [](CheckpointTensor &c, CheckpointPiece p) {
        if (!c.pieces.empty()) {
            CheckpointPiece &q = c.pieces.back();
            if (q.owner == p.owner && q.at + q.numel == p.at && (q.data ? q.data + q.numel == p.data : !p.data)) {
                q.numel += p.numel;
                return;
            }
        }
        c.pieces.push_back(p);
    };
    // Muon momentum: one tensor per view (the experts of a 3-D weight together), one piece per matrix.
    size_t mine = 0; // this rank's matrices are consecutive in its own state buffer, in layout order
    for (size_t i = 0; i < g.muon.size();) {
        const ParamView *v = m.layout.find(g.muon[i].name);
        if (!v) fail("checkpoint: Muon matrix '{}' is not in the layout", g.muon[i].name);
        CheckpointTensor c{kOptimizerFile, v->name + ".muon_momentum", v->shape, v->numel, {}};
        for (; i < g.muon.size() && g.muon[i].name == v->name; ++i) {
            const MuonMatrix &mm = g.muon[i];
            const int owner = plan.muon_owner[i];
            real *data = owner == me ? o.muon_momentum() + mine : nullptr;
            if (owner == me) mine += mm.numel();
            add(c, {mm.offset - v->offset, mm.numel(), owner, data});
        }
        size_t covered = 0;
        for (const CheckpointPiece &p : c.pieces) covered += p.numel;
        if (covered != v->numel) fail("checkpoint: Muon matrices of '{}' do not cover it", v->name);
        out.push_back(std::move(c));
    }
    // AdamW moments: rank r holds [cuts[r], cuts[r+1]) of the concatenated ranges, contiguously in its buffers.
    const size_t my_lo = plan.adamw_cuts[size_t(me)];
    for (const AdamWRange &r : g.adamw) {
        const auto shape = shape_or_flat(m.layout.find(r.name), r.numel);
        CheckpointTensor avg{kOptimizerFile, r.name + ".exp_avg", shape, r.numel, {}};
        CheckpointTensor sq{kOptimizerFile, r.name + ".exp_avg_sq", shape, r.numel, {}};
        for (int k = 0; k < plan.ranks; ++k) {
            const size_t a = std::max(plan.adamw_cuts[size_t(k)], r.state_offset);
            const size_t b = std::min(plan.adamw_cuts[size_t(k) + 1], r.state_offset + r.numel);
            if (a >= b) continue;
            add(avg, {a - r.state_offset, b - a, k, k == me ? o.exp_avg() + (a - my_lo) : nullptr});
            add(sq, {a - r.state_offset, b - a, k, k == me ? o.exp_avg_sq() + (a - my_lo) : nullptr});
        }
        out.push_back(std::move(avg));
        out.push_back(std::move(sq));
    }
    BalancingController &b = t.balancing();
    int64_t layer = 0;
    const size_t K = size_t(b.num_classes());
    for (const ParamView &v : m.layout.views) {
        if (!v.name.ends_with(".balancing_biases")) continue;
        if (layer >= b.num_layers() || v.numel != K) fail("checkpoint: unexpected balancing view '{}'", v.name);
        out.push_back({kOptimizerFile, v.name + ".exp_avg", v.shape, K, {{0, K, -1, b.exp_avg() + size_t(layer) * K}}});
        out.push_back(
            {kOptimizerFile, v.name + ".exp_avg_sq", v.shape, K, {{0, K, -1, b.exp_avg_sq() + size_t(layer) * K}}});
        ++layer;
    }
    if (layer != b.num_layers()) fail("checkpoint: found {} balancing views for {} MoE layers", layer, b.num_layers());
    return out;
}

json checkpoint_meta(Trainer &t) {
    return {{"format", kFormat},
            {"version", kVersion},
            {"step", t.step_count()},
            {"optimizer_step", t.optimizer().step_count()},
            {"balancing_step", t.balancing().step_count()},
            {"world_size", t.comm().size()}, // informational: the tensors are logical, any count resumes
            {"loader", t.has_loader() ? loader_state_to_json(t.loader_state()) : json(nullptr)}, // null: benchmarks
            {"step_guard", t.guard().to_json()},
            {"model_config", config_to_json(t.model().config)},
            {"train_config", train_config_to_json(t.config())}};
}

namespace {

constexpr size_t kDataAlign = kDirectAlign;
const std::map<std::string, std::string> kFileMetadata{{"format", "pt"}};

// The files of `tensors` in checkpoint order, each with its tensors in order.
std::vector<std::pair<std::string, std::vector<const CheckpointTensor *>>> by_file(
    const std::vector<CheckpointTensor> &tensors) {
    std::vector<std::pair<std::string, std::vector<const CheckpointTensor *>>> out;
    for (const char *file : {kModelFile, kOptimizerFile}) {
        out.push_back({file, {}});
        for (const CheckpointTensor &c : tensors)
            if (c.file == file) out.back().second.push_back(&c);
    }
    return out;
}

// `need_data`: the synchronous writer reads the tensors; the image layout only needs names and shapes.
std::vector<TensorToWrite> to_write(const std::vector<const CheckpointTensor *> &list, bool need_data) {
    std::vector<TensorToWrite> out;
    for (const CheckpointTensor *c : list) {
        if (need_data && !c->whole()) fail("checkpoint: tensor '{}' is sharded; write it through images", c->name);
        // safetensors_layout checks that tensors have data but never reads it: a placeholder for sharded ones.
        static const real placeholder = 0;
        out.push_back({c->name, DType::F32, c->shape, c->whole() ? c->whole() : &placeholder});
    }
    return out;
}

json tensor_entry(const CheckpointTensor &c, const std::string &file, const WrittenTensor &w) {
    return {{"name", c.name},         {"file", file},          {"dtype", "F32"},
            {"shape", c.shape},       {"offset", w.offset},    {"bytes", w.nbytes},
            {"xxh64", fmt::format("{:016x}", w.xxh64)}};
}

// The directory protocol shared by both writers: `write_files(tmp, files, entries)` writes the data files into
// the temporary directory and records them; then the manifest, fsync, rename into place, `latest`.
std::string commit(const std::string &run_dir, int64_t step, json meta,
                   const std::function<void(const fs::path &, json &, json &)> &write_files) {
    const fs::path root = fs::path(run_dir) / "checkpoints";
    const std::string name = fmt::format("step_{:08d}", step);
    const fs::path tmp = root / (name + ".tmp"), final_dir = root / name;
    std::error_code ec;
    fs::remove_all(tmp, ec); // left by a save that was killed
    fs::create_directories(tmp, ec);
    if (ec) fail("cannot create checkpoint directory '{}': {}", tmp.string(), ec.message());
    try {
        json files = json::object(), entries = json::array();
        write_files(tmp, files, entries);
        meta["files"] = files;
        meta["tensors"] = entries;
        // Last: marks the directory complete. No temp-file dance: the directory itself is renamed into place.
        write_file_synced(tmp / "manifest.json", meta.dump(1) + "\n");
        fsync_dir(tmp);

        // Move into place; an older checkpoint of the same step is replaced only once the new one is complete.
        const fs::path old = root / (name + ".old");
        fs::remove_all(old, ec);
        if (fs::exists(final_dir)) fs::rename(final_dir, old);
        fs::rename(tmp, final_dir, ec);
        if (ec) fail("cannot rename '{}' to '{}': {}", tmp.string(), final_dir.string(), ec.message());
        fs::remove_all(old, ec);
    } catch (...) {
        fs::remove_all(tmp, ec); // a full disk gets its space back; complete checkpoints are untouched
        throw;
    }
    // Then `latest`: a crash before its rename leaves it at the previous checkpoint (resume also scans the
    // directory). One directory fsync makes both renames durable.
    const fs::path latest_tmp = root / "latest.tmp";
    try {
        write_file_synced(latest_tmp, name + "\n");
        fs::rename(latest_tmp, root / "latest", ec);
        if (ec) fail("cannot update '{}': {}", (root / "latest").string(), ec.message());
    } catch (...) {
        fs::remove(latest_tmp, ec);
        throw;
    }
    fsync_dir(root);
    return final_dir.string();
}

} // namespace

std::string checkpoint_write(const std::string &run_dir, int64_t step, const std::vector<CheckpointTensor> &tensors,
                             json meta) {
    return commit(run_dir, step, std::move(meta), [&](const fs::path &tmp, json &files, json &entries) {
        for (const auto &[file, list] : by_file(tensors)) {
            std::vector<WrittenTensor> written;
            safetensors_write((tmp / file).string(), to_write(list, true), kFileMetadata, &written, kDataAlign);
            for (size_t i = 0; i < list.size(); ++i) entries.push_back(tensor_entry(*list[i], file, written[i]));
            files[file] = {{"bytes", fs::file_size(tmp / file)}};
            fault_pause();
        }
    });
}

std::vector<CheckpointImage> checkpoint_images(const std::vector<CheckpointTensor> &tensors) {
    std::vector<CheckpointImage> out;
    for (const auto &[file, list] : by_file(tensors)) {
        const SafetensorsLayout layout = safetensors_layout(file, to_write(list, false), kFileMetadata, kDataAlign);
        CheckpointImage img;
        img.file = file;
        img.bytes = AlignedBytes(layout.file_size);
        std::memcpy(img.bytes.data(), layout.prefix.data(), layout.prefix.size());
        for (const CheckpointTensor *c : list) img.tensors.push_back(*c);
        img.placement = layout.tensors;
        out.push_back(std::move(img));
    }
    return out;
}

void checkpoint_image_snapshot(CheckpointImage &img) {
    // Copy and hash in 1 MiB pieces: each piece is hashed while it is still in cache. Parts held by other ranks
    // are in the image already (checkpoint_gather_images) and are only hashed.
    constexpr size_t kPiece = size_t(1) << 20;
    XXH64_state_t *h = XXH64_createState();
    if (!h) fail("checkpoint: out of memory");
    std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> owner(h, XXH64_freeState);
    for (size_t i = 0; i < img.tensors.size(); ++i) {
        WrittenTensor &w = img.placement[i];
        uint8_t *dst = img.bytes.data() + w.offset;
        XXH64_reset(h, 0);
        for (const CheckpointPiece &p : img.tensors[i].pieces) {
            const auto *src = reinterpret_cast<const uint8_t *>(p.data);
            uint8_t *to = dst + p.at * sizeof(real);
            const size_t bytes = p.numel * sizeof(real);
            for (size_t at = 0; at < bytes; at += kPiece) {
                const size_t n = std::min(kPiece, bytes - at);
                if (src) std::memcpy(to + at, src + at, n);
                XXH64_update(h, to + at, n);
            }
        }
        w.xxh64 = XXH64_digest(h);
    }
}

void checkpoint_gather_images(Communicator &comm, std::vector<CheckpointImage> &images) {
    if (comm.size() == 1) return;
    if (!comm.is_root()) fail("checkpoint: rank {} cannot gather a checkpoint (rank 0 writes it)", comm.rank());
    for (CheckpointImage &img : images)
        for (size_t i = 0; i < img.tensors.size(); ++i)
            for (const CheckpointPiece &p : img.tensors[i].pieces)
                if (p.owner > 0)
                    comm.recv(reinterpret_cast<real *>(img.bytes.data() + img.placement[i].offset) + p.at, p.numel,
                              p.owner);
}

void checkpoint_send_shards(Communicator &comm, const std::vector<CheckpointTensor> &tensors) {
    if (comm.size() == 1 || comm.is_root()) return;
    for (const auto &[file, list] : by_file(tensors)) // the order of rank 0's images
        for (const CheckpointTensor *c : list)
            for (const CheckpointPiece &p : c->pieces)
                if (p.owner == comm.rank()) comm.send(p.data, p.numel, 0);
}

std::string checkpoint_write_images(const std::string &run_dir, int64_t step, const std::vector<CheckpointImage> &images,
                                    json meta) {
    return commit(run_dir, step, std::move(meta), [&](const fs::path &tmp, json &files, json &entries) {
        for (const CheckpointImage &img : images) {
            write_file_direct((tmp / img.file).string(), img.bytes);
            for (size_t i = 0; i < img.tensors.size(); ++i)
                entries.push_back(tensor_entry(img.tensors[i], img.file, img.placement[i]));
            files[img.file] = {{"bytes", img.bytes.size()}};
            fault_pause();
        }
    });
}

std::string checkpoint_save(Trainer &t, const std::string &run_dir) {
    Communicator &comm = t.comm();
    std::vector<CheckpointTensor> tensors = checkpoint_tensors(t);
    if (comm.size() == 1) return checkpoint_write(run_dir, t.step_count(), tensors, checkpoint_meta(t));
    if (!comm.is_root()) {
        checkpoint_send_shards(comm, tensors);
        return {};
    }
    // Sharded state: assembled in memory first (the images the asynchronous writer keeps for good).
    std::vector<CheckpointImage> images = checkpoint_images(tensors);
    checkpoint_gather_images(comm, images);
    for (CheckpointImage &img : images) checkpoint_image_snapshot(img);
    return checkpoint_write_images(run_dir, t.step_count(), images, checkpoint_meta(t));
}

void checkpoint_load(Trainer &t, const std::string &dir) {
    const json j = read_manifest(dir);
    const std::string label = (fs::path(dir) / "manifest.json").string();
    try {
        if (config_to_json(config_from_json(j.at("model_config"), label)) != config_to_json(t.model().config))
            fail("{}: the checkpoint's model config differs from this run's", label);
        if (t.has_loader() && j.at("loader").is_null())
            fail("{}: the checkpoint has no data loader position (written by a benchmark?)", label);
        const std::optional<LoaderState> loader =
            t.has_loader() ? std::optional(loader_state_from_json(j.at("loader"), label)) : std::nullopt;
        verify_and_read(dir, j, checkpoint_tensors(t));
        t.set_step_count(j.at("step").get<int64_t>());
        t.optimizer().set_step_count(j.at("optimizer_step").get<int64_t>());
        t.balancing().set_step_count(j.at("balancing_step").get<int64_t>());
        t.guard().restore(j.at("step_guard"), label);
        if (loader) t.restore_loader(*loader);
    } catch (const json::exception &e) {
        fail("{}: malformed manifest: {}", label, e.what());
    }
}

json checkpoint_manifest(const std::string &dir) { return read_manifest(dir); }

Model checkpoint_load_model(const std::string &dir) {
    const json j = read_manifest(dir);
    const std::string label = (fs::path(dir) / "manifest.json").string();
    if (!j.contains("model_config")) fail("{}: malformed manifest: no model_config", label);
    Model m = Model::create(config_from_json(j.at("model_config"), label));
    verify_and_read(dir, j, model_tensors(m));
    return m;
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
    // Newest first by step: `latest` is normally the first of them; a checkpoint completed just before a crash
    // that kept `latest` behind is newer still, and complete, so it goes first.
    candidates = checkpoint_list(run_dir);
    if (latest && std::find(candidates.begin(), candidates.end(), *latest) == candidates.end())
        candidates.insert(candidates.begin(), *latest);
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
