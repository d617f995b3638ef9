// What comes before the rows of a batch whose sequences are later parts of longer ones (context parallelism: the
// earlier parts are other ranks'; dist/context_parallel.h), in the ops' memory. Sequence b's first row is at
// position pos0[b]; where that is past 0 the ops read what precedes it where a whole sequence has its start: the
// conv its halo instead of the zero padding (only the halo rows at positions ≥ 0: with document masking a
// document may have begun less than a halo before), the value shift v_prev instead of the bias, attention the keys
// before it. A sequence at position 0 starts there: its halo is not read (its gradient is written as zeros).
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
    // [B] which entry of z_prev, v_prev and their gradients sequence b has, −1 none (only a sequence that starts a
    // rank's part of a row can continue one; the others start documents). Null: entry b.
    const int64_t *halo_of = nullptr;
    int64_t first_position(int64_t b) const { return pos0 ? pos0[b] : 0; }
    int64_t halo_entry(int64_t b) const { return halo_of ? halo_of[b] : b; }
    bool continues(int64_t b) const { return first_position(b) > 0; }
};

} // namespace zaya
