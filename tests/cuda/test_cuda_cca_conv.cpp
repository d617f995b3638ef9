// CUDA CCA convolution (forward and backward) against cpu::cca_conv_*: varlen batches with a length-1 sequence,
// ragged lengths and an empty sequence, head groups with hd 4–32, k0, k1 ∈ {2, 3}; outputs poisoned, gradients
// accumulated onto random values (dz and the parameter grads are +=), and the backward bit-identical when rerun;
// one case large enough to split the tiled backward's tiles and chunks.
#include "core/error.h"
#include "cuda_test_util.h"
#include "ops/cpu/cca.h"
#include "ops/cuda/cca.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace zaya {
namespace {

using namespace test;

class CudaCcaConv : public CudaOps {};

struct ConvCase {
    std::vector<int64_t> lens; // sequence lengths of the varlen batch
    int64_t groups, hd, k0, k1;
};

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// bf16: the grouped conv on tensor cores (cca_conv_forward_bf16, cca_conv_backward with the packed weight) against
// the fp32 reference: both operands of its products rounded to bf16 (2⁻⁹ relative each), sums of k1·hd or of the
// tokens' products — a wrong row, tap or group gives errors of order one.
constexpr double kConvBf16Tol = 2e-2;

void check_conv(const ConvCase &cc, uint64_t seed, bool bf16 = false) {
    SCOPED_TRACE(bf16 ? "bf16 grouped conv" : "fp32");
    const double tol = bf16 ? kConvBf16Tol : kFp32Tol;
    const cpu::ConvShape s{cc.groups * cc.hd, cc.groups, cc.k0, cc.k1};
    const int64_t B = int64_t(cc.lens.size()), C = s.C;
    std::vector<int64_t> ss(size_t(B + 1), 0);
    int64_t max_len = 0;
    for (int64_t b = 0; b < B; ++b) {
        ss[size_t(b + 1)] = ss[size_t(b)] + cc.lens[size_t(b)];
        max_len = std::max(max_len, cc.lens[size_t(b)]);
    }
    const int64_t N = ss[size_t(B)], P = cpu::cca_conv_p_rows(N, B, s);
    const size_t nNC = size_t(N * C), nP = size_t(P * C);
    const auto z = random_vec(nNC, seed), dout = random_vec(nNC, seed + 1);
    const auto wd = random_vec(size_t(C * s.k0), seed + 2, 0.5), bd = random_vec(size_t(C), seed + 3, 0.5);
    const auto wg = random_vec(size_t(C * cc.hd * s.k1), seed + 4, 0.3), bg = random_vec(size_t(C), seed + 5, 0.5);
    // Gradients accumulate: start them from random values.
    const auto dz0 = random_vec(nNC, seed + 6), dwd0 = random_vec(wd.size(), seed + 7);
    const auto dbd0 = random_vec(bd.size(), seed + 8), dwg0 = random_vec(wg.size(), seed + 9);
    const auto dbg0 = random_vec(bg.size(), seed + 10);

    // CPU reference. dp starts at zero: the CPU leaves an empty sequence's padding rows of dp untouched, the GPU
    // writes them as 0 (nothing reads them).
    std::vector<float> o(nNC), p(nP), dp(nP, 0.0f), dz = dz0, dwd = dwd0, dbd = dbd0, dwg = dwg0, dbg = dbg0;
    cpu::cca_conv_forward(o.data(), p.data(), z.data(), ss.data(), B, s, wd.data(), bd.data(), wg.data(), bg.data());
    cpu::cca_conv_backward(dz.data(), dp.data(), dwd.data(), dbd.data(), dwg.data(), dbg.data(), dout.data(),
                           z.data(), p.data(), ss.data(), B, s, wd.data(), wg.data());

    auto ss_d = upload(ss);
    const cuda::VarlenBatch batch{ss_d.data(), B, N, max_len};
    auto z_d = upload(z), dout_d = upload(dout), wd_d = upload(wd), bd_d = upload(bd), wg_d = upload(wg);
    auto bg_d = upload(bg), o_d = poisoned(nNC), p_d = poisoned(nP);
    cuda::DeviceArray<uint16_t> wg16(wg.size());
    cuda::fill_bytes(wg16.data(), 0xFF, wg.size() * sizeof(uint16_t));
    if (bf16) cuda::pack_conv_weight_bf16(wg16.data(), wg_d.data(), s);
    if (bf16)
        cuda::cca_conv_forward_bf16(o_d.data(), p_d.data(), z_d.data(), batch, s, wd_d.data(), bd_d.data(),
                                    wg16.data(), bg_d.data());
    else
        cuda::cca_conv_forward(o_d.data(), p_d.data(), z_d.data(), batch, s, wd_d.data(), bd_d.data(), wg_d.data(),
                               bg_d.data());
    EXPECT_LT(rel_err(download(o_d), o), tol);
    if (bf16) {
        EXPECT_GT(rel_err(download(o_d), o), 1e-6) << "the bf16 path rounds (it is not the fp32 kernel)";
    }
    EXPECT_LT(rel_err(download(p_d), p), kFp32Tol); // the depthwise stage stays fp32

    // Backward twice from the same state: close to the CPU, and bit-identical to each other.
    std::vector<std::vector<float>> first;
    for (int run = 0; run < 2; ++run) {
        auto dz_d = upload(dz0), dp_d = poisoned(nP), dwd_d = upload(dwd0), dbd_d = upload(dbd0);
        auto dwg_d = upload(dwg0), dbg_d = upload(dbg0);
        cuda::cca_conv_backward(dz_d.data(), dp_d.data(), dwd_d.data(), dbd_d.data(), dwg_d.data(), dbg_d.data(),
                                dout_d.data(), z_d.data(), p_d.data(), batch, s, wd_d.data(), wg_d.data(),
                                bf16 ? wg16.data() : nullptr);
        std::vector<std::vector<float>> got{download(dz_d),  download(dp_d),  download(dwd_d),
                                            download(dbd_d), download(dwg_d), download(dbg_d)};
        const std::vector<float> *ref[] = {&dz, &dp, &dwd, &dbd, &dwg, &dbg};
        const char *names[] = {"dz", "dp", "dwd", "dbd", "dwg", "dbg"};
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_LT(rel_err(got[i], *ref[i]), tol) << names[i];
            if (run == 1) {
                EXPECT_TRUE(same_bits(got[i], first[i])) << names[i] << " differs between two runs";
            }
        }
        if (run == 0) first = std::move(got);
    }
}

TEST_F(CudaCcaConv, ForwardBackwardVarlen) {
    check_conv({{5, 1, 9, 3}, 3, 4, 2, 3}, 1800);   // length-1 sequence, ragged, hd 4
    check_conv({{1, 7, 0, 12}, 2, 16, 3, 2}, 1810); // an empty sequence: only its padding rows exist
    check_conv({{13, 1}, 2, 32, 3, 3}, 1820);       // hd 32
}

TEST_F(CudaCcaConv, ForwardBackwardSingleSequence) {
    check_conv({{6}, 4, 8, 2, 2}, 1830);
    check_conv({{1}, 1, 8, 3, 3}, 1840); // shorter than both kernels
}

// The grouped conv's tiled backward where its tiles split: hd 80 (two 64-wide tiles, the second ragged), p rows over
// nine 64-row tiles that straddle sequences, tokens over two 512-token chunks of the weight gradient.
TEST_F(CudaCcaConv, BackwardAcrossTilesAndChunks) { check_conv({{300, 1, 250}, 2, 80, 2, 2}, 1850); }

// The grouped conv as bf16 GEMMs per head group (im2col rows gathered across sequence boundaries and padding, the
// inverse gather into dp, the packed weight and its gradient unpacked): ragged and empty sequences, k1 2 and 3.
TEST_F(CudaCcaConv, Bf16TensorCoresVarlen) {
    check_conv({{5, 1, 0, 19}, 3, 8, 2, 2}, 1860, true);
    check_conv({{7, 13}, 2, 16, 3, 3}, 1870, true);
    check_conv({{40, 1, 33}, 2, 24, 2, 2}, 1880, true);
}

// Head sizes the bf16 rows cannot take are rejected by name.
TEST_F(CudaCcaConv, Bf16RejectsHeadSizesNotMultiplesOf8) {
    EXPECT_FALSE(cuda::conv_on_tensor_cores(cpu::ConvShape{12, 3, 2, 2}));
    EXPECT_TRUE(cuda::conv_on_tensor_cores(cpu::ConvShape{24, 3, 2, 2}));
    EXPECT_THROW(cuda::cca_conv_forward_bf16(nullptr, nullptr, nullptr, cuda::VarlenBatch{nullptr, 0, 0, 0},
                                             cpu::ConvShape{12, 3, 2, 2}, nullptr, nullptr, nullptr, nullptr),
                 Error);
}

} // namespace
} // namespace zaya
