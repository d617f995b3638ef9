// Backward of the elementwise ops of elementwise.cu: embedding, residual scaling, GELU. No atomics: every output
// element has one writer thread, which sums its terms in a fixed order (the per-column parameter gradients through
// column_sum.cuh), so the results are deterministic.
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/column_sum.cuh"
#include "ops/cuda/ops.h"

#include <algorithm>
#include <vector>

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

// Thread (run r, column i): dtable[id, i] += dout[n, i]·scale[i] for the rows n = order[start[r]] … of run r, all of
// token id, in token order (as the CPU loop adds them). Runs are distinct ids, so each element has one writer.
__global__ void embedding_table_grad_kernel(float *dtable, const float *dout, const int32_t *tokens,
                                            const float *scale, const int64_t *order, const int64_t *start,
                                            int64_t runs, int64_t D) {
    const int64_t k = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (k >= runs * D) return;
    const int64_t r = k / D, i = k % D;
    float *dt = dtable + int64_t(tokens[order[start[r]]]) * D + i;
    float acc = *dt;
    for (int64_t j = start[r]; j < start[r + 1]; ++j) acc += dout[order[j] * D + i] * scale[i];
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

// The table gradient groups the rows by token id on the host (a stable sort, so each id's rows stay in token
// order) and runs one thread per (id, column): full parallelism without atomics. Its cost: a device→host copy of
// the N token ids that waits for the GPU, an O(N log N) host sort (overlapping the column-sum kernels), and an
// upload of ≤ 2N+1 int64s into scratch.
void embedding_backward(float *dtable, float *dbias, float *dscale, const float *dout, const int32_t *tokens,
                        const float *table, const float *bias, const float *scale, int64_t N, int64_t D,
                        int32_t skip_token) {
    if (N * D == 0) return;
    std::vector<int32_t> ids(static_cast<size_t>(N));
    copy_to_host(ids.data(), tokens, ids.size() * sizeof(int32_t));
    // index = order[rows] (the rows not of skip_token, grouped by id), then start[runs + 1] (into order, per id)
    std::vector<int64_t> index;
    for (int64_t n = 0; n < N; ++n) {
        const int32_t id = ids[size_t(n)];
        if (id < 0) fail("embedding_backward: token id {} at row {} is negative", id, n); // the lookup would too
        if (id != skip_token) index.push_back(n);
    }
    column_sum_add<float>(dbias, ScaledColumn{dout, nullptr, scale, D}, N, D);
    column_sum_add<float>(dscale, EmbeddingScaleGrad{dout, tokens, table, bias, D}, N, D);

    const auto id_of = [&](int64_t row) { return ids[size_t(row)]; };
    std::stable_sort(index.begin(), index.end(), [&](int64_t a, int64_t b) { return id_of(a) < id_of(b); });
    const int64_t rows = int64_t(index.size());
    for (int64_t j = 0; j < rows; ++j)
        if (j == 0 || id_of(index[size_t(j)]) != id_of(index[size_t(j - 1)])) index.push_back(j);
    const int64_t runs = int64_t(index.size()) - rows;
    if (runs == 0) return; // every row was skip_token's
    index.push_back(rows);
    // In grow-once scratch: an allocation here was a cudaMalloc and a cudaFree (which waits for the device) a step.
    auto *index_d = static_cast<int64_t *>(device_scratch(Scratch::EmbeddingIndex, index.size() * sizeof(int64_t)));
    copy_to_device(index_d, index.data(), index.size() * sizeof(int64_t));
    embedding_table_grad_kernel<<<blocks_for(runs * D, kThreads), kThreads>>>(dtable, dout, tokens, scale, index_d,
                                                                              index_d + rows, runs, D);
    ZAYA_CUDA_LAUNCHED();
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
