// Shared helpers for the unit tests: paths, temp dirs, golden files.
#pragma once
#include "data/tokenizer.h"
#include "io/safetensors.h"

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace zaya::test {

// Joined as paths, not with std::string's operator+: GCC 12 at -O3 warns (-Warray-bounds, a false positive) about
// that inlined concatenation when the source directory's path is 16 characters long, as in CI's /check/work/main.
inline std::string source_path(const std::string &rel) {
    return (std::filesystem::path(ZAYA_SOURCE_DIR) / rel).string();
}
inline std::string golden_dir(const std::string &name) {
    return (std::filesystem::path(ZAYA_SOURCE_DIR) / "tests" / "golden" / name).string();
}

// A fresh empty directory under the test temp dir, removed by the destructor.
struct TempDir {
    std::filesystem::path path;
    TempDir();
    ~TempDir();
    std::string str(const std::string &rel = "") const { return rel.empty() ? path.string() : (path / rel).string(); }
};

// All values of one F32 tensor of a safetensors file.
std::vector<float> read_tensor(const std::string &file, const std::string &name);

float max_abs_diff(const float *a, const float *b, size_t n);

// The message of the zaya::Error that `f` throws (a test failure if it throws nothing or something else).
std::string error_of(const std::function<void()> &f);

// A small BPE tokenizer trained once per test binary (vocabulary 320) on an ASCII corpus of "the quick brown fox
// <n> jumps over the lazy dog; STOP here" lines: "☃" and "é" are only encodable as byte pieces.
const Tokenizer &small_tokenizer();

} // namespace zaya::test
