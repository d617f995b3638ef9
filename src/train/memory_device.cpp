// The device memory a training run on a CUDA GPU allocates (`zaya info --train --device cuda`), item by item, from
// the same size functions the CUDA ops size their buffers with (ops/cuda/*.h): plain C++, so a build without CUDA
// plans it too.
#include "data/loader.h"
#include "model/activations.h"
#include "model/backward.h"
#include "ops/cuda/attention.h"
#include "ops/cuda/cca.h"
#include "ops/cuda/lm_head.h"
#include "ops/cuda/moe.h"
#include "ops/cuda/muon.h"
#include "ops/cuda/runtime.h"
#include "optim/param_groups.h"
#include "optim/zero_shard.h"
#include "train/memory.h"

#include <algorithm>

namespace zaya {

namespace {
size_t buffer_bytes(size_t reals) { return (reals * sizeof(real) + 63) / 64 * 64; } // Backend::alloc's rounding
size_t ceil_div(int64_t a, int64_t b) { return size_t((a + b - 1) / b); }
} // namespace

std::vector<MemoryItem> device_train_memory(const ZayaConfig &c, int64_t micro_batch, int64_t seq, int ranks,
                                            bool bf16, bool doc_mask) {
    const int64_t N = micro_batch * seq, B = TokenBatch::max_sequences(micro_batch, seq, doc_mask);
    const int64_t L = c.num_hidden_layers, D = c.hidden_size;
    const int64_t nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim, R = c.router_hidden_size;
    const int64_t Dq = nq * hd, Dk = nkv * hd, V = c.vocab_size, K = c.router_classes();
    const cpu::ConvShape cs{c.conv_channels(), nq + nkv, c.cca_time0, c.cca_time1};
    const cpu::AttnShape as{nq, nkv, hd, 1.0f, 0};
    const cpu::MoeShape ms{D, c.moe_intermediate_size, c.num_experts, c.skip_passthrough};
    std::vector<MemoryItem> m;

    const ParamLayout layout = ParamLayout::build(c);
    const ParamGroups groups = ParamGroups::classify(layout, c);
    const ShardPlan plan = ShardPlan::make(groups, ranks);
    m.push_back({"parameters", buffer_bytes(layout.total), "fp32 master weights"});
    m.push_back({"gradients", buffer_bytes(layout.total) + buffer_bytes(2 * size_t(L * K)),
                 "fp32, and the step's routing counts"});
    size_t optimizer = 0, muon = 0;
    for (int r = 0; r < ranks; ++r) { // the largest rank's share (ZeRO-1)
        const ParamGroups local = plan.local(groups, r);
        optimizer = std::max(optimizer, buffer_bytes(local.muon_state_size) + 2 * buffer_bytes(local.adamw_state_size));
        // Newton–Schulz's workspace and the update it orthogonalises grow to the largest matrix, Gram side and batch
        // (a layer's experts) of the runs (ops/cuda/backend.cpp muon_step).
        size_t numel = 0;
        int64_t min_dim = 0, count = 0;
        for (const auto &[first, n] : local.muon_runs()) {
            const MuonMatrix &mm = local.muon[first];
            numel = std::max(numel, mm.numel()), min_dim = std::max(min_dim, std::min(mm.rows, mm.cols));
            count = std::max(count, n);
        }
        if (count > 0)
            muon = std::max(muon, cuda::NewtonSchulzBf16::bytes_needed(numel, min_dim, count) +
                                      numel * size_t(count) * sizeof(float));
    }
    m.push_back({"optimizer", optimizer, ranks > 1 ? "Muon momentum, AdamW moments; the largest rank's ZeRO-1 share"
                                                   : "Muon momentum, AdamW moments"});
    m.push_back({"Muon", muon, "bf16 Newton-Schulz workspace and the update, for the largest batch of matrices"});
    m.push_back({"activations", Activations::bytes_needed(c, N, B, true, /*store_logits=*/false, bf16),
                 bf16 ? "every layer kept for the backward pass, with bf16 copies of the linears' inputs"
                      : "every layer kept for the backward pass"});
    m.push_back({"backward", GradScratch::bytes_needed(c, N, B), "one layer's gradients of activations"});

    if (bf16) { // the matrices' bf16 copies, made once per step (the linears read with input width % 8 == 0)
        size_t weights = 0;
        const std::pair<int64_t, int64_t> linears[] = {{Dq, D}, {Dk, D}, {Dk / 2, D}, {Dk / 2, D}, {D, Dq},
                                                       {R, D},  {R, R},  {R, R},      {K, R}};
        for (const auto &[O, I] : linears) weights += I % 8 == 0 ? size_t(O * I) * 2 : 0;
        if (ms.E > 0 && cuda::experts_on_tensor_cores(ms)) weights += size_t(3 * ms.E * ms.I * ms.D) * 2;
        if (cuda::conv_on_tensor_cores(cs)) weights += size_t(cs.C * cs.k1 * (cs.C / cs.groups)) * 2;
        m.push_back({"bf16 weights", size_t(L) * weights, "each matrix's bf16 copy, kept through a step"});
    }

    // The ops' grow-once scratch (runtime.h Scratch), at its largest.
    size_t ops = 0;
    const int64_t chunk = std::min(cuda::lm_head_chunk_rows(V), N);
    ops += size_t(chunk * V + N) * sizeof(float); // the LM head's logits chunk and losses
    if (bf16 && D % 8 == 0 && V % 8 == 0) ops += cuda::pieces_bytes(cuda::lm_head_bf16_pieces(chunk, D, V));
    if (bf16 && ms.E > 0 && cuda::experts_on_tensor_cores(ms)) ops += cuda::pieces_bytes(cuda::moe_bf16_pieces(N, ms));
    if (bf16 && cuda::attention_on_tensor_cores(as)) ops += cuda::attention_bf16_bytes(N, as, true);
    ops += size_t(N * nq) * sizeof(float); // the attention backward's row dots
    // The conv: the tensor-core path's rows, or the fp32 weight gradient's per-chunk partials (ColumnSums), which
    // other column sums share (the widest: the depthwise weight gradient, the biases, the LM head's).
    const size_t column_sums = std::max({ceil_div(N, 256) * size_t(std::max({cs.C * cs.k0, D, c.lm_head_bias ? V : 0,
                                                                            c.attention_bias ? Dq : 0})),
                                         ceil_div(cpu::cca_conv_p_rows(N, B, cs), 256) * size_t(cs.C)}) *
                               sizeof(float);
    if (bf16 && cuda::conv_on_tensor_cores(cs)) {
        ops += cuda::pieces_bytes(cuda::conv_bf16_pieces(N, cs, true)) + column_sums;
    } else {
        ops += std::max(column_sums, ceil_div(N, 512) * size_t(cs.C * (cs.C / cs.groups) * cs.k1) * sizeof(float));
    }
    ops += ceil_div(N, 32) * 5 * size_t(D) * sizeof(float);     // the fused residual norm backward's partials
    ops += size_t(N * nkv) * sizeof(double);                     // the key temperature's per-token gradients
    // The grouping's per-chunk counts: by expert, and by token-id digit in the embedding backward's radix sort, whose
    // keys and orders come on top.
    const int64_t digits = int64_t(1) << cuda::kTokenIdDigitBits;
    ops += cuda::group_tokens_scratch_bytes(N, std::max(K - 1, digits));
    ops += cuda::pieces_bytes(std::array<size_t, 2>{4 * size_t(N) * 4, size_t(digits + 2) * 8});
    // bf16 operand copies of the linears: each output gradient's (the widest), the router MLP's inputs (the others
    // come with bf16 copies from the ops that write them).
    if (bf16) {
        int64_t widest = 0;
        const std::pair<int64_t, int64_t> grads[] = {{Dq, D}, {Dk, D}, {D, Dq}, {R, D}, {R, R}, {K, R}};
        for (const auto &[O, I] : grads)
            if (O % 8 == 0 && I % 8 == 0) widest = std::max(widest, O);
        ops += size_t(N * widest) * 2 + (R % 8 == 0 ? size_t(N * R) * 2 : 0);
    }
    m.push_back({"op workspaces", ops, "the ops' scratch at its largest (LM head chunks, bf16 operand rows, partials)"});
    m.push_back({"cuBLASLt", cuda::kGemmWorkspaceBytes, "the GEMMs' workspace"});
    return m;
}

size_t total_bytes(const std::vector<MemoryItem> &items) {
    size_t total = 0;
    for (const MemoryItem &i : items) total += i.bytes;
    return total;
}

} // namespace zaya
