// OpenAI's `system_fingerprint`: a short name of the backend configuration a response's bits depend on — zaya's
// version and kernels (AVX-512 or AVX2), the model (its config, the dtype, size and first bytes of its embedding
// and LM head), and how the engine decodes (device, the linears' rows, the KV cache's element; batch invariance, or
// else the prompt steps, batch and drafts, which then choose the rows' paths).
// Two responses with the same fingerprint, request and seed were computed alike; with --batch-invariant, to the bit
// whatever else the server was doing (docs/inference.md).
#pragma once
#include <string>

namespace zaya {

class Engine;

// "fp_" and 12 hex digits of a hash of the above.
std::string system_fingerprint(const Engine &engine);

} // namespace zaya
