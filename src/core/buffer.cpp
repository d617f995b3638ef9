#include "core/buffer.h"

#include "core/error.h"

#include <cstdlib>
#include <cstring>

namespace zaya {

RealBuffer RealBuffer::zeros(size_t n) {
    RealBuffer b;
    size_t bytes = (n * sizeof(real) + 63) / 64 * 64;
    void *p = bytes ? std::aligned_alloc(64, bytes) : nullptr;
    if (bytes && !p) fail("out of memory allocating {:.1f} MiB", double(bytes) / (1 << 20));
    if (p) std::memset(p, 0, bytes);
    b.ptr = {static_cast<real *>(p), std::free};
    b.size = n;
    return b;
}

} // namespace zaya
