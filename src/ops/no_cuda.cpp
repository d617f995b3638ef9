// cuda_backend() of a build without the CUDA backend (CMakeLists.txt links this file only then; otherwise
// ops/cuda/backend.cpp defines both functions).
#include "core/error.h"
#include "ops/backend.h"

namespace zaya {

bool cuda_backend_built() { return false; }

Backend &cuda_backend() {
    fail("--device cuda: this zaya was built without the CUDA backend (configure with nvcc installed, or "
         "-DZAYA_CUDA=ON)");
}

} // namespace zaya
