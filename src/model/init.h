// Initialisation of a fresh model (spec B.3): HF's scheme where it is known, documented choices elsewhere.
#pragma once
#include "model/params.h"

#include <cstdint>

namespace zaya {

// Matrices and embeddings N(0, initializer_range); conv kernels and biases U(±1/√fan_in) (PyTorch Conv1d
// default); norms, scales and router_states_scale 1; other biases 0; key temperature 1 (not HF's 0, which
// makes attention uniform: spec B.3); balancing biases 0 with the skip slot at −1.
void model_init_random(Model &m, uint64_t seed);

// The same for view `i` of `layout` alone, written to p[0 .. numel): what model_init_random does for that view.
void init_param(const ZayaConfig &c, const ParamLayout &layout, size_t i, real *p, uint64_t seed);

} // namespace zaya
