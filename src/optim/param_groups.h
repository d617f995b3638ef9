// Which optimizer updates which parameter (spec §C.1, §C.2, §B.4). The split is Moonlight's "standard matrix
// split" that [8B] describes, with the choices the spec leaves open made here:
//
//   Muon  — every trainable 2-D weight except `model.embed_tokens.weight` and `lm_head.weight`:
//           q_proj, k_proj, v_proj_current, v_proj_delayed, o_proj, the router's down_proj, router_mlp.fc1/fc2 and
//           out_proj (17×R, tiny but 2-D); plus every expert of the 3-D `mlp.experts.gate_up_proj` [E, 2I, D] and
//           `mlp.experts.down_proj` [E, D, I] as E separate matrices (Megatron stores experts as separate linears,
//           and orthogonalising the stacked [E·2I, D] block would couple experts that never share a token).
//           All Muon matrices get decoupled weight decay (Moonlight: WD on every Muon matrix).
//   AdamW — everything else that is trainable: embedding and untied lm_head (the only ranges with weight decay,
//           spec B.4), and with *no* decay all 1-D parameters (norm weights, biases, residual scales/biases,
//           router_states_scale, qk_norm.temp) and the 3-D conv kernels (2-tap filters are not "matrices" in
//           Muon's sense; spec C.2 marks conv handling unknown — AdamW without decay is the conservative reading).
//   none  — `balancing_biases` (trainable = false): updated by the BalancingController, never by the optimizer.
//
// Each range carries the offset of its state in the optimizer's own compact state buffers (`state_offset`), so
// optimizer memory is only what each kind needs. ZeRO-1 shards (whole Muon matrices by owner, AdamW by ranges) are
// made by ShardPlan (optim/zero_shard.h).
#pragma once
#include "model/config.h"
#include "model/params.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zaya {

// One matrix Muon orthogonalises: rows×cols row-major at `offset` of the param/grad buffers.
struct MuonMatrix {
    std::string name;     // HF view name; experts are separate matrices of one view
    int64_t expert = -1;  // expert index within the 3-D view, -1 for an ordinary 2-D weight
    size_t offset = 0;    // into params / grads
    int64_t rows = 0, cols = 0;
    size_t state_offset = 0; // into the Muon momentum buffer
    size_t numel() const { return size_t(rows) * size_t(cols); }
};

// One contiguous range AdamW updates elementwise.
struct AdamWRange {
    std::string name;
    size_t offset = 0; // into params / grads
    size_t numel = 0;
    bool decay = false;      // decoupled weight decay applies (embedding / lm_head only)
    size_t state_offset = 0; // into the AdamW exp_avg / exp_avg_sq buffers
};

struct ParamGroups {
    std::vector<MuonMatrix> muon;   // in layout order
    std::vector<AdamWRange> adamw;  // in layout order
    size_t muon_state_size = 0;     // floats of Muon momentum state (sum of matrix sizes)
    size_t adamw_state_size = 0;    // floats of each AdamW moment buffer

    // Classifies the trainable views of `layout` (built from `config`) as described above.
    static ParamGroups classify(const ParamLayout &layout, const ZayaConfig &config);

    // The part of these groups that owns parameters in [begin, end) (a contiguous parameter range): AdamW ranges
    // clipped to the interval, Muon matrices whose first element lies in it (a matrix cannot be split: Newton–Schulz needs
    // all of it). State offsets are renumbered compactly for the shard.
    ParamGroups slice(size_t begin, size_t end) const;

    size_t max_muon_numel() const;
    int64_t max_muon_min_dim() const; // largest min(rows, cols): the Gram matrix side

    // The Muon matrices as runs (first index into `muon`, count) of consecutive matrices of one view with one shape,
    // stored back to back in the parameters and the state (a layer's experts): the batches a device orthogonalises
    // together.
    std::vector<std::pair<size_t, int64_t>> muon_runs() const;
};

} // namespace zaya
