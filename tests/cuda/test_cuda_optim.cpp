// The optimizer's elementwise pieces on the GPU (ops/cuda/optim.h) against the CPU: the sum of squares of the
// gradient norm (sizes across the chunking, deterministic), gradient scaling, and Muon's momentum / Nesterov / update
// steps against the formulas of optim/muon.cpp (torch's lerp as FMAs).
#include "cuda_test_util.h"
#include "ops/backend.h"
#include "ops/cuda/optim.h"
#include "optim/sum_squares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace zaya {
namespace {

using namespace test;

TEST_F(CudaOps, SumSquaresMatchesCpuAndIsDeterministic) {
    for (int64_t n : {int64_t(1), int64_t(999), (int64_t(1) << 15) + 3, int64_t(3) << 16}) {
        auto x = random_vec(size_t(n), uint64_t(n), 2.0);
        auto d = upload(x);
        const double got = cuda::sum_squares(d.data(), n), ref = sum_squares(x.data(), size_t(n));
        EXPECT_NEAR(got, ref, 1e-12 * ref) << n;
        EXPECT_EQ(cuda::sum_squares(d.data(), n), got) << "rerun, n = " << n;
    }
    EXPECT_EQ(cuda::sum_squares(nullptr, 0), 0.0);
}

// The gradient norm's pieces (optim/grad_norm.h): pieces of every size (empty, below and above a chunk, gaps between
// them), each summed as one chunk, in one launch: each the CPU's partial to 1e-12, the same bits through the
// backends' table and on a rerun; and sum_squares is its chunks' partials added in order, to the bit.
TEST_F(CudaOps, SumSquaresPartialsArePerPiece) {
    const std::vector<std::pair<size_t, size_t>> pieces = {
        {0, 5}, {8, 0}, {8, 1000}, {1100, (size_t(1) << 15) + 7}, {40000, 70000}, {110000, 3}};
    auto x = random_vec(110003, 9, 1.5);
    auto d = upload(x);
    std::vector<int64_t> offsets, lengths;
    for (const auto &[o, n] : pieces) offsets.push_back(int64_t(o)), lengths.push_back(int64_t(n));
    std::vector<double> got(pieces.size(), -1.0), table(pieces.size(), -1.0), again(pieces.size(), -1.0);
    cuda::sum_squares_partials(got.data(), d.data(), offsets.data(), lengths.data(), int64_t(pieces.size()));
    cuda_backend().sum_squares_partials(d.data(), pieces, table.data());
    cuda::sum_squares_partials(again.data(), d.data(), offsets.data(), lengths.data(), int64_t(pieces.size()));
    for (size_t p = 0; p < pieces.size(); ++p) {
        const double cpu = sum_squares_partial(x.data() + pieces[p].first, pieces[p].second);
        EXPECT_NEAR(got[p], cpu, 1e-12 * cpu) << "piece " << p;
        EXPECT_EQ(table[p], got[p]) << "piece " << p;
        EXPECT_EQ(again[p], got[p]) << "piece " << p;
    }
    std::vector<double> cpu_table(pieces.size(), -1.0);
    cpu_backend().sum_squares_partials(x.data(), pieces, cpu_table.data());
    for (size_t p = 0; p < pieces.size(); ++p)
        EXPECT_EQ(cpu_table[p], sum_squares_partial(x.data() + pieces[p].first, pieces[p].second)) << p;

    const int64_t n = 110003, chunk = int64_t(sum_squares_chunk(size_t(n)));
    offsets.clear(), lengths.clear();
    for (int64_t a = 0; a < n; a += chunk) offsets.push_back(a), lengths.push_back(std::min(chunk, n - a));
    std::vector<double> chunks(offsets.size());
    cuda::sum_squares_partials(chunks.data(), d.data(), offsets.data(), lengths.data(), int64_t(offsets.size()));
    double in_order = 0.0;
    for (double c : chunks) in_order += c;
    EXPECT_EQ(cuda::sum_squares(d.data(), n), in_order);
    cuda::sum_squares_partials(nullptr, d.data(), nullptr, nullptr, 0); // nothing to do, nothing touched
}

TEST_F(CudaOps, ScaleMultipliesEveryElement) {
    auto x = random_vec(1000, 3);
    auto d = upload(x);
    cuda::scale(d.data(), int64_t(x.size()), 0.25f);
    auto got = download(d);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], x[i] * 0.25f);
}

// optim/muon.cpp's momentum, Nesterov and update lines, on the host.
float lerp_fma(float start, float end, float w) {
    return std::fabs(w) < 0.5f ? std::fma(w, end - start, start) : std::fma(w - 1.0f, end - start, end);
}

TEST_F(CudaOps, MuonMomentumAndUpdate) {
    const int64_t n = 777;
    auto g = random_vec(size_t(n), 4), m = random_vec(size_t(n), 5), p = random_vec(size_t(n), 6);
    for (bool nesterov : {true, false})
        for (float mu : {0.95f, 0.3f}) { // both branches of torch's lerp
            SCOPED_TRACE(testing::Message() << "nesterov " << nesterov << ", mu " << mu);
            std::vector<float> m_ref(m), u_ref(static_cast<size_t>(n)), p_ref(p);
            for (int64_t i = 0; i < n; ++i) {
                m_ref[size_t(i)] = lerp_fma(m[size_t(i)], g[size_t(i)], 1.0f - mu);
                u_ref[size_t(i)] = nesterov ? lerp_fma(g[size_t(i)], m_ref[size_t(i)], mu) : m_ref[size_t(i)];
                p_ref[size_t(i)] = std::fma(-0.02f, u_ref[size_t(i)], p[size_t(i)] * 0.999f);
            }
            auto md = upload(m), gd = upload(g), pd = upload(p);
            auto ud = poisoned(size_t(n));
            cuda::muon_momentum(md.data(), ud.data(), gd.data(), n, mu, nesterov);
            cuda::muon_apply(pd.data(), ud.data(), n, 0.999f, -0.02f);
            EXPECT_EQ(download(md), m_ref);
            EXPECT_EQ(download(ud), u_ref);
            EXPECT_EQ(download(pd), p_ref);
        }
}

} // namespace
} // namespace zaya
