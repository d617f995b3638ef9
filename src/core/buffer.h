// RealBuffer: an owned, 64-byte aligned array of reals in host or device memory (the deleter says which). One
// type for both, so the model's parameters, activations and gradients are carved the same way on either backend.
#pragma once
#include "core/real.h"

#include <cstddef>
#include <memory>

namespace zaya {

struct RealBuffer {
    std::unique_ptr<real, void (*)(void *)> ptr{nullptr, nullptr};
    size_t size = 0; // in reals
    static RealBuffer zeros(size_t n); // host memory, zero-filled (AVX-512 rows, no false sharing between views)
    real *data() const { return ptr.get(); }
    // The same memory seen as another element type (int32 / int64 arrays carved from one allocation).
    template <class T> T *as() const { return reinterpret_cast<T *>(ptr.get()); }
};

} // namespace zaya
