// Router selection (one thread per token: K is a few dozen classes at most) and the grouping of tokens by expert
// as a stable counting sort in chunks: count per (chunk, expert), scan, scatter — no atomics, deterministic.
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/moe.h"
#include "ops/cuda/router_select.cuh"

namespace zaya::cuda {

namespace {

__global__ void router_select_forward_kernel(float *probs, int32_t *choice, float *p_sel, const float *logits,
                                             const float *bias, int64_t N, int64_t K) {
    const int64_t n = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (n >= N) return;
    router_select_token(probs + n * K, choice[n], p_sel[n], logits + n * K, bias, K);
}

// p_c = softmax(l)_c  ⇒  ∂p_c/∂l_e = p_c(δ_ce − p_e); one thread per (token, class).
__global__ void router_select_backward_kernel(float *dlogits, const float *dp_sel, const float *probs,
                                              const int32_t *choice, int64_t N, int64_t K) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * K) return;
    const int64_t n = i / K, e = i % K;
    const int32_t c = choice[n];
    const float g = dp_sel[n] * probs[n * K + c];
    dlogits[i] = g * ((e == c ? 1.0f : 0.0f) - probs[i]);
}

// Tokens are sorted in chunks of kChunk, one block (of kChunk threads) per chunk.
constexpr int kChunk = int(kGroupChunk);

// The block's chunk of choices into shared memory (ch[kChunk]); returns the chunk's length. Ends with a barrier.
__device__ int load_chunk(int32_t *ch, const int32_t *choice, int64_t N) {
    const int64_t n0 = int64_t(blockIdx.x) * kChunk;
    const int len = int(min(int64_t(kChunk), N - n0));
    if (int(threadIdx.x) < len) ch[threadIdx.x] = choice[n0 + threadIdx.x];
    __syncthreads();
    return len;
}

// counts[chunk·(E+1) + e] = tokens of the chunk routed to e.
__global__ void __launch_bounds__(kChunk)
    count_by_expert_kernel(int64_t *counts, const int32_t *choice, int64_t N, int64_t E) {
    __shared__ int32_t ch[kChunk];
    const int tid = int(threadIdx.x);
    const int len = load_chunk(ch, choice, N);
    for (int64_t e = tid; e <= E; e += kChunk) {
        int64_t c = 0;
        for (int i = 0; i < len; ++i) c += ch[i] == e;
        counts[int64_t(blockIdx.x) * (E + 1) + e] = c;
    }
}

// One block. base[chunk·(E+1) + e] ← where the chunk's first token of expert e goes: offsets[e] + the tokens of e
// in earlier chunks. offsets[E+2] = the groups' starts, offsets[E+1] = N.
__global__ void __launch_bounds__(kChunk)
    scan_counts_kernel(int64_t *base, int64_t *offsets, const int64_t *counts, int64_t chunks, int64_t E) {
    const int tid = int(threadIdx.x);
    for (int64_t e = tid; e <= E; e += kChunk) { // per expert: exclusive scan over the chunks, total last
        int64_t run = 0;
        for (int64_t c = 0; c < chunks; ++c) {
            base[c * (E + 1) + e] = run;
            run += counts[c * (E + 1) + e];
        }
        offsets[e + 1] = run;
    }
    __syncthreads();
    if (tid == 0) { // the group sizes become group starts
        offsets[0] = 0;
        for (int64_t e = 0; e <= E; ++e) offsets[e + 1] += offsets[e];
    }
    __syncthreads();
    for (int64_t e = tid; e <= E; e += kChunk)
        for (int64_t c = 0; c < chunks; ++c) base[c * (E + 1) + e] += offsets[e];
}

// Token n0+i goes to base[its expert] + the number of earlier tokens of the chunk with the same expert (stable).
__global__ void __launch_bounds__(kChunk)
    scatter_by_expert_kernel(int32_t *order, const int64_t *base, const int32_t *choice, int64_t N, int64_t E) {
    __shared__ int32_t ch[kChunk];
    const int tid = int(threadIdx.x);
    const int64_t n0 = int64_t(blockIdx.x) * kChunk;
    const int len = load_chunk(ch, choice, N);
    if (tid < len) {
        const int32_t e = ch[tid];
        int64_t rank = 0;
        for (int i = 0; i < tid; ++i) rank += ch[i] == e;
        order[base[int64_t(blockIdx.x) * (E + 1) + e] + rank] = int32_t(n0 + tid);
    }
}

__global__ void add_group_sizes_kernel(int64_t *sizes, const int64_t *offsets, int64_t groups) {
    const int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (g < groups) sizes[g] += offsets[g + 1] - offsets[g];
}

} // namespace

void add_group_sizes(int64_t *sizes, const int64_t *offsets, int64_t groups) {
    if (groups <= 0) return;
    add_group_sizes_kernel<<<blocks_for(groups, 128), 128, 0, launch_stream()>>>(sizes, offsets, groups);
    ZAYA_CUDA_LAUNCHED();
}

void router_select_forward(float *probs, int32_t *choice, float *p_sel, const float *logits, const float *bias,
                           int64_t N, int64_t K) {
    if (N == 0) return;
    router_select_forward_kernel<<<blocks_for(N, 128), 128, 0, launch_stream()>>>(probs, choice, p_sel, logits, bias, N,
                                                                                  K);
    ZAYA_CUDA_LAUNCHED();
}

void router_select_backward(float *dlogits, const float *dp_sel, const float *probs, const int32_t *choice, int64_t N,
                            int64_t K) {
    if (N == 0) return;
    router_select_backward_kernel<<<blocks_for(N * K, 256), 256, 0, launch_stream()>>>(dlogits, dp_sel, probs, choice,
                                                                                       N, K);
    ZAYA_CUDA_LAUNCHED();
}

void moe_group_tokens(int32_t *order, int64_t *offsets, const int32_t *choice, int64_t N, int64_t E) {
    if (E < 0) fail("moe_group_tokens: bad expert count {}", E);
    const int64_t chunks = (N + kChunk - 1) / kChunk;
    if (chunks == 0) { // no tokens: every group is empty
        fill_bytes(offsets, 0, size_t(E + 2) * sizeof(int64_t));
        return;
    }
    // Per-chunk counts and bases in grow-once scratch: no allocation, and no synchronisation, per layer.
    const size_t n = size_t(chunks * (E + 1));
    auto *counts = static_cast<int64_t *>(device_scratch(Scratch::MoeGroupCounts, group_tokens_scratch_bytes(N, E)));
    int64_t *base = counts + n;
    count_by_expert_kernel<<<unsigned(chunks), kChunk, 0, launch_stream()>>>(counts, choice, N, E);
    ZAYA_CUDA_LAUNCHED();
    scan_counts_kernel<<<1, kChunk, 0, launch_stream()>>>(base, offsets, counts, chunks, E);
    ZAYA_CUDA_LAUNCHED();
    scatter_by_expert_kernel<<<unsigned(chunks), kChunk, 0, launch_stream()>>>(order, base, choice, N, E);
    ZAYA_CUDA_LAUNCHED();
}

} // namespace zaya::cuda
