#include "io/safetensors.h"

#include "core/error.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <xxhash.h>
#include <unistd.h>

namespace zaya {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The file format is little-endian and we memcpy raw elements.
static_assert(std::endian::native == std::endian::little, "zaya assumes a little-endian host");

namespace {

constexpr uint64_t kMaxHeader = 100ull << 20; // real headers are a few MB at most
constexpr int kMaxDepth = 16;                 // safetensors needs 3 levels; anything deeper is junk
constexpr size_t kChunk = size_t(1) << 20;    // elements converted per step when reading/writing

std::string errno_str() { return std::strerror(errno); }

// Parses JSON text, rejecting duplicate object keys anywhere (nlohmann would silently keep the last)
// and absurd nesting. Errors are prefixed with `label`.
json parse_json_strict(const char *first, const char *last, const std::string &label) {
    std::vector<std::set<std::string>> keys; // one set per open object
    std::string dup;
    bool too_deep = false;
    auto cb = [&](int depth, json::parse_event_t ev, json &parsed) {
        switch (ev) {
        case json::parse_event_t::object_start:
            if (depth > kMaxDepth) too_deep = true;
            keys.emplace_back();
            break;
        case json::parse_event_t::object_end:
            if (!keys.empty()) keys.pop_back();
            break;
        case json::parse_event_t::array_start:
            if (depth > kMaxDepth) too_deep = true;
            break;
        case json::parse_event_t::key:
            if (!keys.empty() && parsed.is_string() && !keys.back().insert(parsed.get<std::string>()).second &&
                dup.empty())
                dup = parsed.get<std::string>();
            break;
        default: break;
        }
        return true; // never discard: discarding skips object_end callbacks and would desync `keys`
    };
    json j;
    try {
        j = json::parse(first, last, cb);
    } catch (const json::exception &e) {
        fail("{}: invalid JSON: {}", label, e.what());
    }
    if (too_deep) fail("{}: JSON nested deeper than {} levels", label, kMaxDepth);
    if (!dup.empty()) fail("{}: duplicate key '{}' in JSON", label, dup);
    return j;
}

// A JSON value as a non-negative integer; `what` names the field in the error.
uint64_t json_u64(const json &j, const std::string &what) {
    if (j.is_number_unsigned()) return j.get<uint64_t>();
    if (j.is_number_integer()) fail("{} is negative ({})", what, j.get<int64_t>());
    if (j.is_number_float()) fail("{} is not an integer (got floating-point {})", what, j.get<double>());
    fail("{} must be an integer, got {}", what, j.type_name());
}

std::string shape_to_str(const std::vector<int64_t> &shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

} // namespace

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string TensorInfo::shape_str() const { return shape_to_str(shape); }

SafetensorsHeader safetensors_parse(const uint8_t *bytes, size_t size, const std::string &label) {
    if (bytes == nullptr || size < 8) fail("{}: file is {} bytes, too short for a safetensors header", label, size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; --i) hlen = hlen << 8 | bytes[i];
    if (hlen == 0) fail("{}: header length is 0", label);
    if (hlen > kMaxHeader) fail("{}: header length {} exceeds the {} byte limit", label, hlen, kMaxHeader);
    if (hlen > size - 8) fail("{}: header length {} exceeds the {} bytes after the length field", label, hlen, size - 8);
    const uint8_t *data = bytes + 8 + hlen;
    const uint64_t data_size = size - 8 - hlen;

    const char *htext = reinterpret_cast<const char *>(bytes + 8);
    json root = parse_json_strict(htext, htext + hlen, label + ": header");
    if (!root.is_object()) fail("{}: header must be a JSON object, got {}", label, root.type_name());

    SafetensorsHeader h;
    struct Span { uint64_t begin, end; };
    std::vector<Span> spans;
    for (auto &[name, entry] : root.items()) {
        if (name == "__metadata__") {
            if (entry.is_null()) continue; // the reference implementation accepts null
            if (!entry.is_object()) fail("{}: __metadata__ must be an object, got {}", label, entry.type_name());
            for (auto &[k, v] : entry.items()) {
                if (!v.is_string())
                    fail("{}: __metadata__ key '{}' must be a string, got {}", label, k, v.type_name());
                h.metadata[k] = v.get<std::string>();
            }
            continue;
        }
        const std::string where = fmt::format("{}: tensor '{}'", label, name);
        if (!entry.is_object()) fail("{} must be an object, got {}", where, entry.type_name());

        TensorInfo t;
        t.name = name;
        t.file = label;
        auto dt = entry.find("dtype");
        if (dt == entry.end()) fail("{}: missing dtype", where);
        if (!dt->is_string()) fail("{}: dtype must be a string, got {}", where, dt->type_name());
        const std::string dname = dt->get<std::string>();
        if (!dtype_parse(dname, t.dtype)) fail("{}: unsupported dtype '{}' (supported: F32, BF16, F16)", where, dname);

        auto sh = entry.find("shape");
        if (sh == entry.end()) fail("{}: missing shape", where);
        if (!sh->is_array()) fail("{}: shape must be an array, got {}", where, sh->type_name());
        uint64_t numel = 1;
        bool overflow = false;
        for (size_t i = 0; i < sh->size(); ++i) {
            uint64_t d;
            try {
                d = json_u64((*sh)[i], fmt::format("shape[{}]", i));
            } catch (const Error &e) {
                fail("{}: {}", where, e.what());
            }
            if (d > uint64_t(INT64_MAX)) fail("{}: shape[{}] = {} is too large", where, i, d);
            t.shape.push_back(int64_t(d));
            overflow = overflow || __builtin_mul_overflow(numel, d, &numel);
        }
        uint64_t need = 0;
        if (overflow || numel > uint64_t(INT64_MAX) || __builtin_mul_overflow(numel, dtype_size(t.dtype), &need))
            fail("{}: shape {} has too many elements", where, t.shape_str());

        auto off = entry.find("data_offsets");
        if (off == entry.end()) fail("{}: missing data_offsets", where);
        if (!off->is_array() || off->size() != 2) fail("{}: data_offsets must be an array [begin, end]", where);
        uint64_t begin, end;
        try {
            begin = json_u64((*off)[0], "data_offsets[0]");
            end = json_u64((*off)[1], "data_offsets[1]");
        } catch (const Error &e) {
            fail("{}: {}", where, e.what());
        }
        if (begin > end) fail("{}: data_offsets [{}, {}] has begin > end", where, begin, end);
        if (end > data_size)
            fail("{}: data_offsets [{}, {}] run past the {}-byte data block", where, begin, end, data_size);
        if (end - begin != need)
            fail("{}: data_offsets [{}, {}] hold {} bytes but shape {} of {} needs {}", where, begin, end, end - begin,
                 t.shape_str(), dname, need);
        t.data = data + begin;
        t.nbytes = size_t(need);
        h.tensors.push_back(std::move(t));
        spans.push_back({begin, end});
    }

    // Sort by offset (name breaks ties) and check that no two non-empty byte ranges intersect.
    std::vector<size_t> order(h.tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        if (spans[a].begin != spans[b].begin) return spans[a].begin < spans[b].begin;
        if (spans[a].end != spans[b].end) return spans[a].end < spans[b].end;
        return h.tensors[a].name < h.tensors[b].name;
    });
    const size_t none = SIZE_MAX;
    size_t reach = none; // the non-empty tensor reaching furthest so far
    for (size_t i : order) {
        if (spans[i].begin == spans[i].end) continue;
        if (reach != none && spans[i].begin < spans[reach].end)
            fail("{}: tensor '{}': data_offsets [{}, {}] overlap tensor '{}' [{}, {}]", label, h.tensors[i].name,
                 spans[i].begin, spans[i].end, h.tensors[reach].name, spans[reach].begin, spans[reach].end);
        if (reach == none || spans[i].end > spans[reach].end) reach = i;
    }
    std::vector<TensorInfo> sorted;
    sorted.reserve(order.size());
    for (size_t i : order) sorted.push_back(std::move(h.tensors[i]));
    h.tensors = std::move(sorted);
    return h;
}

// ---- SafetensorsFile ----

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string &path) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path, errno_str());
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        std::string err = errno_str();
        ::close(fd);
        fail("{}: cannot stat: {}", path, err);
    }
    if (S_ISDIR(st.st_mode)) { ::close(fd); fail("{}: is a directory, expected a .safetensors file", path); }
    if (!S_ISREG(st.st_mode)) { ::close(fd); fail("{}: not a regular file", path); }
    if (st.st_size == 0) { ::close(fd); fail("{}: empty file", path); }
    const size_t n = size_t(st.st_size);
    void *m = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE, fd, 0);
    std::string err = errno_str();
    ::close(fd); // the mapping keeps the file alive
    if (m == MAP_FAILED) fail("{}: mmap of {} bytes failed: {}", path, n, err);
    f->map_ = m;
    f->map_size_ = n; // from here the destructor unmaps, also if parsing throws
    f->header_ = safetensors_parse(static_cast<const uint8_t *>(m), n, path);
    return f;
}

SafetensorsFile::~SafetensorsFile() {
    if (map_ != nullptr) ::munmap(map_, map_size_);
}

const TensorInfo *SafetensorsFile::find(std::string_view name) const {
    for (const auto &t : header_.tensors)
        if (t.name == name) return &t;
    return nullptr;
}

// ---- SafetensorSet ----

SafetensorSet SafetensorSet::open(const std::string &dir_or_file) {
    SafetensorSet set;
    struct stat st {};
    if (::stat(dir_or_file.c_str(), &st) != 0) fail("{}: cannot open: {}", dir_or_file, errno_str());
    const fs::path p(dir_or_file);
    const bool is_index = S_ISREG(st.st_mode) && p.filename().string().ends_with(".index.json");
    if (S_ISREG(st.st_mode) && !is_index) {
        set.files_.push_back(SafetensorsFile::open(dir_or_file));
        for (const auto &t : set.files_.back()->tensors())
            if (!set.by_name_.emplace(t.name, &t).second) fail("{}: duplicate tensor '{}'", dir_or_file, t.name);
        return set;
    }
    if (!is_index && !S_ISDIR(st.st_mode)) fail("{}: not a file or directory", dir_or_file);

    const fs::path dir = is_index ? p.parent_path() : p;
    const fs::path index = is_index ? p : dir / "model.safetensors.index.json";
    std::error_code ec; // the error_code overloads: a permission error reads as "absent", never throws
    if (!is_index && !fs::exists(index, ec)) {
        if (!fs::exists(dir / "model.safetensors", ec))
            fail("no model.safetensors or model.safetensors.index.json in {}", dir_or_file);
        return open((dir / "model.safetensors").string());
    }

    // Sharded: the index maps every tensor name to the shard file holding it.
    const std::string ilabel = index.string();
    std::ifstream in(index, std::ios::binary);
    if (!in) fail("{}: cannot open: {}", ilabel, errno_str());
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    json root = parse_json_strict(text.data(), text.data() + text.size(), ilabel);
    if (!root.is_object()) fail("{}: must be a JSON object, got {}", ilabel, root.type_name());
    auto wm = root.find("weight_map");
    if (wm == root.end()) fail("{}: missing weight_map", ilabel);
    if (!wm->is_object()) fail("{}: weight_map must be an object, got {}", ilabel, wm->type_name());
    if (wm->empty()) fail("{}: weight_map is empty", ilabel);
    std::map<std::string, std::string> where; // tensor -> shard
    std::vector<std::string> shards;          // in order of first mention
    for (auto &[name, v] : wm->items()) {
        if (!v.is_string()) fail("{}: weight_map['{}'] must be a string, got {}", ilabel, name, v.type_name());
        std::string file = v.get<std::string>();
        // Shards must sit in the model directory: no subpaths, no parent references.
        if (file.empty() || file.find('/') != std::string::npos || file.find("..") != std::string::npos ||
            file.find('\0') != std::string::npos)
            fail("{}: weight_map['{}'] = '{}' is not a plain file name in the model directory", ilabel, name, file);
        if (std::find(shards.begin(), shards.end(), file) == shards.end()) {
            if (!fs::is_regular_file(dir / file, ec))
                fail("{}: shard '{}' (holding tensor '{}') does not exist in {}", ilabel, file, name, dir.string());
            shards.push_back(file);
        }
        where[name] = std::move(file);
    }
    std::map<std::string, std::string> found_in; // tensor -> shard it was found in
    for (const auto &shard : shards) {
        set.files_.push_back(SafetensorsFile::open((dir / shard).string()));
        for (const auto &t : set.files_.back()->tensors()) {
            auto [it, fresh] = found_in.emplace(t.name, shard);
            if (!fresh) fail("{}: tensor '{}' appears in both '{}' and '{}'", ilabel, t.name, it->second, shard);
            auto w = where.find(t.name);
            if (w == where.end()) fail("{}: tensor '{}' in shard '{}' is not listed in weight_map", ilabel, t.name, shard);
            if (w->second != shard)
                fail("{}: tensor '{}' is in shard '{}' but weight_map says '{}'", ilabel, t.name, shard, w->second);
            set.by_name_.emplace(t.name, &t);
        }
    }
    for (const auto &[name, shard] : where)
        if (!set.by_name_.contains(name))
            fail("{}: tensor '{}' is listed in weight_map for shard '{}' but is not in it", ilabel, name, shard);
    return set;
}

const TensorInfo *SafetensorSet::find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
}

std::vector<std::string> SafetensorSet::names() const {
    std::vector<std::string> out;
    out.reserve(by_name_.size());
    for (const auto &kv : by_name_) out.push_back(kv.first);
    return out;
}

// ---- reading / writing ----

void tensor_read_f32(const TensorInfo &t, float *out) {
    const size_t n = size_t(t.numel());
    ZAYA_ASSERT(t.nbytes == n * dtype_size(t.dtype));
    if (n == 0) return; // `out` may be null then, and memcpy(null, null, 0) is UB
    if (t.dtype == DType::F32 || reinterpret_cast<uintptr_t>(t.data) % 2 == 0) {
        convert_to_f32(t.dtype, t.data, out, n); // F32 is a memcpy; 16-bit loads are aligned
        return;
    }
    // An odd offset in the file: 16-bit loads would be misaligned, so bounce through an aligned buffer.
    std::vector<uint16_t> tmp(std::min(n, kChunk));
    for (size_t i = 0; i < n; i += kChunk) {
        const size_t m = std::min(kChunk, n - i);
        std::memcpy(tmp.data(), t.data + i * 2, m * 2);
        convert_to_f32(t.dtype, tmp.data(), out + i, m);
    }
}

namespace {

// Removes the temp file unless released; owns its descriptor.
struct TempFile {
    std::string path;
    int fd = -1;
    bool keep = false;
    ~TempFile() {
        if (fd >= 0) ::close(fd);
        if (!keep) ::unlink(path.c_str());
    }
    uint64_t written = 0, flushed = 0;
    // Writes in 8 MiB pieces; each piece is hashed right before it is written (while it is in cache) when `hash`
    // is given. Every 32 MiB the kernel is told to start writing back what it has (sync_file_range), so the disk
    // works while later pieces are copied and the final fsync has little left to wait for.
    void write_all(const void *p, size_t n, const std::string &final_path, XXH64_state_t *hash = nullptr) {
        constexpr size_t kPiece = size_t(8) << 20, kFlush = size_t(32) << 20;
        const auto *b = static_cast<const uint8_t *>(p);
        while (n > 0) {
            const size_t piece = std::min(n, kPiece);
            if (hash) XXH64_update(hash, b, piece);
            for (size_t done = 0; done < piece;) {
                ssize_t w = ::write(fd, b + done, piece - done);
                if (w < 0 && errno == EINTR) continue;
                if (w < 0) fail("{}: write to {} failed: {}", final_path, path, errno_str());
                done += size_t(w);
            }
            b += piece;
            n -= piece;
            written += piece;
            if (written - flushed >= kFlush) {
                ::sync_file_range(fd, off64_t(flushed), off64_t(written - flushed), SYNC_FILE_RANGE_WRITE);
                flushed = written;
            }
        }
    }
};

} // namespace

SafetensorsLayout safetensors_layout(const std::string &path, const std::vector<TensorToWrite> &tensors,
                                     const std::map<std::string, std::string> &metadata, size_t data_align) {
    if (data_align < 8 || data_align % 8 != 0) fail("{}: data alignment {} is not a multiple of 8", path, data_align);
    // Header in the given order; data contiguous (as the reference reader requires) after an aligned header.
    nlohmann::ordered_json hdr = nlohmann::ordered_json::object();
    if (!metadata.empty()) hdr["__metadata__"] = metadata;
    std::set<std::string> seen;
    SafetensorsLayout out;
    uint64_t offset = 0;
    for (const auto &t : tensors) {
        if (t.name == "__metadata__") fail("{}: '__metadata__' cannot be a tensor name", path);
        if (!seen.insert(t.name).second) fail("{}: duplicate tensor '{}'", path, t.name);
        uint64_t numel = 1;
        for (int64_t d : t.shape) {
            if (d < 0) fail("{}: tensor '{}': negative dimension in shape {}", path, t.name, shape_to_str(t.shape));
            if (__builtin_mul_overflow(numel, uint64_t(d), &numel))
                fail("{}: tensor '{}': shape {} has too many elements", path, t.name, shape_to_str(t.shape));
        }
        if (numel > 0 && !t.data && !t.raw) fail("{}: tensor '{}' has no data", path, t.name);
        if (t.data && t.raw) fail("{}: tensor '{}' has both fp32 data and raw bytes", path, t.name);
        const uint64_t nbytes = numel * dtype_size(t.dtype);
        hdr[t.name] = {{"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + nbytes}}};
        out.numel.push_back(numel);
        out.tensors.push_back({offset, nbytes, 0});
        offset += nbytes;
    }
    std::string text;
    try {
        text = hdr.dump();
    } catch (const nlohmann::json::exception &e) { // invalid UTF-8 in a name or metadata
        fail("{}: cannot encode header: {}", path, e.what());
    }
    text.append((data_align - (8 + text.size()) % data_align) % data_align, ' '); // spaces: valid JSON padding
    out.prefix.resize(8);
    for (int i = 0; i < 8; ++i) out.prefix[size_t(i)] = char(uint8_t(uint64_t(text.size()) >> (8 * i)));
    out.prefix += text;
    for (WrittenTensor &w : out.tensors) w.offset += out.prefix.size();
    out.file_size = out.prefix.size() + offset;
    return out;
}

void safetensors_write(const std::string &path, const std::vector<TensorToWrite> &tensors,
                       const std::map<std::string, std::string> &metadata, std::vector<WrittenTensor> *written,
                       size_t data_align) {
    const SafetensorsLayout layout = safetensors_layout(path, tensors, metadata, data_align);
    const std::vector<uint64_t> &counts = layout.numel;
    TempFile tmp;
    tmp.path = fmt::format("{}.tmp.{}", path, ::getpid());
    tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (tmp.fd < 0) {
        tmp.keep = true; // nothing was created
        fail("{}: cannot create {}: {}", path, tmp.path, errno_str());
    }
    tmp.write_all(layout.prefix.data(), layout.prefix.size(), path);
    std::vector<uint16_t> buf;
    if (written) written->clear();
    uint64_t file_offset = layout.prefix.size();
    XXH64_state_t *hash = XXH64_createState();
    if (!hash) fail("{}: out of memory", path);
    std::unique_ptr<XXH64_state_t, decltype(&XXH64_freeState)> hash_owner(hash, XXH64_freeState);
    for (size_t k = 0; k < tensors.size(); ++k) {
        const auto &t = tensors[k];
        const size_t n = size_t(counts[k]);
        XXH64_reset(hash, 0);
        if (t.raw) {
            tmp.write_all(t.raw, n * dtype_size(t.dtype), path, written ? hash : nullptr);
        } else if (t.dtype == DType::F32) {
            tmp.write_all(t.data, n * 4, path, written ? hash : nullptr);
        } else {
            buf.resize(std::min(n, kChunk)); // convert in chunks: never a full copy of a huge tensor
            for (size_t i = 0; i < n; i += kChunk) {
                const size_t m = std::min(kChunk, n - i);
                convert_from_f32(t.dtype, t.data + i, buf.data(), m);
                tmp.write_all(buf.data(), m * 2, path, written ? hash : nullptr);
            }
        }
        const uint64_t nbytes = uint64_t(n) * dtype_size(t.dtype);
        if (written) written->push_back({file_offset, nbytes, XXH64_digest(hash)});
        file_offset += nbytes;
    }
    if (::fsync(tmp.fd) != 0) fail("{}: fsync of {} failed: {}", path, tmp.path, errno_str());
    const int fd = tmp.fd;
    tmp.fd = -1;
    if (::close(fd) != 0) fail("{}: close of {} failed: {}", path, tmp.path, errno_str());
    if (::rename(tmp.path.c_str(), path.c_str()) != 0)
        fail("{}: rename from {} failed: {}", path, tmp.path, errno_str());
    tmp.keep = true;
    // Make the rename itself durable.
    fs::path parent = fs::path(path).parent_path();
    if (parent.empty()) parent = ".";
    int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("{}: cannot open directory {} to fsync: {}", path, parent.string(), errno_str());
    const int rc = ::fsync(dfd);
    const std::string err = errno_str();
    ::close(dfd);
    if (rc != 0) fail("{}: fsync of directory {} failed: {}", path, parent.string(), err);
}

} // namespace zaya
