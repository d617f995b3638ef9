// What comes before the rows of a batch whose sequences are later parts of longer ones (context parallelism: the
// earlier parts are other ranks'; dist/context_parallel.h), in the ops' memory. Sequence b's first row is at
// position pos0[b]; where that is past 0 the ops read what precedes it where a whole sequence has its start: the
// conv its halo instead of the zero padding, the value shift v_prev instead of the bias, attention the keys before
// it. A sequence at position 0 starts there: its halo rows are not read (their gradients are written as zeros).
#pragma once
#include "core/real.h"

#include <cstdint>

namespace zaya {

struct SeqPrefix {
    const int64_t *pos0 = nullptr;      // [B] the position of each sequence's first row (null: all 0)
    const int64_t *key_start = nullptr; // [B] attention: the row of each sequence's key at position 0 in the k, v
                                        // given (its keys at positions 0 … pos0+T−1 follow it; null: the queries' rows)
    const real *z_prev = nullptr;       // [B, cca_conv_halo, C] the conv input z at the positions just before
    const real *v_prev = nullptr;       // [B, Dv] the delayed projection v_del at the position just before
    real *dz_prev = nullptr;            // [B, cca_conv_halo, C] z_prev's gradient, written (=) by cca_conv_backward
    real *dv_prev = nullptr;            // [B, Dv] v_prev's gradient, written (=) by delayed_values_backward
    int64_t first_position(int64_t b) const { return pos0 ? pos0[b] : 0; }
    bool continues(int64_t b) const { return first_position(b) > 0; }
};

} // namespace zaya
