#include "ops/cpu/reduce.h"


namespace zaya::cpu {

void column_dot_add(real *out, const real *a, int64_t lda, const real *b, int64_t ldb, int64_t N, int64_t D) {
    for_column_chunks(
        D,
        [&](int64_t i0, int64_t i1) {
            real acc[kColumnChunk] = {};
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
        },
        N * D > 32768);
}

} // namespace zaya::cpu
