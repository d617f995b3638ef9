#include "train/memory.h"

#include "data/loader.h"
#include "dist/context_parallel.h"
#include "model/activations.h"
#include "model/backward.h"
#include "optim/balancing.h"
#include "optim/muon.h"
#include "optim/param_groups.h"
#include "optim/zero_shard.h"

#include <algorithm>
#include <omp.h>

#include <fstream>
#include <string>

namespace zaya {

namespace {
size_t proc_status_kib(const char *key) {
    std::ifstream f("/proc/self/status");
    std::string line;
    const std::string k(key);
    while (std::getline(f, line))
        if (line.rfind(k, 0) == 0) return size_t(std::stoull(line.substr(k.size()))) * 1024;
    return 0;
}
} // namespace

size_t process_rss_bytes() { return proc_status_kib("VmRSS:"); }
size_t process_peak_rss_bytes() { return proc_status_kib("VmHWM:"); }

TrainMemory train_memory(const ZayaConfig &c, int64_t micro_batch, int64_t seq, int ranks, NsPrecision ns, int threads,
                         bool bf16_matmuls, bool doc_mask, int context_parallel) {
    if (threads <= 0) threads = omp_get_max_threads();
    ParamLayout layout = ParamLayout::build(c);
    ParamGroups groups = ParamGroups::classify(layout, c);
    const ShardPlan plan = ShardPlan::make(groups, ranks);
    TrainMemory m;
    m.params = layout.total * sizeof(real);
    m.grads = layout.total * sizeof(real);
    for (int r = 0; r < ranks; ++r) {
        const ParamGroups local = plan.local(groups, r);
        // The rank's Muon momentum and AdamW's two moments; every rank's balancing controller (two moments and
        // the error: replicated, tiny).
        const size_t state = (plan.state_floats(groups, r) + 3 * size_t(c.num_hidden_layers * c.router_classes())) *
                             sizeof(real);
        m.optimizer_per_rank.push_back(state);
        m.optimizer = std::max(m.optimizer, state);
        // Newton–Schulz scratch, one per thread (each thread orthogonalises whole matrices).
        m.muon_workspace = std::max(m.muon_workspace, size_t(threads) * Muon::workspace_bytes(ns, local.max_muon_numel(),
                                                                                           local.max_muon_min_dim()));
    }
    const int64_t seqs = TokenBatch::max_sequences(micro_batch, seq, doc_mask, context_parallel);
    const int64_t tokens = micro_batch * (seq / std::max(1, context_parallel)); // a pass's: its chunks
    m.activations = Activations::bytes_needed(c, tokens, seqs, true);
    m.scratch = GradScratch::bytes_needed(c, tokens, seqs);
    m.conv_im2col = 3 * size_t(tokens * c.cca_time1 * c.conv_channels()) * sizeof(real);
    // cpu::gemm packs both operands of a bf16 GEMM into per-thread buffers that keep the largest size seen: the LM
    // head's backward, logits' gradient [tokens, V] and the embedding [V, D].
    if (bf16_matmuls) m.bf16_operands = size_t(tokens + c.hidden_size) * size_t(c.vocab_size) * 2;
    m.context = ContextParallel::bytes_needed(c, seq, micro_batch, context_parallel, true);
    return m;
}

} // namespace zaya
