#include "ops/backend.h"

#include "core/error.h"

namespace zaya {

double Backend::sum_squares_ranges(const real *base, std::span<const std::pair<size_t, size_t>> ranges) {
    double total = 0.0;
    for (const auto &[offset, n] : ranges) total += sum_squares(base + offset, n);
    return total;
}

Backend &backend_named(const std::string &device) {
    if (device == "cpu") return cpu_backend();
    if (device == "cuda") return cuda_backend();
    fail("device must be 'cpu' or 'cuda', got '{}'", device);
}

} // namespace zaya
