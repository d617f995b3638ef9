// Decode kernels (decode.h). The linears are what a batch-1 step spends its time on: they must stream W at the
// memory's bandwidth, so each warp owns one output, its lanes read consecutive 16-byte pieces of that row (fully
// coalesced), and the few x rows are staged once per block in shared memory, so W is the only global traffic.
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/decode.h"
#include "ops/cuda/last_block.cuh"
#include "ops/cuda/launch.cuh"
#include "ops/cuda/residual_scale.cuh"
#include "ops/cuda/router_select.cuh"
#include "ops/cuda/softmax_pow2.cuh"
#include "ops/cuda/swiglu.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace zaya::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kLinearWarps = 8;             // outputs per block
constexpr int64_t kSharedLimit = 48 * 1024; // dynamic shared memory without opting in
// The linears opt in to more: 8 rows of a 2048-wide x (64 KiB) in one pass, so one read of W serves a step of 8
// sequences.
constexpr int64_t kLinearSharedLimit = 96 * 1024;

__device__ __forceinline__ float widen(uint16_t b) { return __uint_as_float(unsigned(b) << 16); }

// The KV cache's elements (decode.h): fp32, or bf16 bits rounded to nearest even as they are stored (read back
// through Piece, below). kept(x) is what the cache keeps of x: attention reads a newest key or value from its fp32
// row through it, before the append.
template <class T> struct Kv;
template <> struct Kv<float> {
    __device__ static float store(float x) { return x; }
    __device__ static float kept(float x) { return x; }
};
template <> struct Kv<uint16_t> {
    __device__ static uint16_t store(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
    __device__ static float kept(float x) { return widen(store(x)); }
};

// The softmax of a cache's element, as the CPU's (ops/cpu/attention.cpp, CachedSoftmax): an fp32 cache's natural
// one; a bf16 cache's in powers of two — scores in log2 units, an integer maximum M = ⌊max⌋, P = 2^(t − M) as
// 2^(t − ⌊t⌋)·2^(⌊t⌋ − M) (the rounding of P the same whatever M), each P rounded to bf16 to weigh the values (the
// sums take it as it is), pieces rescaled by exact powers of two.
template <class T> struct CacheSoftmax;
template <> struct CacheSoftmax<float> {
    __device__ static float scale(float s) { return s; }
    __device__ static float max_of(float m) { return m; }
    __device__ static float prob(float t, float m) { return expf(t - m); }
    __device__ static float weight(float p) { return p; }
    __device__ static float rescale(float dm) { return expf(dm); }
};
template <> struct CacheSoftmax<uint16_t> { // (softmax_pow2.cuh)
    __device__ static float scale(float s) { return s * 1.44269504088896341f; }
    __device__ static float max_of(float m) { return pow2::max_of_scores(m); }
    __device__ static float prob(float t, float m) { return pow2::exp2_below(t, m); }
    __device__ static float weight(float p) { return widen(Kv<uint16_t>::store(p)); }
    __device__ static float rescale(float dm) { return pow2::pow2_int(dm); } // 0 for −∞
};

// Two bf16 in one 32-bit word (the lower element in the low half) as two floats.
__device__ __forceinline__ void widen_pair(float *w, unsigned u) {
    w[0] = __uint_as_float(u << 16), w[1] = __uint_as_float(u & 0xFFFF0000u);
}

// One 16-byte piece of a weight row, as floats: 8 bf16 or 4 fp32 values.
template <class T> struct Piece;
template <> struct Piece<uint16_t> {
    static constexpr int n = 8;
    __device__ static void load(float *w, const uint16_t *p) {
        const uint4 u = *reinterpret_cast<const uint4 *>(p);
        const unsigned words[4] = {u.x, u.y, u.z, u.w};
        for (int k = 0; k < 4; ++k) widen_pair(w + 2 * k, words[k]);
    }
    __device__ static float one(const uint16_t *p) { return widen(*p); }
};
template <> struct Piece<float> {
    static constexpr int n = 4;
    __device__ static void load(float *w, const float *p) {
        const float4 f = *reinterpret_cast<const float4 *>(p);
        w[0] = f.x, w[1] = f.y, w[2] = f.z, w[3] = f.w;
    }
    __device__ static float one(const float *p) { return *p; }
};

// The row values a linear multiplies W by: as they are for fp32 weights; rounded to bf16 (nearest even) for bf16
// weights — as the CPU decoder's default for a bf16 model (infer/decoder.h matmul_precision_for) and this decoder's
// own GEMM prefill passes (bf16 copies of the rows) take them, so a step, a prefill and the CPU give the same products.
template <class T> __device__ __forceinline__ float operand(float v) {
    if constexpr (std::is_same_v<T, uint16_t>) return __bfloat162float(__float2bfloat16_rn(v));
    else return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = kWarp / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

// A block's part of a linear: outputs [8·blockIdx.x, +8) of its rows, a warp each. Plain: blockIdx.y = 0 and the
// block takes rows [0, nrows) of x with one W. Routed (ex.choice): blockIdx.y = the row, W = that row's expert.
// vec: 16-byte loads (I a multiple of the piece, W 16-byte aligned). Waits for the previous kernel.
template <class T>
__device__ void linear_rows_part(float *y, int64_t ldy, const float *x, const T *W, const float *b, int nrows,
                                 int64_t I, int64_t O, const ExpertRows &ex, bool vec, Epilogue act,
                                 const int32_t *row_active, const SecondOutput &second) {
    extern __shared__ float xs[]; // [nrows, I]
    const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp;
    const int64_t o = int64_t(blockIdx.x) * kLinearWarps + warp;
    const int64_t row0 = blockIdx.y;
    // A plain linear's weights are known before the kernel before it ends: its warp starts pulling its row into L2
    // (a routed one must wait for the router's choice).
    if (!ex.choice && o < O) prefetch_l2(W + o * I, I * int64_t(sizeof(T)), lane, kWarp);
    await_previous_kernel();
    float scale = 1.0f;
    if (ex.choice) {
        const int32_t e = ex.choice[row0];
        if (ex.p_sel) scale = ex.p_sel[row0];
        if (e >= ex.E || e < 0) { // the skip slot: no matrix at all (the whole block takes this branch)
            if (o < O) {
                const float v = ex.skip_x ? ex.skip_x[row0 * ex.ld_skip + o] : 0.0f;
                if (lane == 0) y[row0 * ldy + o] = scale * v;
            }
            return;
        }
        W += int64_t(e) * O * I;
    }
    if (ex.swiglu_input) { // routed: one row, [gate ‖ up]
        const float *hr = x + row0 * 2 * I;
        for (int64_t i = threadIdx.x; i < I; i += blockDim.x) xs[i] = operand<T>(swiglu_value(hr[i], hr[I + i]));
    } else {
        const float *xr = x + row0 * I;
        for (int64_t i = threadIdx.x; i < nrows * I; i += blockDim.x) xs[i] = operand<T>(xr[i]);
    }
    __syncthreads();
    if (o >= O) return;
    const T *w = W + o * I;
    unsigned live = 0; // bit r: row r computed
    for (int r = 0; r < nrows; ++r)
        if (!row_active || row_active[r]) live |= 1u << r;
    float acc[kDecodeRowsPerPass];
    for (int r = 0; r < kDecodeRowsPerPass; ++r) acc[r] = 0.0f;
    if (vec) {
        constexpr int P = Piece<T>::n;
#pragma unroll 2
        for (int64_t i = int64_t(lane) * P; i < I; i += kWarp * P) {
            float wv[P];
            Piece<T>::load(wv, w + i);
#pragma unroll
            for (int r = 0; r < kDecodeRowsPerPass; ++r) { // static indices keep acc in registers
                if (r >= nrows) break;
                if (!(live >> r & 1u)) continue;
                const float *xp = xs + r * I + i;
                float s = 0.0f;
#pragma unroll
                for (int k = 0; k < P; ++k) s += wv[k] * xp[k];
                acc[r] += s;
            }
        }
    } else {
        for (int64_t i = lane; i < I; i += kWarp) {
            const float wv = Piece<T>::one(w + i);
#pragma unroll
            for (int r = 0; r < kDecodeRowsPerPass; ++r)
                if (r < nrows && (live >> r & 1u)) acc[r] += wv * xs[r * I + i];
        }
    }
    const float bias = b ? b[o] : 0.0f;
#pragma unroll
    for (int r = 0; r < kDecodeRowsPerPass; ++r) {
        if (r >= nrows) break;
        const float s = warp_sum(acc[r]);
        float out = s + bias;
        if (act == Epilogue::Gelu) out = 0.5f * out * (1.0f + erff(out * 0.70710678118654752f)); // as gelu_forward
        float *dst = o < second.from ? y + (row0 + r) * ldy + o : second.y + (row0 + r) * second.ld + (o - second.from);
        if (lane == 0) *dst = (live >> r & 1u) ? scale * out : 0.0f;
    }
}

// Σ over a block of kBlockThreads threads of each thread's v, in a fixed order (warp shuffles, then the warps' sums
// in turn); every thread gets it. `scratch` holds kBlockThreads / 32 floats.
constexpr int kBlockThreads = kLinearWarps * kWarp; // the linears' and the router's blocks
__device__ float block_total(float v, float *scratch) {
    v = warp_sum(v);
    const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp;
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < kBlockThreads / kWarp; ++w) total += scratch[w];
    __syncthreads(); // scratch reusable
    return total;
}

// Rows [row0, row0 + n) of y (written by the other blocks too: read from L2) go into the residual stream, which
// is then normed (ResidualNormAfter), by one block.
__device__ void residual_norm_rows(const ResidualNormAfter &a, const float *y, int64_t row0, int n, int64_t D) {
    __shared__ float scratch[kBlockThreads / kWarp];
    for (int64_t row = row0; row < row0 + n; ++row) {
        const int64_t base = row * D;
        float ss = 0.0f;
        for (int64_t i = threadIdx.x; i < D; i += kBlockThreads) {
            const float v = residual_scaled(load_l2(y + base + i), a.stream[base + i], a.hs_scale, a.hs_bias,
                                            a.res_scale, a.res_bias, i);
            a.stream[base + i] = v;
            ss += v * v;
        }
        const float r = rsqrtf(block_total(ss, scratch) / float(D) + a.eps);
        if (threadIdx.x == 0) a.rstd[row] = r;
        for (int64_t i = threadIdx.x; i < D; i += kBlockThreads) a.normed[base + i] = a.w[i] * (a.stream[base + i] * r);
    }
}

// grid (ceil(O/8), rows), block 256: linear_rows_part, then (after.stream) the residual scaling and norm of the
// block row's rows — a plain pass's nrows rows, or the routed form's one row — by the last of its blocks.
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    linear_rows_kernel(float *y, int64_t ldy, const float *x, const T *W, const float *b, int nrows, int64_t I,
                       int64_t O, ExpertRows ex, bool vec, Epilogue act, const int32_t *row_active,
                       SecondOutput second, ResidualNormAfter after) {
    linear_rows_part(y, ldy, x, W, b, nrows, I, O, ex, vec, act, row_active, second);
    if (after.stream && arrive_last(after.counters + blockIdx.y, gridDim.x))
        residual_norm_rows(after, y, blockIdx.y, nrows, O);
}

template <class T> bool can_vectorise(const T *W, int64_t I) {
    return I % Piece<T>::n == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0;
}

// Rows per pass: as many as fit the shared memory (x staged whole) up to kDecodeRowsPerPass.
int64_t rows_per_pass(int64_t I) {
    const int64_t rows = std::min<int64_t>(kDecodeRowsPerPass, kLinearSharedLimit / (I * int64_t(sizeof(float))));
    if (rows < 1)
        fail("decode linear: input width {} does not fit shared memory (at most {})", I, kLinearSharedLimit / 4);
    return rows;
}

// The opt-in above 48 KiB, once per kernel instantiation, on its first launch (a prefill pass or the eager step
// before any graph capture).
template <auto kKernel> void allow_linear_shared() {
    static const bool done = [] {
        ZAYA_CUDA_CHECK(
            cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kLinearSharedLimit)));
        return true;
    }();
    (void)done;
}

// The residual stream and norm after a linear of O outputs into y (row stride ldy): it reads whole rows of y.
void check_after(const ResidualNormAfter &a, int64_t ldy, int64_t O, const SecondOutput &second) {
    if (!a.stream) return;
    if (ldy != O || second.y || !a.counters)
        fail("decode linear: a residual norm after it needs rows of y {} wide (not {}), no second output and counters",
             O, ldy);
}

// after's rows from r0 on.
ResidualNormAfter rows_from(ResidualNormAfter a, int64_t r0, int64_t D) {
    if (a.stream) a.stream += r0 * D, a.normed += r0 * D, a.rstd += r0;
    return a;
}

template <class T>
void linear_rows(float *y, int64_t ldy, const float *x, const T *W, const float *b, int64_t N, int64_t I, int64_t O,
                 Epilogue act, const int32_t *row_active, SecondOutput second, const ResidualNormAfter &after) {
    if (N == 0 || O == 0) return;
    check_after(after, ldy, O, second);
    const int64_t per = rows_per_pass(I);
    const bool vec = can_vectorise(W, I);
    allow_linear_shared<linear_rows_kernel<T>>();
    for (int64_t r0 = 0; r0 < N; r0 += per) {
        const int n = int(std::min(per, N - r0));
        launch_kernel(linear_rows_kernel<T>, dim3(blocks_for(O, kLinearWarps), 1), kBlockThreads,
                      size_t(n * I) * sizeof(float), y + r0 * ldy, ldy, x + r0 * I, W, b, n, I, O, ExpertRows{}, vec,
                      act, row_active ? row_active + r0 : nullptr, second, rows_from(after, r0, O));
        if (second.y) second.y += per * second.ld;
    }
}

template <class T>
void expert_linear(float *y, int64_t ldy, const float *x, const T *W, const ExpertRows &r, int64_t N, int64_t I,
                   int64_t O, const ResidualNormAfter &after) {
    if (N == 0 || O == 0) return;
    ZAYA_ASSERT(r.choice != nullptr);
    check_after(after, ldy, O, SecondOutput{});
    if (N > 65535) fail("decode expert linear: {} rows exceed the grid", N);
    rows_per_pass(I); // checks the width
    allow_linear_shared<linear_rows_kernel<T>>();
    launch_kernel(linear_rows_kernel<T>, dim3(blocks_for(O, kLinearWarps), unsigned(N)), kBlockThreads,
                  size_t(I) * sizeof(float), y, ldy, x, W, nullptr, 1, I, O, r, can_vectorise(W, I), Epilogue::None,
                  nullptr, SecondOutput{}, after);
}

// ---- the router after its down projection, a block per row ----

constexpr int kRouterThreads = kBlockThreads;

__device__ __forceinline__ float gelu_exact(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)); }

// y[O] = act(W[O, I]·x + b) for one row (x, y in shared memory): a warp per output, lanes over the inputs. Ends
// with a barrier.
template <class T>
__device__ void router_block_linear(float *y, const float *x, const T *W, const float *b, int64_t O, int64_t I,
                                    bool gelu) {
    const int warp = int(threadIdx.x) / kWarp, lane = int(threadIdx.x) % kWarp;
    for (int64_t o = warp; o < O; o += kRouterThreads / kWarp) {
        float acc = 0.0f;
        for (int64_t i = lane; i < I; i += kWarp) acc += Piece<T>::one(W + o * I + i) * operand<T>(x[i]);
        acc = warp_sum(acc) + (b ? b[o] : 0.0f);
        if (lane == 0) y[o] = gelu ? gelu_exact(acc) : acc;
    }
    __syncthreads();
}

// The router's MLP weights, into L2 by the `threads` threads of one block while earlier work runs.
template <class T> __device__ void prefetch_router(const RouterDecode<T> &a, int threads) {
    const int64_t sq = a.R * a.R * int64_t(sizeof(T));
    prefetch_l2(a.fc1, sq, int(threadIdx.x), threads), prefetch_l2(a.fc2, sq, int(threadIdx.x), threads);
    prefetch_l2(a.out, a.K * a.R * int64_t(sizeof(T)), int(threadIdx.x), threads);
}

// Bytes of shared memory router_row needs: (2R + K + 8) floats; fails if that is more than a block has without
// opting in.
size_t router_shared_bytes(int64_t R, int64_t K) {
    const size_t bytes = size_t(2 * R + K + kRouterThreads / kWarp) * sizeof(float);
    if (int64_t(bytes) > kSharedLimit)
        fail("router_decode: router width {} and {} classes do not fit shared memory", R, K);
    return bytes;
}

// Row i, by the whole block (sm: router_shared_bytes): rho = h1 + scale ⊙ rho_prev (EDA; without a previous layer
// rho = h1), the RMSNorm, fc1 → GELU → fc2 → GELU → out, then softmax and top-1 selection. h1 is read from L2 (the
// fused down projection's other blocks wrote it). Ends with every thread past its last use of sm but thread 0's.
template <class T> __device__ void router_row(const RouterDecode<T> &a, int64_t i, float *sm) {
    const int64_t R = a.R, K = a.K;
    float *xs = sm, *ys = xs + R, *ls = ys + R, *scratch = ls + K;
    if (a.active && !a.active[i]) { // a slot not stepped: the skip slot, so the experts read no weights for it
        if (threadIdx.x == 0) a.choice[i] = int32_t(K - 1), a.p_sel[i] = 0.0f;
        return;
    }
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < R; j += kRouterThreads) {
        float v = load_l2(a.h1 + i * R + j);
        if (a.state_scale && a.rho_prev) v += a.state_scale[j] * a.rho_prev[i * R + j];
        a.rho[i * R + j] = v;
        ys[j] = v;
        ss += v * v;
    }
    const float r = rsqrtf(block_total(ss, scratch) / float(R) + a.eps);
    for (int64_t j = threadIdx.x; j < R; j += kRouterThreads) xs[j] = a.norm_w[j] * (ys[j] * r);
    __syncthreads();
    router_block_linear(ys, xs, a.fc1, a.fc1_b, R, R, true);
    router_block_linear(xs, ys, a.fc2, a.fc2_b, R, R, true);
    router_block_linear(ls, xs, a.out, nullptr, K, R, false);
    if (threadIdx.x == 0) router_select_token(a.probs + i * K, a.choice[i], a.p_sel[i], ls, a.bias, K);
}

// grid n, block 256, shared router_shared_bytes: router_row of row blockIdx.x.
template <class T>
__global__ void __launch_bounds__(kRouterThreads) router_decode_kernel(RouterDecode<T> a) {
    extern __shared__ float sm[];
    prefetch_router(a, kRouterThreads); // while the down projection runs
    await_previous_kernel();
    router_row(a, blockIdx.x, sm);
}

// grid ceil(R/8), block 256: the down projection h1 = x·Wᵀ + b of nrows rows (linear_rows_part), then router_row
// of each by the last block to finish (its shared memory: x's rows, or router_shared_bytes if more).
template <class T>
__global__ void __launch_bounds__(kBlockThreads)
    router_down_kernel(float *h1, const float *x, const T *W, const float *b, int nrows, int64_t I, bool vec,
                       const int32_t *row_active, RouterDecode<T> a, unsigned *counter) {
    extern __shared__ float sm[];
    if (blockIdx.x == 0) prefetch_router(a, kBlockThreads); // one block's worth: the weights are the same for all
    linear_rows_part(h1, a.R, x, W, b, nrows, I, a.R, ExpertRows{}, vec, Epilogue::None, row_active, SecondOutput{});
    if (!arrive_last(counter, gridDim.x)) return;
    for (int i = 0; i < nrows; ++i) {
        router_row(a, i, sm);
        __syncthreads(); // thread 0 has read the logits in sm before the next row overwrites them
    }
}

// One thread per element of out[N, D].
template <class T>
__global__ void embed_rows_kernel(float *out, const int32_t *tokens, const T *table, const float *bias,
                                  const float *scale, int64_t N, int64_t D) {
    await_previous_kernel();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= N * D) return;
    const int64_t n = i / D, d = i % D;
    out[i] = (Piece<T>::one(table + int64_t(tokens[n]) * D + d) + bias[d]) * scale[d];
}

// One thread per row of pos [slots, n].
__global__ void decode_positions_kernel(int32_t *pos, const int32_t *lengths, int64_t n, int64_t first,
                                        int64_t slots) {
    await_previous_kernel();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < slots * n) pos[i] = lengths[i / n] + int32_t(first + i % n);
}

__global__ void advance_length_kernel(int32_t *lengths, int64_t n, int64_t slots, const int32_t *active) {
    await_previous_kernel();
    const int64_t s = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (s < slots && (!active || active[s])) lengths[s] += int32_t(n);
}

// Threads [0, n·width): one element of k and of v (the delayed columns skipped when v_state is given); then Dv
// threads, one per delayed column, walking the rows.
template <class T>
__global__ void append_kv_kernel(T *kc, T *vc, const float *k, const float *v, const int32_t *length, int64_t n,
                                 int64_t width, float *v_state, int64_t Dv) {
    await_previous_kernel();
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, base = int64_t(*length) * width;
    if (i < n * width) {
        kc[base + i] = Kv<T>::store(k[i]);
        if (!v_state || i % width < width - Dv) vc[base + i] = Kv<T>::store(v[i]);
    } else if (v_state && i < n * width + Dv) {
        const int64_t col = width - Dv + (i - n * width);
        float carry = v_state[col - (width - Dv)];
        for (int64_t r = 0; r < n; ++r) {
            vc[base + r * width + col] = Kv<T>::store(carry);
            carry = v[r * width + col];
        }
        v_state[col - (width - Dv)] = carry;
    }
}

// One thread per column walks the rows in order: row r + shift is read before any thread writes it (only its own
// column's thread does, later), so the move is safe in place.
__device__ __forceinline__ void shift_column_up(float *b, int64_t keep, int64_t shift, int64_t cols, int64_t c) {
    for (int64_t r = 0; r < keep; ++r) b[r * cols + c] = b[(r + shift) * cols + c];
}

// grid ceil(cols/128).
__global__ void shift_rows_up_kernel(float *buf, int64_t keep, int64_t shift, int64_t cols) {
    await_previous_kernel();
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c < cols) shift_column_up(buf, keep, shift, cols, c);
}

constexpr int kAttnThreads = 128;
constexpr int kAttnMaxHeadDim = 256;

// The keys query i (position p) sees: [lo, p].
__device__ __forceinline__ int64_t window_start(int64_t p, int64_t window) {
    return window > 0 ? max(int64_t(0), p - window + 1) : int64_t(0);
}

// Query (i, h) sees keys [lo, p]; split `splits` ways, piece c is [lo + c·per, min(p + 1, lo + (c+1)·per)) with
// per = ceil((p + 1 − lo) / splits): the grid depends on the split count, not on the cache's capacity.
struct KeyPiece {
    int64_t t0, t1;
};
__device__ __forceinline__ KeyPiece key_piece(int64_t p, int64_t window, int64_t c, int64_t splits) {
    // A 32-bit division (positions fit: the lengths are int32), as a 64-bit one is a call whose saved registers spill.
    const int64_t lo = window_start(p, window), per = unsigned(p + 1 - lo + splits - 1) / unsigned(splits);
    const int64_t t0 = lo + c * per;
    return {t0, min(p + 1, t0 + per)};
}

// Block (c, h, i) of a grid (splits, nq, n), block 128: the partial softmax of query (i, h) over its piece c of
// keys, in tiles of kAttnMaxChunk with an online softmax (running max m, sum l, and each thread's ≤ 2 output dims
// rescaled when m grows). part_o gets Σ P·v (unnormalised; P = exp(s − m), a bf16 cache's as CacheSoftmax),
// part_ml (m, l); l = 0 marks an empty piece.
// Where query i's sequence lives: one sequence (per_slot false: row i is its token at *length + i) or one slot per
// row (row i at lengths[i], over cache rows i·cache_rows …, skipped when not active).
struct AttnRows {
    int64_t ldq;
    bool per_slot;
    int64_t cache_rows;
    const int32_t *active;
};

// Column col of slot i's new value row (KvAppend): the current projection, or in the last Dv columns the state (the
// previous token's delayed projection).
template <class T>
__device__ __forceinline__ float fresh_value(const KvAppendT<T> &ap, int64_t width, int64_t i, int64_t col) {
    const int64_t delayed = col - (width - ap.Dv);
    return delayed < 0 ? ap.v[i * width + col] : ap.v_state[i * ap.Dv + delayed];
}

// KvAppend's writes for active slot i, by one block, once every block that reads the slot's value state has read
// it: the cache row at the slot's length (the delayed columns from the state, which then takes this token's
// delayed projection; one thread per column, so each reads its state before replacing it), then the conv-state move.
template <class T>
__device__ void append_slot(const KvAppendT<T> &ap, int64_t i, int64_t width, int64_t max_len, int32_t length) {
    const int64_t at = (i * max_len + length) * width;
    for (int64_t c = threadIdx.x; c < width; c += blockDim.x) {
        ap.kc[at + c] = Kv<T>::store(ap.k[i * ap.ldk + c]);
        ap.vc[at + c] = Kv<T>::store(fresh_value(ap, width, i, c));
        if (c >= width - ap.Dv) ap.v_state[i * ap.Dv + c - (width - ap.Dv)] = ap.v[i * width + c];
    }
    const ConvStateMove &m = ap.move;
    if (m.buf)
        for (int64_t c = threadIdx.x; c < m.cols; c += blockDim.x)
            shift_column_up(m.buf + i * m.slot_rows * m.cols, m.keep, 1, m.cols, c);
}

// E consecutive cache elements as floats, one load: 16 bytes (Piece<T>: 8 bf16 or 4 fp32) or a pair (4 or 8 bytes).
// The caller guarantees the alignment (attention_launch picks E).
template <class T, int E> __device__ __forceinline__ void load_kv_chunk(float *w, const T *p) {
    if constexpr (E == Piece<T>::n) {
        Piece<T>::load(w, p);
    } else if constexpr (std::is_same_v<T, float>) {
        const float2 f = *reinterpret_cast<const float2 *>(p);
        w[0] = f.x, w[1] = f.y;
    } else {
        widen_pair(w, *reinterpret_cast<const unsigned *>(p));
    }
}

// Block (c, h, i) of a grid (splits, nq, n), block 128: the partial softmax of query (i, h) over its piece c of keys,
// in tiles of kAttnMaxChunk (128) keys with an online softmax. A thread per key computes its score (its row read in
// E-element chunks, all independent loads: the many bytes in flight a long cache needs to stream at the memory's
// speed); then for the values each thread owns an E-element chunk of the output and a row group (L = hd/E threads
// span a row, R = 128/L rows at once), summing its rows of the tile, and the R groups' sums are added at the end.
// part_o gets Σ P·v (unnormalised; CacheSoftmax), part_ml (m, l); l = 0 marks an empty piece. ap.k: each slot's newest
// key and value are read from KvAppend's rows, not the cache (not written yet), as the cache will keep them
// (Kv::kept), so the sums are those a read of the cache would give, in the same order.
template <class T, int E>
__device__ void attention_part(float *part_o, float *part_ml, const float *q, const T *k, const T *v,
                               const int32_t *length, int64_t n, const AttnShape &s, int64_t splits,
                               const AttnRows &rows, const KvAppendT<T> &ap) {
    __shared__ float qs[kAttnMaxHeadDim];
    __shared__ float ps[kAttnMaxChunk], pw_bf16[std::is_same_v<T, uint16_t> ? kAttnMaxChunk : 1];
    using Softmax = CacheSoftmax<T>;
    float *const pw = std::is_same_v<T, uint16_t> ? pw_bf16 : ps; // what weighs the values: P, or P rounded
    const float scale = Softmax::scale(s.scale);
    __shared__ float sums[kAttnThreads * Piece<uint16_t>::n]; // the row groups' value sums: R·hd ≤ 128·E floats
    static_assert(kAttnMaxChunk == kAttnThreads, "a thread per key of a tile");
    const int64_t c = blockIdx.x, h = blockIdx.y, i = blockIdx.z, nq = s.nq, hd = s.hd;
    const int64_t j = int(h) / (int(nq) / int(s.nkv)), ldk = s.nkv * hd;
    const int64_t p = rows.per_slot ? int64_t(length[i]) : int64_t(*length) + i;
    if (rows.per_slot) {
        const int64_t cache_off = i * rows.cache_rows * ldk;
        k += cache_off, v += cache_off;
    }
    const KeyPiece piece = key_piece(p, s.window, c, splits);
    const int64_t slot = (c * n + i) * nq + h;
    if (piece.t0 >= piece.t1 || (rows.active && !rows.active[i])) { // no key of this query in the piece
        if (threadIdx.x == 0) part_ml[2 * slot] = -INFINITY, part_ml[2 * slot + 1] = 0.0f;
        return;
    }
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = Kv<T>::kept(q[i * rows.ldq + h * hd + d]);
    const int L = int(hd) / E, R = kAttnThreads / L, r = int(threadIdx.x) / L, col = (int(threadIdx.x) % L) * E;
    float m = -INFINITY, l = 0.0f, acc[E] = {};
    for (int64_t a = piece.t0; a < piece.t1; a += kAttnMaxChunk) {
        const int64_t b = min(piece.t1, a + kAttnMaxChunk); // this tile's keys [a, b)
        __syncthreads(); // qs written; the previous tile's ps read by every thread
        const int64_t key = a + threadIdx.x; // this thread's
        if (key < b) {
            float dot = 0.0f;
            if (ap.k && key == p) { // the newest key: its fp32 row, as the cache will keep it
                const float *kf = ap.k + i * ap.ldk + j * hd;
                for (int64_t d = 0; d < hd; ++d) dot += qs[d] * Kv<T>::kept(kf[d]);
            } else {
                const T *kr = k + key * ldk + j * hd;
#pragma unroll 4
                for (int64_t d = 0; d < hd; d += E) {
                    float w[E];
                    load_kv_chunk<T, E>(w, kr + d);
                    for (int e = 0; e < E; ++e) dot += qs[d + e] * w[e];
                }
            }
            ps[key - a] = dot * scale;
        }
        __syncthreads();
        float mt = m;
        for (int64_t t = 0; t < b - a; ++t) mt = max(mt, ps[t]); // every thread: a broadcast read
        mt = Softmax::max_of(mt);
        const float rescale = Softmax::rescale(m - mt); // 0 on the first tile (m = −inf)
        __syncthreads();
        for (int64_t t = threadIdx.x; t < b - a; t += blockDim.x) {
            const float pt = Softmax::prob(ps[t], mt);
            ps[t] = pt;
            if constexpr (std::is_same_v<T, uint16_t>) pw[t] = Softmax::weight(pt);
        }
        __syncthreads();
        float lt = 0.0f;
        for (int64_t t = 0; t < b - a; ++t) lt += ps[t];
        l = l * rescale + lt, m = mt;
        for (int e = 0; e < E; ++e) acc[e] *= rescale;
        if (r >= R) continue; // a thread past the last whole row group (L does not divide 128)
        const bool fresh = ap.k && p >= a && p < b; // the newest key is in this tile, not yet in the cache
        const int64_t cached = fresh ? p : b;
        const T *vr = v + (a * ldk + j * hd + col);
#pragma unroll 4
        for (int u = r; u < int(cached - a); u += R) { // (32-bit: the unrolled loop's trip count is a division)
            float w[E];
            load_kv_chunk<T, E>(w, vr + int64_t(u) * ldk);
            for (int e = 0; e < E; ++e) acc[e] += pw[u] * w[e];
        }
        if (fresh && int(p - a) % R == r) // the newest row, last in its group's order as it would be from the cache
            for (int e = 0; e < E; ++e) acc[e] += pw[p - a] * Kv<T>::kept(fresh_value(ap, ldk, i, j * hd + col + e));
    }
    if (r < R)
        for (int e = 0; e < E; ++e) sums[r * hd + col + e] = acc[e];
    __syncthreads();
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t g = 0; g < R; ++g) o += sums[g * hd + d];
        part_o[slot * hd + d] = o;
    }
    if (threadIdx.x == 0) part_ml[2 * slot] = m, part_ml[2 * slot + 1] = l;
}

// out[i, h, :] from the `splits` pieces of query (i, h), by one block (the pieces come from L2: other blocks wrote
// them).
template <class T>
__device__ void attention_combine(float *out, const float *part_o, const float *part_ml, int64_t n, const AttnShape &s,
                                  int64_t splits, int64_t h, int64_t i) {
    const int64_t nq = s.nq, hd = s.hd;
    auto m_of = [&](int64_t c) { return load_l2(part_ml + 2 * ((c * n + i) * nq + h)); };
    auto l_of = [&](int64_t c) { return load_l2(part_ml + 2 * ((c * n + i) * nq + h) + 1); };
    float M = -INFINITY;
    for (int64_t c = 0; c < splits; ++c)
        if (l_of(c) > 0.0f) M = max(M, m_of(c));
    float L = 0.0f;
    for (int64_t c = 0; c < splits; ++c)
        if (l_of(c) > 0.0f) L += l_of(c) * CacheSoftmax<T>::rescale(m_of(c) - M);
    for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int64_t c = 0; c < splits; ++c)
            if (l_of(c) > 0.0f)
                acc += load_l2(part_o + ((c * n + i) * nq + h) * hd + d) * CacheSoftmax<T>::rescale(m_of(c) - M);
        out[(i * nq + h) * hd + d] = L > 0.0f ? acc / L : 0.0f; // L = 0: an inactive slot's row
    }
}

// grid (splits, nq, n), block 128: attention_part of block (c, h, i), then the combine of query (i, h) by the last
// of its `splits` blocks to finish (counters[i·nq + h]); with ap.k, then KvAppend's writes for slot i by the last
// of the slot's splits·nq blocks (counters[n·nq + i]).
template <class T, int E>
__global__ void __launch_bounds__(kAttnThreads, 4) // (4 blocks an SM: ptxas then keeps everything in registers)
    attention_decode_kernel(float *out, float *part_o, float *part_ml, const float *q, const T *k, const T *v,
                            const int32_t *length, int64_t n, AttnShape s, int64_t splits, AttnRows rows,
                            unsigned *counters, KvAppendT<T> ap) {
    await_previous_kernel();
    attention_part<T, E>(part_o, part_ml, q, k, v, length, n, s, splits, rows, ap);
    const int64_t h = blockIdx.y, i = blockIdx.z;
    if (arrive_last(counters + i * s.nq + h, unsigned(splits)))
        attention_combine<T>(out, part_o, part_ml, n, s, splits, h, i);
    if (ap.k && arrive_last(counters + n * s.nq + i, unsigned(splits * s.nq)) && (!rows.active || rows.active[i]))
        append_slot(ap, i, s.nkv * s.hd, rows.cache_rows, length[i]);
}

constexpr int kArgmaxThreads = 256;

// (v, i) beats (bv, bi): larger, or equal and earlier. NaN compares false, so it never beats anything.
__device__ __forceinline__ bool beats(float v, int32_t i, float bv, int32_t bi) {
    return v > bv || (v == bv && i < bi);
}

// Tree reduction of a block's 256 (value, index) pairs in shared memory; thread 0 ends with the winner.
__device__ void block_argmax(float *sv, int32_t *si) {
    for (int w = kArgmaxThreads / 2; w > 0; w /= 2) {
        __syncthreads();
        const int t = int(threadIdx.x);
        if (t < w && beats(sv[t + w], si[t + w], sv[t], si[t])) sv[t] = sv[t + w], si[t] = si[t + w];
    }
}

// grid (kArgmaxPartials, rows), block 256: block b's winner over row x[r, i], i ≡ b·256 + t (mod gridDim·256)
// into the partials; the last of a row's blocks to finish then takes the row's winner of its partials into out[r].
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(int32_t *out, float *part_v, int32_t *part_i, const float *x, int64_t n, unsigned *counters) {
    await_previous_kernel();
    __shared__ float sv[kArgmaxThreads];
    __shared__ int32_t si[kArgmaxThreads];
    float bv = -INFINITY;
    int32_t bi = INT32_MAX;
    x += int64_t(blockIdx.y) * n; // row blockIdx.y
    for (int64_t i = int64_t(blockIdx.x) * kArgmaxThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kArgmaxThreads)
        if (beats(x[i], int32_t(i), bv, bi)) bv = x[i], bi = int32_t(i);
    sv[threadIdx.x] = bv, si[threadIdx.x] = bi;
    block_argmax(sv, si);
    const int64_t at = int64_t(blockIdx.y) * kArgmaxPartials + blockIdx.x;
    if (threadIdx.x == 0) part_v[at] = sv[0], part_i[at] = si[0];
    if (!arrive_last(counters + blockIdx.y, gridDim.x)) return;
    const int t = int(threadIdx.x);
    part_v += int64_t(blockIdx.y) * kArgmaxPartials, part_i += int64_t(blockIdx.y) * kArgmaxPartials;
    __syncthreads(); // thread 0 has read the block's own winner from sv, si
    sv[t] = t < kArgmaxPartials ? load_l2(part_v + t) : -INFINITY;
    si[t] = t < kArgmaxPartials ? load_l2(part_i + t) : INT32_MAX;
    block_argmax(sv, si);
    if (t == 0) out[blockIdx.y] = si[0] == INT32_MAX ? 0 : si[0];
}

// A grid-stride read of 16-byte words; the xor is written only if it hits a value no buffer gives in practice,
// so the loads cannot be dropped and nothing is written.
__global__ void read_kernel(const uint4 *p, int64_t n, unsigned *sink) {
    unsigned acc = 0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const uint4 u = p[i];
        acc ^= u.x ^ u.y ^ u.z ^ u.w;
    }
    if (acc == 0x9E3779B9u) *sink = acc;
}

} // namespace

void linear_rows_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const float *b, int64_t N, int64_t I,
                      int64_t O, Epilogue act, const int32_t *row_active, const SecondOutput &second,
                      const ResidualNormAfter &after) {
    linear_rows(y, ldy, x, W, b, N, I, O, act, row_active, second, after);
}
void linear_rows_f32(float *y, int64_t ldy, const float *x, const float *W, const float *b, int64_t N, int64_t I,
                     int64_t O, Epilogue act, const int32_t *row_active, const SecondOutput &second,
                     const ResidualNormAfter &after) {
    linear_rows(y, ldy, x, W, b, N, I, O, act, row_active, second, after);
}
void expert_linear_bf16(float *y, int64_t ldy, const float *x, const uint16_t *W, const ExpertRows &r, int64_t N,
                        int64_t I, int64_t O, const ResidualNormAfter &after) {
    expert_linear(y, ldy, x, W, r, N, I, O, after);
}
void expert_linear_f32(float *y, int64_t ldy, const float *x, const float *W, const ExpertRows &r, int64_t N, int64_t I,
                       int64_t O, const ResidualNormAfter &after) {
    expert_linear(y, ldy, x, W, r, N, I, O, after);
}

void embed_rows_bf16(float *out, const int32_t *tokens, const uint16_t *table, const float *bias, const float *scale,
                     int64_t N, int64_t D) {
    if (N * D == 0) return;
    launch_kernel(embed_rows_kernel<uint16_t>, blocks_for(N * D, 256), 256, 0, out, tokens, table, bias, scale, N, D);
}
void embed_rows_f32(float *out, const int32_t *tokens, const float *table, const float *bias, const float *scale,
                    int64_t N, int64_t D) {
    if (N * D == 0) return;
    launch_kernel(embed_rows_kernel<float>, blocks_for(N * D, 256), 256, 0, out, tokens, table, bias, scale, N, D);
}

template <class T> void router_decode(const RouterDecode<T> &a, int64_t n) {
    if (n == 0) return;
    launch_kernel(router_decode_kernel<T>, unsigned(n), kRouterThreads, router_shared_bytes(a.R, a.K), a);
}
template void router_decode<uint16_t>(const RouterDecode<uint16_t> &, int64_t);
template void router_decode<float>(const RouterDecode<float> &, int64_t);

template <class T>
void router_down_decode(float *h1, const float *x, const T *W, const float *b, int64_t n, int64_t I,
                        const int32_t *row_active, const RouterDecode<T> &a, unsigned *counters) {
    if (n == 0) return;
    if (a.h1 != h1 || !counters) fail("router_down_decode: the router must read the h1 written here, with counters");
    const size_t router_shared = router_shared_bytes(a.R, a.K);
    const int64_t per = rows_per_pass(I);
    const bool vec = can_vectorise(W, I);
    allow_linear_shared<router_down_kernel<T>>();
    for (int64_t r0 = 0; r0 < n; r0 += per) {
        const int rows = int(std::min(per, n - r0));
        RouterDecode<T> p = a; // this pass's rows
        p.rho += r0 * a.R, p.probs += r0 * a.K, p.choice += r0, p.p_sel += r0, p.h1 += r0 * a.R;
        if (p.rho_prev) p.rho_prev += r0 * a.R;
        if (p.active) p.active += r0;
        launch_kernel(router_down_kernel<T>, blocks_for(a.R, kLinearWarps), kBlockThreads,
                      std::max(size_t(rows * I) * sizeof(float), router_shared), h1 + r0 * a.R, x + r0 * I, W, b,
                      rows, I, vec, row_active ? row_active + r0 : nullptr, p, counters);
    }
}
template void router_down_decode<uint16_t>(float *, const float *, const uint16_t *, const float *, int64_t, int64_t,
                                           const int32_t *, const RouterDecode<uint16_t> &, unsigned *);
template void router_down_decode<float>(float *, const float *, const float *, const float *, int64_t, int64_t,
                                        const int32_t *, const RouterDecode<float> &, unsigned *);

void decode_positions(int32_t *pos, const int32_t *lengths, int64_t n, int64_t first, int64_t slots) {
    if (n * slots == 0) return;
    launch_kernel(decode_positions_kernel, blocks_for(n * slots, 128), 128, 0, pos, lengths, n, first, slots);
}
void advance_length(int32_t *lengths, int64_t n, int64_t slots, const int32_t *active) {
    if (slots == 0) return;
    launch_kernel(advance_length_kernel, blocks_for(slots, 128), 128, 0, lengths, n, slots, active);
}
template <class T>
void append_kv(T *kc, T *vc, const float *k, const float *v, const int32_t *length, int64_t n, int64_t width,
               float *v_state, int64_t Dv) {
    if (n * width == 0) return;
    if (v_state && (Dv < 1 || Dv > width)) fail("append_kv: {} delayed columns of {}", Dv, width);
    const int64_t threads = n * width + (v_state ? Dv : 0);
    launch_kernel(append_kv_kernel<T>, blocks_for(threads, 256), 256, 0, kc, vc, k, v, length, n, width, v_state,
                  v_state ? Dv : 0);
}
template void append_kv<float>(float *, float *, const float *, const float *, const int32_t *, int64_t, int64_t,
                               float *, int64_t);
template void append_kv<uint16_t>(uint16_t *, uint16_t *, const float *, const float *, const int32_t *, int64_t,
                                  int64_t, float *, int64_t);
void shift_rows_up(float *buf, int64_t keep, int64_t shift, int64_t cols) {
    if (keep * cols == 0 || shift == 0) return;
    launch_kernel(shift_rows_up_kernel, blocks_for(cols, 128), 128, 0, buf, keep, shift, cols);
}

namespace {
template <class T>
void attention_launch(float *out, float *part_o, float *part_ml, const float *q, const T *k, const T *v,
                      const int32_t *length, int64_t n, const AttnShape &s, int64_t splits, const AttnRows &rows,
                      unsigned *counters, const KvAppendT<T> &ap) {
    if (splits < 1 || splits > kAttnMaxSplits) fail("attention_decode: {} splits outside [1, {}]", splits, kAttnMaxSplits);
    if (s.hd > kAttnMaxHeadDim) fail("attention_decode: head_dim {} above {}", s.hd, kAttnMaxHeadDim);
    if (n > 65535 || s.nq > 65535) fail("attention_decode: {} rows of {} heads exceed the grid", n, s.nq);
    if (n == 0) return;
    if (!counters) fail("attention_decode: no counters");
    // 16-byte chunks where the head size and the caches' alignment allow (every cache row then starts 16-byte
    // aligned), else pairs (the head size is even).
    auto aligned = [](const void *x, size_t bytes) { return reinterpret_cast<uintptr_t>(x) % bytes == 0; };
    constexpr int wide = Piece<T>::n;
    const dim3 grid(unsigned(splits), unsigned(s.nq), unsigned(n));
    if (s.hd % wide == 0 && aligned(k, 16) && aligned(v, 16))
        launch_kernel(attention_decode_kernel<T, wide>, grid, kAttnThreads, 0, out, part_o, part_ml, q, k, v, length,
                      n, s, splits, rows, counters, ap);
    else if (s.hd % 2 == 0 && aligned(k, 2 * sizeof(T)) && aligned(v, 2 * sizeof(T)))
        launch_kernel(attention_decode_kernel<T, 2>, grid, kAttnThreads, 0, out, part_o, part_ml, q, k, v, length, n,
                      s, splits, rows, counters, ap);
    else
        fail("attention_decode: head_dim {} (must be even) or caches at {}, {} not aligned to pairs", s.hd,
             static_cast<const void *>(k), static_cast<const void *>(v));
}
} // namespace

template <class T>
void attention_decode(float *out, float *part_o, float *part_ml, const float *q, const T *k, const T *v,
                      const int32_t *length, int64_t n, const AttnShape &s, int64_t splits, unsigned *counters) {
    attention_launch(out, part_o, part_ml, q, k, v, length, n, s, splits, AttnRows{s.nq * s.hd, false, 0, nullptr},
                     counters, KvAppendT<T>{});
}
template <class T>
void attention_decode_slots(float *out, float *part_o, float *part_ml, const float *q, int64_t ldq,
                            const int32_t *lengths, const int32_t *active, int64_t slots, int64_t max_len,
                            const AttnShape &s, int64_t splits, unsigned *counters, const KvAppendT<T> &append) {
    const int64_t width = s.nkv * s.hd;
    const ConvStateMove &m = append.move;
    if (!append.kc || !append.vc || !append.k || !append.v || !append.v_state || append.Dv < 1 || append.Dv > width)
        fail("attention_decode_slots: the KV append needs the caches, k, v and a state of 1 … {} delayed columns, "
             "got {}", width, append.Dv);
    if (m.buf && (m.keep < 0 || m.cols < 0 || m.slot_rows < m.keep + 1))
        fail("attention_decode_slots: a conv state of {} rows cannot move up within {} rows", m.keep, m.slot_rows);
    attention_launch(out, part_o, part_ml, q, append.kc, append.vc, lengths, slots, s, splits,
                     AttnRows{ldq, true, max_len, active}, counters, append);
}
template void attention_decode<float>(float *, float *, float *, const float *, const float *, const float *,
                                      const int32_t *, int64_t, const AttnShape &, int64_t, unsigned *);
template void attention_decode<uint16_t>(float *, float *, float *, const float *, const uint16_t *, const uint16_t *,
                                         const int32_t *, int64_t, const AttnShape &, int64_t, unsigned *);
template void attention_decode_slots<float>(float *, float *, float *, const float *, int64_t, const int32_t *,
                                            const int32_t *, int64_t, int64_t, const AttnShape &, int64_t, unsigned *,
                                            const KvAppendT<float> &);
template void attention_decode_slots<uint16_t>(float *, float *, float *, const float *, int64_t, const int32_t *,
                                               const int32_t *, int64_t, int64_t, const AttnShape &, int64_t,
                                               unsigned *, const KvAppendT<uint16_t> &);

void argmax(int32_t *out, float *part_v, int32_t *part_i, const float *x, int64_t n, int64_t rows,
            unsigned *counters) {
    if (n < 1 || n > INT32_MAX) fail("argmax: {} elements (1 … 2³¹−1)", n);
    if (rows < 1 || rows > 65535) fail("argmax: {} rows (1 … 65535)", rows);
    if (!counters) fail("argmax: no counters");
    static_assert(kArgmaxPartials <= kArgmaxThreads, "the combine block holds every partial");
    launch_kernel(argmax_kernel, dim3(kArgmaxPartials, unsigned(rows)), kArgmaxThreads, 0, out, part_v, part_i, x, n,
                  counters);
}

double time_device_read(const void *p, int64_t bytes) {
    if (bytes % 16 != 0 || reinterpret_cast<uintptr_t>(p) % 16 != 0)
        fail("time_device_read: {} bytes at {} are not in 16-byte words", bytes, p);
    DeviceArray<unsigned> sink(1);
    ZAYA_CUDA_CHECK(cudaDeviceSynchronize());
    const auto t0 = std::chrono::steady_clock::now();
    read_kernel<<<1024, 256, 0, launch_stream()>>>(static_cast<const uint4 *>(p), bytes / 16, sink.data());
    ZAYA_CUDA_LAUNCHED();
    ZAYA_CUDA_CHECK(cudaDeviceSynchronize());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

} // namespace zaya::cuda
