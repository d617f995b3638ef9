// The floating-point type of parameters, activations and gradients. Normal builds use fp32; the finite-difference
// gradient tests build the model and ops a second time with -DZAYA_DOUBLE (fp64) so that differences of the loss
// are accurate enough to check every backward op (see tests/fd/).
#pragma once

namespace zaya {
#ifdef ZAYA_DOUBLE
using real = double;
#else
using real = float;
#endif
} // namespace zaya
