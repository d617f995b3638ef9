// Backward of the elementwise ops of elementwise.cu: embedding, residual scaling, GELU. No atomics: every output
// element has one writer thread, which sums its terms in a fixed order (the per-column parameter gradients through
// column_sum.cuh), so the results are deterministic.
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/moe.h"
#include "ops/cuda/ops.h"

#include <climits>
#include <cstdint>
#include <utility>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

// The parameter gradients' terms, summed over the rows by column_sum_add: g[n, i]·(x[n, i] + add[i]), x null: g·add[i]
// (a scale's or a bias's gradient), and the embedding scale's g[n, i]·(table[tokens[n], i] + bias[i]).
struct ScaledColumn {
    const float *g, *x, *add;
    int64_t D;
    __device__ float operator()(int64_t n, int64_t i) const {
        return g[n * D + i] * ((x ? x[n * D + i] : 0.0f) + add[i]);
    }
};
struct EmbeddingScaleGrad {
    const float *g;
    const int32_t *tokens;
    const float *table, *bias;
    int64_t D;
    __device__ float operator()(int64_t n, int64_t i) const {
        return g[n * D + i] * (table[int64_t(tokens[n]) * D + i] + bias[i]);
    }
};

// The rows grouped by token id on the device, with no host round trip: a stable LSD radix sort by the id's digits
// of kDigitBits, each pass one stable counting sort (moe_group_tokens, the experts' grouping), rows of skip_token
// sent to the extra group past every digit (so they end last and out of the runs). int32 ids need kPasses passes.
constexpr int kDigitBits = kTokenIdDigitBits, kPasses = 3;
constexpr int64_t kDigits = int64_t(1) << kDigitBits;
static_assert(kDigitBits * kPasses >= 31, "the passes cover every non-negative int32 id");

// keys[r] = digit `pass` of the id of row order[r] (order null: row r), or kDigits for skip_token's rows.
__global__ void id_digit_kernel(int32_t *keys, const int32_t *tokens, const int32_t *order, int64_t N, int pass,
                                int32_t skip_token) {
    const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r >= N) return;
    const int32_t id = tokens[order ? order[r] : r];
    keys[r] = id == skip_token ? int32_t(kDigits) : int32_t((id >> (pass * kDigitBits)) & (kDigits - 1));
}

// next[j] = order[perm[j]]: a pass's stable permutation applied to the order so far.
__global__ void compose_kernel(int32_t *next, const int32_t *order, const int32_t *perm, int64_t N) {
    const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (j < N) next[j] = order[perm[j]];
}

// Thread (sorted position j, column i), j < *rows (the rows that are not skip_token's): where j
// starts a run of one id, dtable[id, i] += dout[n, i]·scale[i] over the run's rows n = order[j] …, in token order
// (as the CPU loop adds them). Runs are distinct ids, so each element has one writer.
__global__ void embedding_table_grad_kernel(float *dtable, const float *dout, const int32_t *tokens,
                                            const float *scale, const int32_t *order, const int64_t *rows_of,
                                            int64_t N, int64_t D) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= N * D) return;
    const int64_t j = k / D, i = k % D, rows = *rows_of;
    if (j >= rows) return;
    const int32_t id = tokens[order[j]];
    if (j > 0 && tokens[order[j - 1]] == id) return; // not a run's first row
    float *dt = dtable + int64_t(id) * D + i;
    float acc = *dt;
    for (int64_t r = j; r < rows && tokens[order[r]] == id; ++r) acc += dout[int64_t(order[r]) * D + i] * scale[i];
    *dt = acc;
}

__global__ void residual_input_grads_kernel(float *dx, float *dres, const float *dout, const float *hs_scale,
                                            const float *res_scale, int64_t n, int64_t D, bool accumulate_dres) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const int64_t i = k % D;
    const float g = dout[k];
    dx[k] = g * hs_scale[i];
    dres[k] = accumulate_dres ? dres[k] + g * res_scale[i] : g * res_scale[i];
}

__global__ void gelu_backward_kernel(float *dx, const float *dy, const float *x, int64_t n) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const float v = x[k];
    // Φ(v) as erfc: 1 + erf(v/√2) would cancel for v ≪ 0, where the CPU's double 1 + erf does not.
    const float cdf = 0.5f * erfcf(-v * 0.70710678118654752f);
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    dx[k] = dy[k] * (cdf + v * pdf);
}

} // namespace

// The table gradient groups the rows by token id on the device (id_digit_kernel's radix sort) and runs one thread
// per (row, column) where a run of one id starts: full parallelism without atomics, and nothing waits for the host.
void embedding_backward(float *dtable, float *dbias, float *dscale, const float *dout, const int32_t *tokens,
                        const float *table, const float *bias, const float *scale, int64_t N, int64_t D,
                        int32_t skip_token) {
    if (N * D == 0) return;
    column_sum_add<float>(dbias, ScaledColumn{dout, nullptr, scale, D}, N, D);
    column_sum_add<float>(dscale, EmbeddingScaleGrad{dout, tokens, table, bias, D}, N, D);
    const int64_t *rows = nullptr;
    const int32_t *order = rows_by_token_id(tokens, N, skip_token, &rows);
    embedding_table_grad_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(dtable, dout, tokens, scale, order, rows,
                                                                          N, D);
    ZAYA_CUDA_LAUNCHED();
}

const int32_t *rows_by_token_id(const int32_t *tokens, int64_t N, int32_t skip_token, const int64_t **rows) {
    if (N > INT32_MAX) fail("rows_by_token_id: {} rows exceed the int32 row order", N);
    // Grow-once scratch: keys, the order so far, a pass's permutation and the composed order [N] int32 each, then the
    // groups' offsets [kDigits + 2] int64 (an allocation here was a cudaMalloc and a cudaFree, which waits, a step).
    const size_t n4 = size_t(N) * sizeof(int32_t);
    const auto p = scratch_pieces<5>(Scratch::EmbeddingIndex, {n4, n4, n4, n4, size_t(kDigits + 2) * sizeof(int64_t)});
    int32_t *keys = reinterpret_cast<int32_t *>(p[0]), *order = reinterpret_cast<int32_t *>(p[1]);
    int32_t *perm = reinterpret_cast<int32_t *>(p[2]), *next = reinterpret_cast<int32_t *>(p[3]);
    auto *offsets = reinterpret_cast<int64_t *>(p[4]);
    for (int pass = 0; pass < kPasses; ++pass) {
        id_digit_kernel<<<blocks_for(N, kThreads), kThreads>>>(keys, tokens, pass == 0 ? nullptr : order, N, pass,
                                                              skip_token);
        ZAYA_CUDA_LAUNCHED();
        moe_group_tokens(pass == 0 ? order : perm, offsets, keys, N, kDigits);
        if (pass == 0) continue;
        compose_kernel<<<blocks_for(N, kThreads), kThreads>>>(next, order, perm, N);
        ZAYA_CUDA_LAUNCHED();
        std::swap(order, next);
    }
    *rows = offsets + kDigits; // the groups before the skip token's
    return order;
}

void residual_scale_backward(float *dx, float *dres, float *d_hs_scale, float *d_hs_bias, float *d_res_scale,
                             float *d_res_bias, const float *dout, const float *x, const float *res,
                             const float *hs_scale, const float *hs_bias, const float *res_scale,
                             const float *res_bias, int64_t N, int64_t D, bool accumulate_dres) {
    if (N * D == 0) return;
    // The sums first: they read dout, which the second kernel would then be free to overwrite were dx aliasing it.
    column_sum_add<float>(d_hs_bias, ScaledColumn{dout, nullptr, hs_scale, D}, N, D);
    column_sum_add<float>(d_hs_scale, ScaledColumn{dout, x, hs_bias, D}, N, D);
    column_sum_add<float>(d_res_bias, ScaledColumn{dout, nullptr, res_scale, D}, N, D);
    column_sum_add<float>(d_res_scale, ScaledColumn{dout, res, res_bias, D}, N, D);
    residual_input_grads_kernel<<<blocks_for(N * D, kThreads), kThreads>>>(dx, dres, dout, hs_scale, res_scale, N * D,
                                                                           D, accumulate_dres);
    ZAYA_CUDA_LAUNCHED();
}

void gelu_backward(float *dx, const float *dy, const float *x, int64_t n) {
    if (n == 0) return;
    gelu_backward_kernel<<<blocks_for(n, kThreads), kThreads>>>(dx, dy, x, n);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
