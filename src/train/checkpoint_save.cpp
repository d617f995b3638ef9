// Saving checkpoints (train/checkpoint.h): which rank stores what, the two writers (from the live state, or from
// the asynchronous writer's images), and the directory protocol that makes N ranks' files one checkpoint.
#include "core/atomic_file.h"
#include "core/error.h"
#include "train/checkpoint.h"
#include "train/checkpoint_format.h"

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
#include <sstream>
#include <thread>
#include <unistd.h>
#include <xxhash.h>

namespace zaya {

namespace fs = std::filesystem;
namespace cf = checkpoint_format;
using nlohmann::json;

namespace {

constexpr size_t kDataAlign = kDirectAlign;
const std::map<std::string, std::string> kFileMetadata{{"format", "pt"}};
// How long rank 0 waits for the other ranks' reports while their files in the temporary directory stop growing:
// it ends a save whose rank died or could not even report its failure (a full disk), rather than waiting for ever.
// Longer than an fsync of a large part takes; shorter than the job's default watchdog (600 s), which the ranks
// waiting for the next save's start would otherwise meet.
constexpr double kReportStallS = 300;

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

// Test hooks (fault-tolerance tests). ZAYA_FAULT_SLOW_CKPT_MS=N sleeps N ms between the files of a checkpoint,
// widening the window in which a kill lands in the middle of a save.
void fault_pause() {
    if (const char *v = std::getenv("ZAYA_FAULT_SLOW_CKPT_MS"))
        std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(v)));
}
// ZAYA_FAULT_CKPT_PART=5,10 makes one rank's part of the checkpoints of steps 5 and 10 fail, as a full disk
// would: rank ZAYA_FAULT_RANK's, by default the last rank's.
void fault_part(int64_t step, int rank, int ranks) {
    const char *steps = std::getenv("ZAYA_FAULT_CKPT_PART");
    if (!steps) return;
    const char *r = std::getenv("ZAYA_FAULT_RANK");
    if ((r ? std::atoi(r) : ranks - 1) != rank) return;
    std::istringstream in(steps);
    for (std::string s; std::getline(in, s, ',');)
        if (!s.empty() && std::atoll(s.c_str()) == step) fail("injected fault (ZAYA_FAULT_CKPT_PART) at step {}", step);
}

fs::path checkpoints_dir(const std::string &run_dir) { return fs::path(run_dir) / "checkpoints"; }
std::string step_name(int64_t step) { return fmt::format("step_{:08d}", step); }
fs::path temp_dir(const std::string &run_dir, int64_t step) {
    return checkpoints_dir(run_dir) / (step_name(step) + ".tmp");
}
fs::path report_path(const fs::path &tmp, int rank) { return tmp / fmt::format("rank_{:05d}.json", rank); }

// One rank's part as written: a record per chunk (tensor name, file, element range, byte offset, size, xxh64)
// and its files' sizes; or what went wrong.
struct Part {
    json chunks = json::array();
    json files = json::object();
    std::string error;
};

void record(Part &part, const CheckpointTensor &t, const CheckpointChunk &c, const WrittenTensor &w) {
    part.chunks.push_back({{"name", t.name},
                           {"file", c.file},
                           {"at", c.at},
                           {"numel", c.numel},
                           {"offset", w.offset},
                           {"bytes", w.nbytes},
                           {"xxh64", fmt::format("{:016x}", w.xxh64)}});
}

// Rank `rank`'s chunks, by file (in checkpoint order: the model's file first).
std::vector<std::pair<std::string, std::vector<const CheckpointChunk *>>> files_of(
    const std::vector<CheckpointChunk> &chunks, int rank) {
    std::vector<std::pair<std::string, std::vector<const CheckpointChunk *>>> out;
    for (const CheckpointChunk &c : chunks) {
        if (c.writer != rank) continue;
        if (out.empty() || out.back().first != c.file) {
            for (const auto &f : out)
                if (f.first == c.file) fail("checkpoint: the chunks of '{}' are not consecutive", c.file);
            out.push_back({c.file, {}});
        }
        out.back().second.push_back(&c);
    }
    return out;
}

// `need_data`: writing from the live state reads the chunks; an image's layout only needs names and shapes.
std::vector<TensorToWrite> to_write(const std::vector<const CheckpointChunk *> &list, bool need_data) {
    static const real placeholder = 0; // safetensors_layout checks that there is data but never reads it
    std::vector<TensorToWrite> out;
    for (const CheckpointChunk *c : list) {
        if (need_data && !c->data) fail("checkpoint: rank {} does not hold '{}', which it writes", c->writer, c->entry);
        out.push_back({c->entry, DType::F32, c->shape, c->data ? c->data : &placeholder});
    }
    return out;
}

// A part that failed: its files go (a full disk gets the space back for the reports), the error stays.
void drop_files(Part &part, const fs::path &tmp, const std::vector<std::string> &files, const std::string &error) {
    std::error_code ec;
    for (const std::string &f : files) fs::remove(tmp / f, ec);
    part = Part{};
    part.error = error;
}

Part write_direct(const fs::path &tmp, const std::vector<CheckpointTensor> &tensors, int64_t step, int rank,
                  int ranks) {
    Part part;
    std::vector<std::string> files;
    try {
        fault_part(step, rank, ranks);
        const std::vector<CheckpointChunk> chunks = checkpoint_chunks(tensors, ranks);
        for (const auto &[file, list] : files_of(chunks, rank)) {
            files.push_back(file);
            std::vector<WrittenTensor> written;
            safetensors_write((tmp / file).string(), to_write(list, true), kFileMetadata, &written, kDataAlign);
            for (size_t i = 0; i < list.size(); ++i) record(part, tensors[list[i]->tensor], *list[i], written[i]);
            part.files[file] = {{"bytes", fs::file_size(tmp / file)}};
            fault_pause();
        }
    } catch (const std::exception &e) {
        drop_files(part, tmp, files, e.what());
    }
    return part;
}

Part write_images(const fs::path &tmp, const std::vector<CheckpointTensor> &tensors,
                  const std::vector<CheckpointImage> &images, int64_t step, int rank, int ranks) {
    Part part;
    std::vector<std::string> files;
    try {
        fault_part(step, rank, ranks);
        for (const CheckpointImage &img : images) {
            files.push_back(img.file);
            write_file_direct((tmp / img.file).string(), img.bytes);
            for (size_t i = 0; i < img.chunks.size(); ++i)
                record(part, tensors[img.chunks[i].tensor], img.chunks[i], img.placement[i]);
            part.files[img.file] = {{"bytes", img.bytes.size()}};
            fault_pause();
        }
    } catch (const std::exception &e) {
        drop_files(part, tmp, files, e.what());
    }
    return part;
}

// A rank other than 0 hands its part to rank 0: a report in the temporary directory, renamed into place whole.
void report_part(const fs::path &tmp, int rank, const Part &part) {
    json j{{"rank", rank}};
    if (part.error.empty()) {
        j["chunks"] = part.chunks;
        j["files"] = part.files;
    } else {
        j["error"] = part.error;
    }
    const fs::path to = report_path(tmp, rank), staged = to.string() + ".tmp";
    write_file_synced(staged, j.dump() + "\n");
    std::error_code ec;
    fs::rename(staged, to, ec);
    if (ec) fail("cannot rename '{}' to '{}': {}", staged.string(), to.string(), ec.message());
}

// The bytes of the files in a directory: how far the ranks writing into it have got.
uint64_t bytes_in(const fs::path &dir) {
    uint64_t n = 0;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator(dir, ec)) {
        const uintmax_t size = e.file_size(ec);
        if (!ec) n += size;
    }
    return n;
}

// Rank 0: the other ranks' reports, in rank order, each removed once read.
std::vector<Part> wait_for_reports(const fs::path &tmp, int ranks) {
    std::vector<Part> parts(static_cast<size_t>(ranks));
    std::vector<bool> have(size_t(ranks), false);
    have[0] = true;
    auto progress = std::chrono::steady_clock::now();
    uint64_t written = bytes_in(tmp);
    auto sleep = std::chrono::microseconds(500);
    for (;;) {
        std::vector<int> missing;
        for (int r = 1; r < ranks; ++r) {
            if (have[size_t(r)]) continue;
            const fs::path p = report_path(tmp, r);
            std::error_code ec;
            if (!fs::exists(p, ec)) {
                missing.push_back(r);
                continue;
            }
            const json j = json::parse(read_file_bytes(p.string()), nullptr, false);
            Part &part = parts[size_t(r)];
            if (j.is_discarded() || !j.is_object() || j.value("rank", -1) != r)
                fail("{}: malformed report", p.string());
            if (j.contains("error")) {
                part.error = j.at("error").is_string() ? j.at("error").get<std::string>() : j.at("error").dump();
            } else if (j.contains("chunks") && j.at("chunks").is_array() && j.contains("files") &&
                       j.at("files").is_object()) {
                part.chunks = j.at("chunks");
                part.files = j.at("files");
            } else {
                fail("{}: malformed report", p.string());
            }
            fs::remove(p, ec);
            have[size_t(r)] = true;
        }
        if (missing.empty()) return parts;
        const auto now = std::chrono::steady_clock::now();
        if (const uint64_t w = bytes_in(tmp); w != written) written = w, progress = now;
        if (now - progress > std::chrono::duration<double>(kReportStallS)) {
            std::string list;
            for (int r : missing) list += fmt::format("{}{}", list.empty() ? "" : ", ", r);
            fail("checkpoint: rank{} {} did not report {} part, and nothing was written for {:g} s",
                 missing.size() > 1 ? "s" : "", list, missing.size() > 1 ? "their" : "its", kReportStallS);
        }
        std::this_thread::sleep_for(sleep);
        sleep = std::min(sleep * 2, std::chrono::microseconds(20000));
    }
}

// The manifest's tensor table: each tensor's chunks from every rank's records, in element order, covering it.
json tensor_table(const std::vector<CheckpointTensor> &tensors, const std::vector<Part> &parts) {
    std::map<std::string, std::vector<const json *>> by_name;
    for (const Part &p : parts)
        for (const json &c : p.chunks) by_name[c.at("name").get<std::string>()].push_back(&c);
    json table = json::array();
    for (const CheckpointTensor &t : tensors) {
        std::vector<const json *> &list = by_name[t.name];
        std::sort(list.begin(), list.end(),
                  [](const json *a, const json *b) { return a->at("at").get<size_t>() < b->at("at").get<size_t>(); });
        json chunks = json::array();
        size_t next = 0;
        for (const json *c : list) {
            if (c->at("at").get<size_t>() != next) break;
            next += c->at("numel").get<size_t>();
            json entry = *c;
            entry.erase("name");
            chunks.push_back(std::move(entry));
        }
        if (next != t.numel || chunks.size() != list.size())
            fail("checkpoint: the ranks' chunks of '{}' do not cover its {} elements exactly", t.name, t.numel);
        table.push_back({{"name", t.name}, {"dtype", "F32"}, {"shape", t.shape}, {"chunks", std::move(chunks)}});
    }
    return table;
}

// Rank 0, every part written: the manifest last, then the directory renamed into place and `latest` updated.
std::string commit(const std::string &run_dir, int64_t step, const std::vector<CheckpointTensor> &tensors,
                   const std::vector<Part> &parts, json meta) {
    const fs::path root = checkpoints_dir(run_dir), tmp = temp_dir(run_dir, step);
    const std::string name = step_name(step);
    const fs::path final_dir = root / name;
    json files = json::object();
    for (const Part &p : parts) files.update(p.files);
    meta["files"] = std::move(files);
    meta["tensors"] = tensor_table(tensors, parts);
    // Last: marks the directory complete. No temp-file dance: the directory itself is renamed into place.
    write_file_synced(tmp / "manifest.json", meta.dump(1) + "\n");
    fsync_dir(tmp);

    // Move into place; an older checkpoint of the same step is replaced only once the new one is complete.
    std::error_code ec;
    const fs::path old = root / (name + ".old");
    fs::remove_all(old, ec);
    if (fs::exists(final_dir)) fs::rename(final_dir, old);
    fs::rename(tmp, final_dir, ec);
    if (ec) fail("cannot rename '{}' to '{}': {}", tmp.string(), final_dir.string(), ec.message());
    fs::remove_all(old, ec);

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

// What every rank does once its part is written (`own`): see checkpoint_write_images.
uint64_t file_bytes(const json &files) {
    uint64_t n = 0;
    for (const auto &[name, info] : files.items()) n += info.at("bytes").get<uint64_t>();
    return n;
}

CheckpointSaved finish(const std::string &run_dir, int64_t step, int rank, int ranks,
                       const std::vector<CheckpointTensor> &tensors, Part own, json meta, const std::string &begun) {
    const fs::path tmp = temp_dir(run_dir, step);
    if (rank != 0) {
        try {
            report_part(tmp, rank, own);
        } catch (const std::exception &e) {
            if (own.error.empty()) own.error = e.what();
        }
        if (!own.error.empty()) fail("{}", own.error);
        return {{}, file_bytes(own.files)};
    }
    if (!begun.empty()) fail("{}", begun); // no temporary directory: the other ranks' writes failed too
    std::error_code ec;
    try {
        std::vector<Part> parts = wait_for_reports(tmp, ranks); // even when this part failed: they write into tmp
        parts[0] = std::move(own);
        std::string errors;
        for (int r = 0; r < ranks; ++r)
            if (const std::string &e = parts[size_t(r)].error; !e.empty())
                errors += fmt::format("{}{}{}", errors.empty() ? "" : "; ",
                                      ranks > 1 ? fmt::format("rank {}: ", r) : "", e);
        if (!errors.empty()) fail("{}", errors);
        uint64_t bytes = 0;
        for (const Part &p : parts) bytes += file_bytes(p.files);
        return {commit(run_dir, step, tensors, parts, std::move(meta)), bytes};
    } catch (...) {
        fs::remove_all(tmp, ec); // a full disk gets its space back; complete checkpoints are untouched
        throw;
    }
}

} // namespace

std::vector<CheckpointChunk> checkpoint_chunks(const std::vector<CheckpointTensor> &tensors, int ranks) {
    if (ranks < 1) fail("checkpoint: {} ranks", ranks);
    std::vector<uint64_t> bytes(size_t(ranks), 0); // each rank's share so far: its pieces first
    for (const CheckpointTensor &t : tensors)
        for (const CheckpointPiece &p : t.pieces) {
            if (p.owner >= ranks) fail("checkpoint: '{}' has a piece of rank {} of {}", t.name, p.owner, ranks);
            if (p.owner >= 0) bytes[size_t(p.owner)] += p.numel * sizeof(real);
        }
    std::vector<CheckpointChunk> out;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const CheckpointTensor &t = tensors[i];
        for (const CheckpointPiece &p : t.pieces) {
            int writer = p.owner;
            if (writer < 0) { // every rank holds it: the least loaded writes it
                writer = int(std::min_element(bytes.begin(), bytes.end()) - bytes.begin());
                bytes[size_t(writer)] += p.numel * sizeof(real);
            }
            CheckpointChunk c;
            c.tensor = i;
            c.at = p.at;
            c.numel = p.numel;
            c.writer = writer;
            c.file = cf::file_of(t.group, writer, ranks);
            c.entry = cf::chunk_entry(t.name, p.at, p.numel, t.numel);
            c.shape = c.entry == t.name ? t.shape : std::vector<int64_t>{int64_t(p.numel)};
            c.data = p.data;
            out.push_back(std::move(c));
        }
    }
    // One file per group and rank, its chunks consecutive: model chunks first, then optimizer chunks.
    std::stable_sort(out.begin(), out.end(), [&](const CheckpointChunk &a, const CheckpointChunk &b) {
        return (tensors[a.tensor].group != cf::kModel) < (tensors[b.tensor].group != cf::kModel);
    });
    return out;
}

std::string checkpoint_begin(Communicator &comm, const std::string &run_dir, int64_t step) {
    std::string error;
    if (comm.is_root()) {
        const fs::path tmp = temp_dir(run_dir, step);
        std::error_code ec;
        fs::remove_all(tmp, ec); // left by a save that was killed
        fs::create_directories(tmp, ec);
        if (ec) error = fmt::format("cannot create checkpoint directory '{}': {}", tmp.string(), ec.message());
    }
    if (comm.size() > 1) comm.barrier(); // no rank writes into the directory before it is cleared
    return error;
}

CheckpointSaved checkpoint_save_tensors(Communicator &comm, const std::string &run_dir, int64_t step,
                                        const std::vector<CheckpointTensor> &tensors, json meta) {
    const std::string begun = checkpoint_begin(comm, run_dir, step);
    Part own;
    if (begun.empty()) own = write_direct(temp_dir(run_dir, step), tensors, step, comm.rank(), comm.size());
    return finish(run_dir, step, comm.rank(), comm.size(), tensors, std::move(own), std::move(meta), begun);
}

std::vector<CheckpointImage> checkpoint_images(const std::vector<CheckpointTensor> &tensors, int rank, int ranks) {
    const std::vector<CheckpointChunk> chunks = checkpoint_chunks(tensors, ranks);
    std::vector<CheckpointImage> out;
    for (const auto &[file, list] : files_of(chunks, rank)) {
        const SafetensorsLayout layout = safetensors_layout(file, to_write(list, false), kFileMetadata, kDataAlign);
        CheckpointImage img;
        img.file = file;
        img.bytes = AlignedBytes(layout.file_size);
        std::memcpy(img.bytes.data(), layout.prefix.data(), layout.prefix.size());
        for (const CheckpointChunk *c : list) img.chunks.push_back(*c);
        img.placement = layout.tensors;
        out.push_back(std::move(img));
    }
    return out;
}

void checkpoint_image_snapshot(CheckpointImage &img) {
    // Copy and hash in 1 MiB pieces: each piece is hashed while it is still in cache.
    constexpr size_t kPiece = size_t(1) << 20;
    XXH64_state_t *h = XXH64_createState();
    if (!h) fail("checkpoint: out of memory");
    std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> owner(h, XXH64_freeState);
    for (size_t i = 0; i < img.chunks.size(); ++i) {
        const CheckpointChunk &c = img.chunks[i];
        if (!c.data) fail("checkpoint: rank {} does not hold '{}', which it writes", c.writer, c.entry);
        WrittenTensor &w = img.placement[i];
        uint8_t *to = img.bytes.data() + w.offset;
        const auto *src = reinterpret_cast<const uint8_t *>(c.data);
        const size_t bytes = c.numel * sizeof(real);
        XXH64_reset(h, 0);
        for (size_t at = 0; at < bytes; at += kPiece) {
            const size_t n = std::min(kPiece, bytes - at);
            std::memcpy(to + at, src + at, n);
            XXH64_update(h, to + at, n);
        }
        w.xxh64 = XXH64_digest(h);
    }
}

CheckpointSaved checkpoint_write_images(const std::string &run_dir, int64_t step, int rank, int ranks,
                                        const std::vector<CheckpointTensor> &tensors,
                                        const std::vector<CheckpointImage> &images, json meta,
                                        const std::string &begun) {
    Part own;
    if (begun.empty()) own = write_images(temp_dir(run_dir, step), tensors, images, step, rank, ranks);
    return finish(run_dir, step, rank, ranks, tensors, std::move(own), std::move(meta), begun);
}

CheckpointSaved checkpoint_save(Trainer &t, const std::string &run_dir) {
    return checkpoint_save_tensors(t.comm(), run_dir, t.step_count(), checkpoint_tensors(t), checkpoint_meta(t));
}

} // namespace zaya
