// Deterministic column sums at full occupancy, for the parameter gradients that add a term over every token:
// out[c] += Σ_{n<N} term(n, c) for c < D (a bias gradient, a per-channel weight gradient, ...).
//
// One thread per column summing N rows in order kept a handful of SMs busy for milliseconds (D = 256 columns are one
// block; each of its warps waits on one load after another through 16k rows). Here a block of 32 columns × 8 row
// lanes takes a chunk of kColumnSumRows rows — lane l adds rows l, l+8, … of the chunk in order, then the 8 lane sums
// are added in lane order into partial[chunk, c] — and a second kernel adds each column's chunks in chunk order.
// Every addition's order depends on N and D alone, so the result is the same bits run to run (no atomics), and the
// first pass has ⌈N/256⌉·⌈D/32⌉ blocks of coalesced 128-byte row reads.
#pragma once
#include "core/error.h"
#include "ops/cuda/check.cuh"
#include "ops/cuda/launch.cuh"

#include <cstdint>

namespace zaya::cuda {

constexpr int kColumnSumRows = 256, kColumnSumLanes = 8, kColumnSumThreads = 32 * kColumnSumLanes;

// term(n, c) = a[n·lda + c], or a[n·lda + c]·b[n·ldb + c] with b.
template <class T> struct ColumnOf {
    const T *a;
    int64_t lda;
    __device__ T operator()(int64_t n, int64_t c) const { return a[n * lda + c]; }
};
struct ColumnProduct {
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    __device__ float operator()(int64_t n, int64_t c) const { return a[n * lda + c] * b[n * ldb + c]; }
};

template <class Acc, class Term>
__global__ void __launch_bounds__(kColumnSumThreads)
    column_sum_partials_kernel(Acc *partial, Term term, int64_t N, int64_t D) {
    __shared__ Acc lanes[kColumnSumLanes][32];
    await_previous_kernel();
    const int col = int(threadIdx.x) % 32, lane = int(threadIdx.x) / 32;
    const int64_t c = int64_t(blockIdx.x) * 32 + col, r0 = int64_t(blockIdx.y) * kColumnSumRows;
    const int64_t r1 = r0 + kColumnSumRows < N ? r0 + kColumnSumRows : N;
    Acc acc = 0;
    if (c < D)
        for (int64_t n = r0 + lane; n < r1; n += kColumnSumLanes) acc += term(n, c);
    lanes[lane][col] = acc;
    __syncthreads();
    if (lane != 0 || c >= D) return;
    Acc s = lanes[0][col];
    for (int l = 1; l < kColumnSumLanes; ++l) s += lanes[l][col];
    partial[int64_t(blockIdx.y) * D + c] = s;
}

template <class Acc, class Out>
__global__ void column_sum_finish_kernel(Out *out, const Acc *partial, int64_t chunks, int64_t D) {
    await_previous_kernel();
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= D) return;
    Acc s = 0;
    for (int64_t k = 0; k < chunks; ++k) s += partial[k * D + c];
    out[c] += Out(s);
}

// out[c] += Σ_n term(n, c) (Acc: the type the sums are kept in; the partials live in the ColumnSums scratch, so
// the calls must come from one host thread in stream order, as every op's do).
template <class Acc, class Out, class Term> void column_sum_add(Out *out, Term term, int64_t N, int64_t D) {
    if (N <= 0 || D <= 0) return;
    const int64_t chunks = (N + kColumnSumRows - 1) / kColumnSumRows, tiles = (D + 31) / 32;
    if (chunks > 65535 || tiles > (int64_t(1) << 31) - 1)
        fail("column sums: {} rows × {} columns exceed the CUDA grid", N, D);
    auto *partial = static_cast<Acc *>(device_scratch(Scratch::ColumnSums, size_t(chunks * D) * sizeof(Acc)));
    // launch_kernel: a header's launches are not rewritten for the emulator as a .cu file's <<<>>> are.
    launch_kernel(column_sum_partials_kernel<Acc, Term>, dim3(unsigned(tiles), unsigned(chunks)),
                  dim3(kColumnSumThreads), 0, partial, term, N, D);
    launch_kernel(column_sum_finish_kernel<Acc, Out>, dim3(blocks_for(D, 256)), dim3(256), 0, out,
                  static_cast<const Acc *>(partial), chunks, D);
}

} // namespace zaya::cuda
