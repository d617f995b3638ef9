// NCCL between GPUs, one GPU per rank (device rank % GPUs of the host), behind the Communicator interface.
// Bootstrapped by another communicator (MPI between processes, or the single process), which carries NCCL's
// unique id from rank 0 to the others. Built with the CUDA backend (ZAYA_CUDA); chosen with ZAYA_COMM=nccl.
//
// The interface's buffers are host memory (the CPU trainer's); they are staged through one device buffer. GPU
// buffers (the trainer on --device cuda) use the *_device calls without staging.
#pragma once
#include "dist/comm.h"

#include <memory>

namespace zaya {

class NcclCommunicator : public Communicator {
  public:
    // In-place sum of n floats held in GPU memory.
    virtual void allreduce_sum_device(float *device_data, size_t n) = 0;
    // The Communicator's device collectives, without staging (the backend is not needed).
    void allreduce_sum_device(float *data, size_t n, Backend &) override { allreduce_sum_device(data, n); }
};

// Throws zaya::Error naming what is missing (no GPU, NCCL failure).
std::shared_ptr<NcclCommunicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap);

} // namespace zaya
