// SingleProcess's out-of-line members, on their own so that binaries without MPI or NCCL (the CUDA op tests) can
// link the single-process communicator alone.
#include "core/error.h"
#include "dist/comm.h"

#include <cstdlib>

namespace zaya {

void SingleProcess::no_peer(int rank) {
    fail("communicator: rank {} does not exist in a single-process run", rank);
}

void SingleProcess::abort(int code) { std::exit(code); }

} // namespace zaya
