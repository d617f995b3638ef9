// LM head + cross-entropy, chunk by chunk: logits = x_c·Wᵀ (+ bias) (GEMM), loss and gradient in place of the
// logits (one block per row), then dx_c = G·W and dW += Gᵀ·x_c (GEMMs), dbias += column sums of G. The GEMMs are
// fp32 or take bf16 copies of their operands (the weight converted once per call). The chunk's
// logits are all the scratch there is. The forward-only loss stops after the per-row losses.
#include "core/error.h"
#include "ops/cuda/block.h"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/lm_head.h"
#include "ops/cuda/ops.h"

#include <algorithm>
#include <optional>
#include <vector>

namespace zaya::cuda {

namespace {

constexpr int kThreads = 256;

// Row `blockIdx.x` of logits[rows, V]: loss[row] = logsumexp − logit[target], and, if `grad`, in place the gradient
// scale·(softmax − onehot(target)); rows without a target get loss 0 and gradient 0 (cpu::cross_entropy_*).
__global__ void __launch_bounds__(kThreads) cross_entropy_rows_kernel(float *logits, float *losses,
                                                                      const int32_t *targets, int64_t V, float scale,
                                                                      bool grad) {
    const int tid = int(threadIdx.x);
    float *l = logits + int64_t(blockIdx.x) * V;
    const int32_t target = targets[blockIdx.x]; // the same for the whole block: the branch below is uniform
    if (target < 0) {
        if (grad)
            for (int64_t v = tid; v < V; v += kThreads) l[v] = 0.0f;
        if (tid == 0) losses[blockIdx.x] = 0.0f;
        return;
    }
    const float target_logit = l[target]; // read before any thread overwrites the row (barriers follow)
    float m = -INFINITY;
    for (int64_t v = tid; v < V; v += kThreads) m = fmaxf(m, l[v]);
    m = block_max<kThreads>(m);
    float s = 0.0f;
    for (int64_t v = tid; v < V; v += kThreads) s += expf(l[v] - m);
    s = block_sum<kThreads>(s);
    if (tid == 0) losses[blockIdx.x] = logf(s) + m - target_logit;
    if (!grad) return;
    const float f = scale / s;
    for (int64_t v = tid; v < V; v += kThreads) l[v] = f * expf(l[v] - m) - (v == target ? scale : 0.0f);
}

// The backward half, when wanted: dx (=), dW and dbias (+=, dbias may be null) for loss_scale × the mean loss.
struct HeadGrads {
    float *dx, *dW, *dbias;
    float loss_scale;
};

// bf16 operand copies for the tensor-core GEMMs, carved from one grow-once scratch (256-byte aligned pieces):
// W [V,D] once per call, a chunk's x rows [chunk,D] and logit gradient [chunk,V].
struct Bf16Operands {
    uint16_t *W, *x, *G;
    Bf16Operands(int64_t chunk, int64_t D, int64_t V) {
        const auto p = scratch_pieces(Scratch::LmHeadBf16, lm_head_bf16_pieces(chunk, D, V));
        W = reinterpret_cast<uint16_t *>(p[0]), x = reinterpret_cast<uint16_t *>(p[1]);
        G = reinterpret_cast<uint16_t *>(p[2]);
    }
};

// Both entry points: losses[N] (device), the mean returned; with `grads`, each chunk's backward too.
double run_head(const char *op, float *losses, const HeadGrads *grads, const float *x, const float *W,
                const float *bias, const int32_t *targets, int64_t N, int64_t D, int64_t V, int64_t chunk_rows,
                bool bf16) {
    if (chunk_rows <= 0) fail("{}: chunk_rows must be positive, got {}", op, chunk_rows);
    if (N == 0) return 0.0;
    std::vector<int32_t> host_targets(static_cast<size_t>(N));
    copy_to_host(host_targets.data(), targets, size_t(N) * sizeof(int32_t));
    int64_t count = 0;
    for (int32_t t : host_targets) {
        if (t >= V) fail("{}: target {} is outside the vocabulary ({})", op, t, V);
        count += t >= 0;
    }
    if (count == 0) { // nothing to learn from: no loss, no gradient (dx is still written)
        fill_bytes(losses, 0, size_t(N) * sizeof(float));
        if (grads) fill_bytes(grads->dx, 0, size_t(N * D) * sizeof(float));
        return 0.0;
    }
    const int64_t chunk = std::min(chunk_rows, N);
    float *logits = static_cast<float *>(device_scratch(Scratch::LmHeadLogits, size_t(chunk * V) * sizeof(float)));
    const float scale = grads ? grads->loss_scale / float(count) : 0.0f;
    bf16 = bf16 && D % 8 == 0 && V % 8 == 0; // rows of bf16 operands must start 16-byte aligned
    std::optional<Bf16Operands> h;
    if (bf16) {
        h.emplace(chunk, D, V);
        to_bf16(h->W, W, V * D);
    }
    for (int64_t r0 = 0; r0 < N; r0 += chunk) {
        const int64_t rows = std::min(chunk, N - r0);
        const float *xc = x + r0 * D;
        if (bf16) {
            to_bf16(h->x, xc, rows * D);
            gemm_bf16(false, true, rows, V, D, 1.0f, h->x, D, h->W, D, 0.0f, logits, V);
        } else {
            gemm_f32(false, true, rows, V, D, 1.0f, xc, D, W, D, 0.0f, logits, V); // logits = x_c·Wᵀ
        }
        if (bias) add_bias_rows(logits, V, bias, rows, V);
        cross_entropy_rows_kernel<<<unsigned(rows), kThreads>>>(logits, losses + r0, targets + r0, V, scale,
                                                                 grads != nullptr);
        ZAYA_CUDA_LAUNCHED();
        if (!grads) continue;
        if (bf16) {
            to_bf16(h->G, logits, rows * V);
            gemm_bf16(false, false, rows, D, V, 1.0f, h->G, V, h->W, D, 0.0f, grads->dx + r0 * D, D);
            gemm_bf16(true, false, V, D, rows, 1.0f, h->G, V, h->x, D, 1.0f, grads->dW, D);
        } else {
            gemm_f32(false, false, rows, D, V, 1.0f, logits, V, W, D, 0.0f, grads->dx + r0 * D, D); // dx_c = G·W
            gemm_f32(true, false, V, D, rows, 1.0f, logits, V, xc, D, 1.0f, grads->dW, D);          // dW += Gᵀ·x_c
        }
        if (grads->dbias) column_dot_add(grads->dbias, logits, V, nullptr, 0, rows, V);
    }
    std::vector<float> host_losses(static_cast<size_t>(N));
    copy_to_host(host_losses.data(), losses, host_losses.size() * sizeof(float)); // waits for the GPU
    double total = 0.0;
    for (float l : host_losses) total += double(l); // ignored rows hold 0
    return total / double(count);
}

} // namespace

double lm_head_cross_entropy(float *dx, float *dW, float *dbias, const float *x, const float *W, const float *bias,
                             const int32_t *targets, int64_t N, int64_t D, int64_t V, float loss_scale,
                             int64_t chunk_rows, bool bf16) {
    auto *losses = static_cast<float *>(device_scratch(Scratch::LmHeadLosses, size_t(N) * sizeof(float)));
    const HeadGrads grads{dx, dW, dbias, loss_scale};
    return run_head("lm_head_cross_entropy", losses, &grads, x, W, bias, targets, N, D, V, chunk_rows, bf16);
}

double lm_head_loss(float *losses, const float *x, const float *W, const float *bias, const int32_t *targets,
                    int64_t N, int64_t D, int64_t V, int64_t chunk_rows, bool bf16) {
    return run_head("lm_head_loss", losses, nullptr, x, W, bias, targets, N, D, V, chunk_rows, bf16);
}

} // namespace zaya::cuda
