// Warp-level tensor-core building blocks (sm_80+ PTX): mma.sync m16n8k16 bf16 → fp32, ldmatrix, cp.async. Unlike
// WMMA, their register layouts are documented (PTX ISA, "Matrix Fragments for mma.m16n8k16"), so a kernel can keep
// score tiles in registers, run the softmax on them and feed them straight back as the next product's A operand —
// flash attention's structure, with no shared-memory round trip per tile.
//
// Lane l of a warp: g = l / 4 (its row group), t = l % 4 (its column pair).
//   A 16×16 (row-major): a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1], a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, …]
//   B 16×8:              b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g]
//   C 16×8 (fp32):       c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1]
// (two bf16 per 32-bit register, the lower column or row in the low half). Under the CPU emulation
// (tests/cuda_emu) each is a warp collective with the same layouts.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace zaya::cuda::mma {

// Two floats as one register of two bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
#if defined(ZAYA_CUDA_EMULATION)
    return uint32_t(__float2bfloat16_rn(lo).bits) | uint32_t(__float2bfloat16_rn(hi).bits) << 16;
#else
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t *>(&v);
#endif
}

// d[16×8] += a[16×16]·b[16×8], bf16 operands, fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float d[4], const uint32_t a[4], const uint32_t b[2]) {
#if defined(ZAYA_CUDA_EMULATION)
    ::emu::mma_bf16_m16n8k16(d, a, b);
#else
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#endif
}

// Four 8×8 bf16 matrices from shared memory: lanes 8i … 8i+7 give the 16-byte-aligned addresses of matrix i's rows;
// r[i] gets matrix i's row g, columns 2t and 2t+1 — with kTrans, its rows 2t and 2t+1 of column g.
template <bool kTrans> __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void *row) {
#if defined(ZAYA_CUDA_EMULATION)
    ::emu::ldmatrix_x4(r, row, kTrans);
#else
    const unsigned s = unsigned(__cvta_generic_to_shared(row));
    if constexpr (kTrans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
#endif
}

// 16 bytes global → shared without passing through registers; zeros instead when !fill (src is then not read).
__device__ __forceinline__ void cp_async_16(void *dst, const void *src, bool fill) {
#if defined(ZAYA_CUDA_EMULATION)
    ::emu::cp_async_16(dst, src, fill);
#else
    const unsigned s = unsigned(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(fill ? 16 : 0));
#endif
}

// Closes the group of the copies issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#if defined(ZAYA_CUDA_EMULATION)
    ::emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Waits until at most kLeft of this thread's committed groups are still in flight (the newest ones). Other threads'
// copies are theirs to wait for: a __syncthreads after the wait makes the whole tile visible.
template <int kLeft> __device__ __forceinline__ void cp_async_wait() {
#if defined(ZAYA_CUDA_EMULATION)
    ::emu::cp_async_wait(kLeft);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(kLeft) : "memory");
#endif
}

} // namespace zaya::cuda::mma
