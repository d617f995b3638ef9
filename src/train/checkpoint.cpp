#include "train/checkpoint.h"

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/config_json.h"
#include "io/safetensors.h"
#include "train/checkpoint_format.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <map>
#include <memory>
#include <xxhash.h>

namespace zaya {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

namespace cf = checkpoint_format;

std::vector<int64_t> shape_or_flat(const ParamView *v, size_t numel) {
    if (v && v->numel == numel) return v->shape;
    return {int64_t(numel)};
}

// A version 2 manifest's tensor entry (one whole tensor: file, offset, bytes, xxh64) as version 3's one chunk.
void upgrade_v2_entry(json &e) {
    size_t numel = 1;
    for (const json &d : e.at("shape")) numel *= d.get<size_t>();
    e["chunks"] = json::array({{{"file", e.at("file")},
                                {"at", 0},
                                {"numel", numel},
                                {"offset", e.at("offset")},
                                {"bytes", e.at("bytes")},
                                {"xxh64", e.at("xxh64")}}});
    for (const char *k : {"file", "offset", "bytes", "xxh64"}) e.erase(k);
}

json read_manifest(const fs::path &dir) {
    const fs::path p = dir / "manifest.json";
    if (!fs::exists(p)) fail("{}: not a complete checkpoint (no manifest.json)", dir.string());
    json j = json::parse(read_file_bytes(p.string()), nullptr, false);
    if (j.is_discarded() || !j.is_object()) fail("{}: not valid JSON", p.string());
    if (j.value("format", "") != cf::kFormat) fail("{}: not a zaya checkpoint manifest", p.string());
    const int version = j.value("version", 0);
    if (version < cf::kOldestRead || version > cf::kVersion)
        fail("{}: checkpoint format version {} (this zaya reads versions {} to {})", p.string(), version,
             cf::kOldestRead, cf::kVersion);
    if (version == 2) {
        try {
            for (json &e : j.at("tensors")) upgrade_v2_entry(e);
        } catch (const json::exception &e) {
            fail("{}: malformed manifest: {}", p.string(), e.what());
        }
    }
    return j;
}

// Checks the files' sizes and every chunk of every wanted tensor (manifest entry, header entry, checksum), then
// copies the parts this process holds into their destinations. Nothing is written unless everything checks out.
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

        struct Found { // a verified chunk: elements [at, at + numel) of a wanted tensor, in a mapped file
            size_t at, numel;
            const uint8_t *data;
        };
        std::vector<std::vector<Found>> found(wanted.size());
        for (size_t i = 0; i < wanted.size(); ++i) {
            const CheckpointTensor &w = wanted[i];
            auto it = entries.find(w.name);
            if (it == entries.end()) fail("{}: the manifest has no tensor '{}'", label, w.name);
            const json &e = *it->second;
            if (e.at("dtype").get<std::string>() != "F32" || e.at("shape").get<std::vector<int64_t>>() != w.shape)
                fail("{}: tensor '{}' is {} {}, this run needs F32 {}", label, w.name, e.at("dtype").get<std::string>(),
                     e.at("shape").dump(), json(w.shape).dump());
            size_t next = 0; // the chunks cover the tensor in element order
            for (const json &c : e.at("chunks")) {
                const size_t at = c.at("at").get<size_t>(), numel = c.at("numel").get<size_t>();
                if (at != next || numel == 0 || numel > w.numel - at)
                    fail("{}: the chunks of tensor '{}' do not cover its {} elements in order", label, w.name, w.numel);
                next += numel;
                const std::string file = c.at("file").get<std::string>();
                const std::string entry = cf::chunk_entry(w.name, at, numel, w.numel);
                const std::vector<int64_t> shape = entry == w.name ? w.shape : std::vector<int64_t>{int64_t(numel)};
                auto f = files.find(file);
                if (f == files.end())
                    fail("{}: tensor '{}' names file '{}', which the manifest does not list", label, w.name, file);
                const TensorInfo *t = f->second->find(entry);
                if (!t) fail("{}: tensor '{}' is missing from the file", f->second->path(), entry);
                if (t->dtype != DType::F32 || t->shape != shape)
                    fail("{}: tensor '{}' is {} {} in the file, the manifest says F32 {}", f->second->path(), entry,
                         dtype_name(t->dtype), t->shape_str(), json(shape).dump());
                if (fmt::format("{:016x}", XXH64(t->data, t->nbytes, 0)) != c.at("xxh64").get<std::string>())
                    fail("{}: tensor '{}' does not match its checksum (corrupted)", f->second->path(), entry);
                found[i].push_back({at, numel, t->data});
            }
            if (next != w.numel)
                fail("{}: the chunks of tensor '{}' do not cover its {} elements in order", label, w.name, w.numel);
        }
        // F32, checked above: the parts this process holds are byte copies of where they meet the chunks.
        for (size_t i = 0; i < wanted.size(); ++i)
            for (const CheckpointPiece &p : wanted[i].pieces) {
                if (!p.data) continue;
                for (const Found &c : found[i]) {
                    const size_t lo = std::max(p.at, c.at), hi = std::min(p.at + p.numel, c.at + c.numel);
                    if (lo < hi)
                        std::memcpy(p.data + (lo - p.at), c.data + (lo - c.at) * sizeof(real),
                                    (hi - lo) * sizeof(real));
                }
            }
    } catch (const json::exception &e) {
        fail("{}: malformed manifest: {}", label, e.what());
    }
}

std::vector<CheckpointTensor> model_tensors(Model &m) {
    std::vector<CheckpointTensor> out;
    for (const ParamView &v : m.layout.views)
        out.push_back({cf::kModel, v.name, v.shape, v.numel, {{0, v.numel, -1, m.params.data() + v.offset}}});
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
        CheckpointTensor c{cf::kOptimizer, v->name + ".muon_momentum", v->shape, v->numel, {}};
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
        CheckpointTensor avg{cf::kOptimizer, r.name + ".exp_avg", shape, r.numel, {}};
        CheckpointTensor sq{cf::kOptimizer, r.name + ".exp_avg_sq", shape, r.numel, {}};
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
        out.push_back({cf::kOptimizer, v.name + ".exp_avg", v.shape, K, {{0, K, -1, b.exp_avg() + size_t(layer) * K}}});
        out.push_back(
            {cf::kOptimizer, v.name + ".exp_avg_sq", v.shape, K, {{0, K, -1, b.exp_avg_sq() + size_t(layer) * K}}});
        ++layer;
    }
    if (layer != b.num_layers()) fail("checkpoint: found {} balancing views for {} MoE layers", layer, b.num_layers());
    return out;
}

json checkpoint_meta(Trainer &t) {
    return {{"format", cf::kFormat},
            {"version", cf::kVersion},
            {"step", t.step_count()},
            {"optimizer_step", t.optimizer().step_count()},
            {"balancing_step", t.balancing().step_count()},
            {"world_size", t.comm().size()}, // informational: the tensors are logical, any count resumes
            {"loader", t.has_loader() ? loader_state_to_json(t.loader_state()) : json(nullptr)}, // null: benchmarks
            {"step_guard", t.guard().to_json()},
            {"model_config", config_to_json(t.model().config)},
            {"train_config", train_config_to_json(t.config())}};
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

void checkpoint_read_tensors(const std::string &dir, const std::vector<CheckpointTensor> &wanted) {
    verify_and_read(dir, read_manifest(dir), wanted);
}

ZayaConfig checkpoint_model_config(const std::string &dir, const json &manifest) {
    const std::string label = (fs::path(dir) / "manifest.json").string();
    if (!manifest.contains("model_config")) fail("{}: malformed manifest: no model_config", label);
    return config_from_json(manifest.at("model_config"), label);
}

Model checkpoint_load_model(const std::string &dir) {
    const json j = read_manifest(dir);
    Model m = Model::create(checkpoint_model_config(dir, j));
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
