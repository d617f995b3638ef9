// The NCCL communicator of the CUDA build (src/dist/comm_nccl.cu, host code only), compiled as C++ for zaya_emu
// against the NCCL stand-in (include/nccl.h, nccl_emu.cpp): ZAYA_COMM=nccl between emulated GPUs.
#include "dist/comm_nccl.cu"
