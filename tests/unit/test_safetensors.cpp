// Safetensors reader/writer and the core/dtype scalar conversions.
#include "core/dtype.h"
#include "core/error.h"
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <unistd.h>

namespace fs = std::filesystem;
using namespace zaya;

namespace {

// Builds a safetensors image by hand: 8-byte length, header text, data bytes.
std::vector<uint8_t> image(const std::string &header, size_t data_bytes = 0) {
    std::vector<uint8_t> b(8 + header.size() + data_bytes, 0);
    uint64_t n = header.size();
    for (int i = 0; i < 8; ++i) b[size_t(i)] = uint8_t(n >> (8 * i));
    std::memcpy(b.data() + 8, header.data(), header.size());
    return b;
}

// Expects safetensors_parse to throw zaya::Error whose message contains every string in `needles`.
void expect_parse_error(const std::vector<uint8_t> &b, std::initializer_list<std::string> needles) {
    try {
        safetensors_parse(b.data(), b.size(), "model.safetensors");
        ADD_FAILURE() << "no error thrown";
    } catch (const Error &e) {
        std::string msg = e.what();
        EXPECT_NE(msg.find("model.safetensors"), std::string::npos) << msg;
        for (const auto &n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
}

void expect_hdr_error(const std::string &header, size_t data_bytes, std::initializer_list<std::string> needles) {
    expect_parse_error(image(header, data_bytes), needles);
}

template <class F> std::string error_of(F &&f) {
    try {
        f();
    } catch (const Error &e) {
        return e.what();
    }
    ADD_FAILURE() << "no error thrown";
    return {};
}

class SafetensorsTest : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string tmpl = (fs::path(::testing::TempDir()) / "zaya_st_XXXXXX").string();
        ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
        dir = tmpl;
    }
    void TearDown() override { fs::remove_all(dir); }

    std::string path(const std::string &name) const { return (dir / name).string(); }
    void write_text(const std::string &name, const std::string &text) const {
        std::ofstream(dir / name, std::ios::binary) << text;
    }
    // A shard with the given tensor names, each a 2-element F32 tensor.
    void shard(const std::string &name, const std::vector<std::string> &tensors) const {
        static const float v[2] = {1.0f, 2.0f};
        std::vector<TensorToWrite> ts;
        for (const auto &t : tensors) ts.push_back({t, DType::F32, {2}, v});
        safetensors_write(path(name), ts);
    }
    fs::path dir;
};

// ---- dtype ----

TEST(DTypeTest, Names) {
    DType t;
    for (DType d : {DType::F32, DType::BF16, DType::F16}) {
        ASSERT_TRUE(dtype_parse(dtype_name(d), t));
        EXPECT_EQ(t, d);
    }
    EXPECT_FALSE(dtype_parse("I64", t));
    EXPECT_EQ(dtype_size(DType::BF16), 2u);
}

TEST(DTypeTest, Bf16RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    // 1 + 2^-8 is exactly half-way between 1.0 and 1+2^-7: ties to the even mantissa (1.0).
    EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
    // 1 + 3·2^-8 is half-way between 1+2^-7 (odd) and 1+2^-6 (even): rounds up.
    EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);
    // Just above half-way rounds up.
    EXPECT_EQ(f32_to_bf16(std::nextafter(1.00390625f, 2.0f)), 0x3f81);
    EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80); // rounds over to inf
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::nanf("")))));
    EXPECT_EQ(bf16_to_f32(0x3fc0), 1.5f);
}

TEST(DTypeTest, F16Normal) {
    EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
    EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff); // largest finite
    EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
    EXPECT_EQ(f32_to_f16(6.103515625e-05f), 0x0400); // smallest normal
    EXPECT_EQ(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); // tie -> even
    EXPECT_EQ(f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); // tie -> even (up)
    for (uint32_t h = 0; h < 0x7c00; ++h) // every finite positive half round-trips exactly
        ASSERT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << h;
}

TEST(DTypeTest, F16Subnormal) {
    const float tiny = std::ldexp(1.0f, -24); // smallest subnormal
    EXPECT_EQ(f32_to_f16(tiny), 0x0001);
    EXPECT_EQ(f16_to_f32(0x0001), tiny);
    EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
    EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);   // below half the smallest: 0
    EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 0x0001);   // 0.75 ulp rounds up
    EXPECT_EQ(f32_to_f16(-tiny), 0x8001);
    EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
}

TEST(DTypeTest, F16InfNan) {
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(f32_to_f16(inf), 0x7c00);
    EXPECT_EQ(f32_to_f16(-inf), 0xfc00);
    EXPECT_EQ(f32_to_f16(70000.0f), 0x7c00); // overflow
    EXPECT_EQ(f16_to_f32(0x7c00), inf);
    EXPECT_EQ(f16_to_f32(0xfc00), -inf);
    EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
    uint16_t h = f32_to_f16(std::nanf(""));
    EXPECT_EQ(h & 0x7c00, 0x7c00);
    EXPECT_NE(h & 0x03ff, 0);
    EXPECT_TRUE(std::isnan(f16_to_f32(h)));
}

// ---- round trips ----

TEST_F(SafetensorsTest, RoundTripAllDtypes) {
    const std::vector<float> a = {1.0f, -2.5f, 0.125f, 3.0e-5f, 65504.0f, -0.0f};
    const std::vector<float> b = {1.00390625f, 1.01171875f, -7.0f, 1e30f};
    const std::vector<float> c = {0.5f};
    safetensors_write(path("m.safetensors"),
                      {{"a", DType::F32, {2, 3}, a.data()}, {"b", DType::BF16, {4}, b.data()},
                       {"c", DType::F16, {}, c.data()}, {"empty", DType::F16, {0, 5}, nullptr}},
                      {{"format", "pt"}});
    auto f = SafetensorsFile::open(path("m.safetensors"));
    EXPECT_EQ(f->metadata().at("format"), "pt");
    ASSERT_EQ(f->tensors().size(), 4u);
    EXPECT_EQ(f->tensors()[0].name, "a"); // order of data offset = write order

    const TensorInfo *ta = f->find("a");
    ASSERT_NE(ta, nullptr);
    EXPECT_EQ(ta->shape_str(), "[2, 3]");
    EXPECT_EQ(ta->numel(), 6);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ta->data) % 8, 0u); // data block is 8-aligned
    std::vector<float> out(6);
    tensor_read_f32(*ta, out.data());
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(std::signbit(out[i]), std::signbit(a[i]));
    EXPECT_EQ(out, a);

    tensor_read_f32(*f->find("b"), out.data());
    EXPECT_EQ(out[0], 1.0f);       // tie to even
    EXPECT_EQ(out[1], 1.015625f);  // tie to even (up)
    EXPECT_EQ(out[2], -7.0f);
    EXPECT_EQ(out[3], bf16_to_f32(f32_to_bf16(1e30f)));
    const TensorInfo *tc = f->find("c");
    EXPECT_EQ(tc->shape.size(), 0u);
    EXPECT_EQ(tc->numel(), 1);
    tensor_read_f32(*tc, out.data());
    EXPECT_EQ(out[0], 0.5f);
    EXPECT_EQ(f->find("empty")->nbytes, 0u);
    tensor_read_f32(*f->find("empty"), nullptr); // zero elements: no output touched
    EXPECT_EQ(f->find("nope"), nullptr);

    auto set = SafetensorSet::open(path("m.safetensors"));
    EXPECT_EQ(set.names(), (std::vector<std::string>{"a", "b", "c", "empty"}));
}

TEST_F(SafetensorsTest, HeaderIsPaddedAndNoMetadataWhenEmpty) {
    const float v = 1.0f;
    safetensors_write(path("m.safetensors"), {{"x", DType::F32, {1}, &v}});
    std::ifstream in(path("m.safetensors"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u);
    EXPECT_EQ(bytes.size(), 8 + n + 4);
    EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
    EXPECT_FALSE(fs::exists(path("m.safetensors") + ".tmp." + std::to_string(::getpid())));
}

TEST_F(SafetensorsTest, ReadsMisalignedBf16) {
    // An odd data offset: the 16-bit elements are not 2-byte aligned in memory.
    auto b = image(R"({"p":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"x":{"dtype":"BF16","shape":[2],"data_offsets":[1,5]}})", 5);
    size_t d = b.size() - 5;
    const uint16_t v[2] = {0x3f80, 0xc000};
    std::memcpy(b.data() + d + 1, v, 4);
    auto h = safetensors_parse(b.data(), b.size(), "m");
    float out[2];
    tensor_read_f32(h.tensors[1], out);
    EXPECT_EQ(out[0], 1.0f);
    EXPECT_EQ(out[1], -2.0f);
}

TEST_F(SafetensorsTest, LargeTensorChunked) {
    std::vector<float> v((size_t(1) << 20) + 3); // spans more than one conversion chunk
    for (size_t i = 0; i < v.size(); ++i) v[i] = float(i % 251) - 125.0f;
    safetensors_write(path("big.safetensors"), {{"w", DType::BF16, {int64_t(v.size())}, v.data()}});
    auto f = SafetensorsFile::open(path("big.safetensors"));
    std::vector<float> out(v.size());
    tensor_read_f32(*f->find("w"), out.data());
    EXPECT_EQ(out, v);
}

// ---- malformed images ----

TEST(SafetensorsParse, TooShort) {
    std::vector<uint8_t> b(5, 0);
    expect_parse_error(b, {"too short"});
    expect_parse_error({}, {"0 bytes"});
}

TEST(SafetensorsParse, HeaderLengthZero) { expect_parse_error(image(""), {"header length is 0"}); }

TEST(SafetensorsParse, HeaderLengthPastBuffer) {
    auto b = image("{}");
    b[0] = 200;
    expect_parse_error(b, {"header length 200"});
}

TEST(SafetensorsParse, HeaderLengthAbsurd) {
    auto b = image("{}");
    b[7] = 0x7f;
    expect_parse_error(b, {"limit"});
}

TEST(SafetensorsParse, NotJson) { expect_hdr_error("{\"a\": ", 0, {"invalid JSON"}); }
TEST(SafetensorsParse, InvalidUtf8) { expect_hdr_error("{\"\xff\": 1}", 0, {"invalid JSON"}); }
TEST(SafetensorsParse, NotObject) { expect_hdr_error("[1, 2]", 0, {"must be a JSON object", "array"}); }
TEST(SafetensorsParse, TooDeep) { expect_hdr_error(std::string(40, '[') + std::string(40, ']'), 0, {"nested"}); }

TEST(SafetensorsParse, EmptyHeaderIsValid) {
    auto b = image("{}    ");
    EXPECT_TRUE(safetensors_parse(b.data(), b.size(), "m").tensors.empty());
}

TEST(SafetensorsParse, EntryNotObject) { expect_hdr_error(R"({"x.weight": 3})", 0, {"'x.weight'", "must be an object"}); }

TEST(SafetensorsParse, MissingDtype) {
    expect_hdr_error(R"({"x.weight":{"shape":[1],"data_offsets":[0,4]}})", 4, {"'x.weight'", "missing dtype"});
}
TEST(SafetensorsParse, DtypeNotString) {
    expect_hdr_error(R"({"x.weight":{"dtype":1,"shape":[1],"data_offsets":[0,4]}})", 4, {"'x.weight'", "dtype must be a string"});
}
TEST(SafetensorsParse, UnsupportedDtype) {
    expect_hdr_error(R"({"x.weight":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8, {"'x.weight'", "'I64'"});
}
TEST(SafetensorsParse, MissingShape) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","data_offsets":[0,4]}})", 4, {"'x.weight'", "missing shape"});
}
TEST(SafetensorsParse, ShapeNotArray) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":4,"data_offsets":[0,4]}})", 4, {"'x.weight'", "shape must be an array"});
}
TEST(SafetensorsParse, NegativeDim) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[2,-1],"data_offsets":[0,4]}})", 4, {"'x.weight'", "shape[1] is negative"});
}
TEST(SafetensorsParse, NonIntegerDim) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4, {"'x.weight'", "shape[0] is not an integer"});
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":["1"],"data_offsets":[0,4]}})", 4, {"'x.weight'", "shape[0] must be an integer"});
}
TEST(SafetensorsParse, NumelOverflow) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", 4,
                     {"'x.weight'", "too many elements"});
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[18446744073709551615],"data_offsets":[0,4]}})", 4,
                     {"'x.weight'", "too large"});
    // numel fits in int64 but numel × 4 bytes does not.
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,4]}})", 4,
                     {"'x.weight'", "too many elements"});
}
TEST(SafetensorsParse, MissingOffsets) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1]}})", 4, {"'x.weight'", "missing data_offsets"});
}
TEST(SafetensorsParse, OffsetsNotPair) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4, {"'x.weight'", "data_offsets must be"});
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":"0,4"}})", 4, {"'x.weight'", "data_offsets must be"});
}
TEST(SafetensorsParse, OffsetsNegativeOrFloat) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4, {"'x.weight'", "data_offsets[0] is negative"});
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4.0]}})", 4, {"'x.weight'", "data_offsets[1] is not an integer"});
}
TEST(SafetensorsParse, OffsetsReversed) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 4, {"'x.weight'", "begin > end"});
}
TEST(SafetensorsParse, OffsetsPastData) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 4, {"'x.weight'", "[4, 8]", "4-byte data block"});
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,18446744073709551615]}})", 4, {"'x.weight'", "data block"});
}
TEST(SafetensorsParse, ByteCountMismatch) {
    expect_hdr_error(R"({"x.weight":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]}})", 24,
                     {"tensor 'x.weight': data_offsets [0, 24] hold 24 bytes but shape [2, 3] of BF16 needs 12"});
}
TEST(SafetensorsParse, Overlap) {
    expect_hdr_error(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                     12, {"'b'", "overlap tensor 'a'"});
    // A tensor nested inside a longer one, after a short one.
    expect_hdr_error(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},"c":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                     16, {"overlap tensor 'a'"});
}
TEST(SafetensorsParse, ZeroSizeTensorsDoNotOverlap) {
    auto b = image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 4);
    EXPECT_EQ(safetensors_parse(b.data(), b.size(), "m").tensors.size(), 2u);
}
TEST(SafetensorsParse, MetadataNotObject) {
    expect_hdr_error(R"({"__metadata__":[1]})", 0, {"__metadata__ must be an object"});
}
TEST(SafetensorsParse, MetadataValueNotString) {
    expect_hdr_error(R"({"__metadata__":{"format":1}})", 0, {"__metadata__ key 'format' must be a string"});
}
TEST(SafetensorsParse, DuplicateTensor) {
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"x.weight":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     8, {"duplicate key 'x.weight'"});
    expect_hdr_error(R"({"x.weight":{"dtype":"F32","dtype":"BF16","shape":[1],"data_offsets":[0,4]}})", 4, {"duplicate key 'dtype'"});
}

// ---- files ----

TEST_F(SafetensorsTest, OpenErrorsNamePath) {
    EXPECT_NE(error_of([&] { SafetensorsFile::open(path("missing.safetensors")); }).find("missing.safetensors: cannot open: No such file"),
              std::string::npos);
    EXPECT_NE(error_of([&] { SafetensorsFile::open(dir.string()); }).find("is a directory"), std::string::npos);
    write_text("empty.safetensors", "");
    EXPECT_NE(error_of([&] { SafetensorsFile::open(path("empty.safetensors")); }).find("empty.safetensors: empty file"),
              std::string::npos);
    write_text("bad.safetensors", std::string("\x02\0\0\0\0\0\0\0[]", 10));
    EXPECT_NE(error_of([&] { SafetensorsFile::open(path("bad.safetensors")); }).find("bad.safetensors: header must be"),
              std::string::npos);
}

TEST_F(SafetensorsTest, FailedWriteKeepsOldFile) {
    const float v[2] = {3.0f, 4.0f};
    safetensors_write(path("m.safetensors"), {{"x", DType::F32, {2}, v}});
    // A path in a directory that does not exist: the write fails and names the path.
    std::string msg = error_of([&] { safetensors_write(path("nodir/m.safetensors"), {{"x", DType::F32, {2}, v}}); });
    EXPECT_NE(msg.find("nodir/m.safetensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find("No such file"), std::string::npos) << msg;
    // An invalid write to the good path (duplicate name) fails before touching it.
    EXPECT_THROW(safetensors_write(path("m.safetensors"), {{"x", DType::F32, {2}, v}, {"x", DType::F32, {2}, v}}), Error);
    // The target is a directory: the rename fails, the temp file is cleaned up.
    fs::create_directory(dir / "isdir");
    EXPECT_THROW(safetensors_write(path("isdir"), {{"x", DType::F32, {2}, v}}), Error);
    for (const auto &e : fs::directory_iterator(dir))
        EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();

    auto f = SafetensorsFile::open(path("m.safetensors"));
    float out[2];
    tensor_read_f32(*f->find("x"), out);
    EXPECT_EQ(out[0], 3.0f);
    EXPECT_EQ(out[1], 4.0f);
}

TEST_F(SafetensorsTest, WriteRejectsBadInput) {
    const float v = 1.0f;
    EXPECT_NE(error_of([&] { safetensors_write(path("m.safetensors"), {{"x", DType::F32, {-1}, &v}}); }).find("'x'"),
              std::string::npos);
    EXPECT_NE(error_of([&] { safetensors_write(path("m.safetensors"), {{"x", DType::F32, {2}, nullptr}}); }).find("no data"),
              std::string::npos);
    EXPECT_THROW(safetensors_write(path("m.safetensors"), {{"\xff", DType::F32, {1}, &v}}), Error);
    EXPECT_FALSE(fs::exists(path("m.safetensors")));
}

// ---- sets / sharded index ----

TEST_F(SafetensorsTest, SetSingleFileDir) {
    shard("model.safetensors", {"a", "b"});
    auto set = SafetensorSet::open(dir.string());
    EXPECT_EQ(set.size(), 2u);
    ASSERT_NE(set.find("b"), nullptr);
    EXPECT_EQ(set.find("b")->file, path("model.safetensors"));
}

TEST_F(SafetensorsTest, SetEmptyDir) {
    std::string msg = error_of([&] { SafetensorSet::open(dir.string()); });
    EXPECT_NE(msg.find("no model.safetensors or model.safetensors.index.json in " + dir.string()), std::string::npos) << msg;
    EXPECT_NE(error_of([&] { SafetensorSet::open(path("nothing")); }).find("nothing: cannot open"), std::string::npos);
}

TEST_F(SafetensorsTest, ShardedHappyPath) {
    shard("model-00001-of-00002.safetensors", {"a", "b"});
    shard("model-00002-of-00002.safetensors", {"c"});
    write_text("model.safetensors.index.json", R"({"metadata":{"total_size":24},"weight_map":{
        "a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
        "c":"model-00002-of-00002.safetensors"}})");
    for (const auto &p : {dir.string(), path("model.safetensors.index.json")}) {
        auto set = SafetensorSet::open(p);
        EXPECT_EQ(set.names(), (std::vector<std::string>{"a", "b", "c"}));
        ASSERT_NE(set.find("c"), nullptr);
        EXPECT_EQ(set.find("c")->file, path("model-00002-of-00002.safetensors"));
        float out[2];
        tensor_read_f32(*set.find("c"), out);
        EXPECT_EQ(out[1], 2.0f);
        EXPECT_EQ(set.find("zz"), nullptr);
    }
}

class SafetensorShardIndexTest : public SafetensorsTest {
  protected:
    // Two shards s1 = {a, b}, s2 = {c}; the test writes the index.
    void SetUp() override {
        SafetensorsTest::SetUp();
        shard("s1.safetensors", {"a", "b"});
        shard("s2.safetensors", {"c"});
    }
    std::string open_error(const std::string &index) {
        write_text("model.safetensors.index.json", index);
        return error_of([&] { SafetensorSet::open(dir.string()); });
    }
    void expect(const std::string &index, std::initializer_list<std::string> needles) {
        std::string msg = open_error(index);
        EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
        for (const auto &n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
};

TEST_F(SafetensorShardIndexTest, BadJson) {
    expect("{", {"invalid JSON"});
    expect("[]", {"must be a JSON object"});
    expect(R"({"metadata":{}})", {"missing weight_map"});
    expect(R"({"weight_map":[]})", {"weight_map must be an object"});
    expect(R"({"weight_map":{}})", {"weight_map is empty"});
    expect(R"({"weight_map":{"a":1}})", {"weight_map['a'] must be a string"});
    expect(R"({"weight_map":{"a":"s1.safetensors","a":"s2.safetensors"}})", {"duplicate key 'a'"});
}

TEST_F(SafetensorShardIndexTest, MissingShard) {
    expect(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s3.safetensors"}})",
           {"shard 's3.safetensors'", "'c'", "does not exist"});
}

TEST_F(SafetensorShardIndexTest, TensorInWrongShard) {
    expect(R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors","c":"s2.safetensors"}})",
           {"tensor 'b' is in shard 's1.safetensors' but weight_map says 's2.safetensors'"});
}

TEST_F(SafetensorShardIndexTest, ListedButAbsent) {
    expect(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors","d":"s2.safetensors"}})",
           {"tensor 'd'", "'s2.safetensors'", "not in it"});
}

TEST_F(SafetensorShardIndexTest, DuplicateAcrossShards) {
    shard("s3.safetensors", {"a"});
    expect(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s3.safetensors"}})",
           {"tensor 'a' appears in both 's1.safetensors' and 's3.safetensors'"});
}

TEST_F(SafetensorShardIndexTest, UnlistedTensor) {
    expect(R"({"weight_map":{"a":"s1.safetensors","c":"s2.safetensors"}})",
           {"tensor 'b' in shard 's1.safetensors' is not listed"});
}

TEST_F(SafetensorShardIndexTest, PathEscape) {
    fs::create_directory(dir / "sub");
    shard("sub/s4.safetensors", {"d"});
    for (const char *bad : {"../s1.safetensors", "sub/s4.safetensors", "/etc/passwd", "..", ""}) {
        std::string idx = fmt::format(R"({{"weight_map":{{"a":"s1.safetensors","b":"s1.safetensors","c":"{}"}}}})", bad);
        expect(idx, {"weight_map['c']", "not a plain file name"});
    }
}

TEST_F(SafetensorShardIndexTest, ShardIsCorrupt) {
    write_text("s2.safetensors", "garbage!");
    std::string msg = open_error(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors","c":"s2.safetensors"}})");
    EXPECT_NE(msg.find("s2.safetensors: header length"), std::string::npos) << msg;
}

} // namespace
