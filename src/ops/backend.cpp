#include "ops/backend.h"

#include "core/error.h"

namespace zaya {

Backend &backend_named(const std::string &device) {
    if (device == "cpu") return cpu_backend();
    if (device == "cuda") return cuda_backend();
    fail("device must be 'cpu' or 'cuda', got '{}'", device);
}

} // namespace zaya
