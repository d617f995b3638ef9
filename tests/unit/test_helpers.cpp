#include "test_helpers.h"

#include "core/error.h"

#include <cmath>
#include <fstream>
#include <gtest/gtest.h>
#include <random>

namespace zaya::test {

TempDir::TempDir() {
    std::random_device rd;
    path = std::filesystem::path(::testing::TempDir()) / ("zaya_test_" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path);
}

TempDir::~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
}

std::vector<float> read_tensor(const std::string &file, const std::string &name) {
    auto f = SafetensorsFile::open(file);
    const TensorInfo *t = f->find(name);
    if (!t) fail("{}: no tensor '{}'", file, name);
    std::vector<float> v(size_t(t->numel()));
    tensor_read_f32(*t, v.data());
    return v;
}

float max_abs_diff(const float *a, const float *b, size_t n) {
    float m = 0;
    for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

std::string error_of(const std::function<void()> &f) {
    try {
        f();
    } catch (const Error &e) {
        return e.what();
    } catch (const std::exception &e) {
        ADD_FAILURE() << "threw a non-zaya exception: " << e.what();
        return {};
    }
    ADD_FAILURE() << "no error thrown";
    return {};
}

const Tokenizer &small_tokenizer() {
    static TempDir dir;
    static const Tokenizer tok = [] {
        std::ofstream out(dir.str("corpus.txt"));
        for (int i = 0; i < 200; ++i) out << "the quick brown fox " << i << " jumps over the lazy dog; STOP here\n";
        out.close();
        train_tokenizer({dir.str("corpus.txt")}, 320, dir.str("tok.model"));
        return Tokenizer::load(dir.str("tok.model"));
    }();
    return tok;
}

} // namespace zaya::test
