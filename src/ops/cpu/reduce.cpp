#include "ops/cpu/reduce.h"

#include <algorithm>
#include <vector>

namespace zaya::cpu {

void column_dot_add(real *out, const real *a, int64_t lda, const real *b, int64_t ldb, int64_t N, int64_t D) {
    constexpr int64_t kCols = 64; // a chunk of columns per task: rows are read 64 values at a time
    const int64_t chunks = (D + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (N * D > 32768)
    for (int64_t ch = 0; ch < chunks; ++ch) {
        const int64_t i0 = ch * kCols, i1 = std::min(D, i0 + kCols);
        real acc[kCols] = {};
        for (int64_t n = 0; n < N; ++n) {
            const real *ar = a + n * lda;
            if (b) {
                const real *br = b + n * ldb;
                for (int64_t i = i0; i < i1; ++i) acc[i - i0] += ar[i] * br[i];
            } else {
                for (int64_t i = i0; i < i1; ++i) acc[i - i0] += ar[i];
            }
        }
        for (int64_t i = i0; i < i1; ++i) out[i] += acc[i - i0];
    }
}

} // namespace zaya::cpu
