// NCCL between GPUs, one GPU per rank (device rank % GPUs of the host), behind the Communicator interface.
// Bootstrapped by another communicator (MPI between processes, or the single process), which carries NCCL's
// unique id from rank 0 to the others. Built with the CUDA backend (ZAYA_CUDA); chosen with ZAYA_COMM=nccl.
//
// The interface's buffers are host memory (the CPU trainer's); they are staged through one device buffer. GPU
// buffers (the trainer on --device cuda) use the *_device calls without staging; the gradient buckets' sums run on
// a non-blocking stream of their own, each bucket's parts reduced onto their owners in one NCCL group after an event
// recorded on the launch stream when its layer's backward kernels were queued, so they overlap the backward pass of
// the layers below.
#pragma once
#include "dist/comm.h"

#include <memory>

namespace zaya {

class NcclCommunicator : public Communicator {
  public:
    // The Communicator's device collectives, without staging (the backend is not needed): sums of GPU memory onto
    // their owners, started on a stream of their own after the work queued so far on the launch stream
    // (cuda::launch_stream_handle), then awaited together.
    virtual void start_reduce_sum_device(float *device_base, const std::vector<Part> &parts) = 0;
    virtual void wait_all_device() = 0;
    void start_reduce_sum_device(float *base, const std::vector<Part> &parts, Backend &) override {
        start_reduce_sum_device(base, parts);
    }
    void wait_all_device(Backend &) override { wait_all_device(); }
};

// Throws zaya::Error naming what is missing (no GPU, NCCL failure).
std::shared_ptr<NcclCommunicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap);

} // namespace zaya
