// The memory a training configuration needs, computed without allocating (`zaya info --train`). Everything a
// step uses is allocated once, up front, so this is also what a run's resident memory settles at (plus the
// program, the libraries' thread pools and the mmapped data pages that are touched).
#pragma once
#include "model/config.h"
#include "optim/muon.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

// Per rank. With N data-parallel ranks the optimizer state is sharded (ZeRO-1, optim/zero_shard.h): `optimizer`
// and `muon_workspace` are the largest rank's, `optimizer_per_rank` lists every rank's state.
struct TrainMemory {
    size_t params = 0, grads = 0, optimizer = 0, activations = 0, scratch = 0, muon_workspace = 0;
    size_t conv_im2col = 0; // the grouped conv's gathered rows: forward, and backward (rows and their gradient)
    size_t bf16_operands = 0; // --precision bf16: the largest GEMM's operands rounded to bf16 (the LM head's)
    size_t context = 0; // context parallelism: the gathered keys and values of every layer, their gradients, halos
    std::vector<size_t> optimizer_per_rank;
    size_t total() const {
        return params + grads + optimizer + activations + scratch + muon_workspace + conv_im2col + bf16_operands +
               context;
    }
};

// `threads`: the OpenMP threads of the run (one Newton–Schulz workspace each); 0 = omp_get_max_threads().
// `bf16_matmuls`: --precision bf16. `doc_mask`: --doc-mask (sequences per micro-batch up to one per token).
// `context_parallel`: groups of that many of the `ranks` share each sequence (its seq/context_parallel tokens per
// rank are what the passes hold).
TrainMemory train_memory(const ZayaConfig &c, int64_t micro_batch, int64_t seq, int ranks = 1,
                         NsPrecision ns = NsPrecision::BF16, int threads = 0, bool bf16_matmuls = false,
                         bool doc_mask = false, int context_parallel = 1);

// One line of a memory plan.
struct MemoryItem {
    std::string name;
    size_t bytes = 0;
    std::string what;
};
size_t total_bytes(const std::vector<MemoryItem> &items);

// The device memory a training run on a CUDA GPU allocates per rank (train/memory_device.cpp), item by item: zaya's
// own allocations, as cuda::device_memory() counts them (the CUDA context and cuBLASLt's and NCCL's own allocations
// come on top). All of it is allocated by the end of the first step and kept, so the total is also the run's peak.
// `bf16_matmuls`: --precision bf16; `doc_mask`: --doc-mask.
std::vector<MemoryItem> device_train_memory(const ZayaConfig &c, int64_t micro_batch, int64_t seq, int ranks,
                                            bool bf16_matmuls, bool doc_mask = false);

// Resident memory of this process now (VmRSS): the program and its libraries before a run allocates anything.
size_t process_rss_bytes();
// Peak resident memory of this process so far (VmHWM).
size_t process_peak_rss_bytes();

} // namespace zaya
