// Context parallelism (spec C.4: ZAYA1's context extension ran "all-gather KV context parallelism", 2 ranks at
// 32K, 8 at 131K). The n ranks of a group hold the same sequences of T tokens, rank r two parts of each: chunks r
// and 2n−1−r of 2n (model/chunk_exchange.h: causal attention's work is then equal across the ranks), so activation
// memory per rank falls with n. Everything but CCA works token by token; what crosses the parts, per layer:
// - the conv reads the 2 z rows before a part, the value shift the delayed projection of the token before: the
//   rank holding the chunk before sends them point to point (the halo: part 0's from rank r−1, part 1's from rank
//   r+1, the last rank's part 1 follows its own part 0), and in backward their gradients go back to it;
// - attention reads every key before a query: the ranks all-gather the layer's keys and values (2 KV heads, a
//   quarter of the queries' size in ZAYA1) and in backward sum their gradients onto the ranks that own them.
// The model's passes call it (as their ChunkExchange) where a layer needs them when Activations::context is set.
// Host memory (the CPU backend) so far; blocking transfers (a layer waits for its halo and keys).
#pragma once
#include "core/buffer.h"
#include "model/chunk_exchange.h"
#include "model/config.h"
#include "ops/backend.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace zaya {

class Communicator;

class ContextParallel final : public ChunkExchange {
  public:
    // group: rank r of it holds chunks r and 2n−1−r. Buffers for up to max_seqs sequences of seq_len tokens, for
    // every layer (keep_all_layers: training, whose backward reads each layer's gathered keys) or one reused
    // (evaluation). Fails naming the value when seq_len does not split into 2n chunks of at least the conv's halo.
    ContextParallel(std::shared_ptr<Communicator> group, const ZayaConfig &c, int64_t seq_len, int64_t max_seqs,
                    bool keep_all_layers);
    // Fails, naming the values, unless seq_len splits into 2n chunks of at least the conv's halo.
    static void check_chunks(const ZayaConfig &c, int64_t seq_len, int n);
    // What a command (`who`: "train", "eval") can run with n > 1 before it has a model: fails, naming the option,
    // unless seq_len divides by 2n and the device is the CPU.
    static void check_options(const char *who, int64_t n, int64_t seq_len, const std::string &device);
    // Fails, naming the values, unless `ranks` divide into groups of n.
    static void check_ranks(const char *who, int ranks, int n);
    // This rank's group of n consecutive ranks of `comm` (called by every rank at once); fails unless they divide.
    static std::shared_ptr<Communicator> group_of(const char *who, Communicator &comm, int n);
    // Bytes the buffers take (zaya info): gathered keys and values, their gradients, the halos.
    static size_t bytes_needed(const ZayaConfig &c, int64_t seq_len, int64_t max_seqs, int n, bool keep_all_layers);
    size_t bytes() const {
        return (kv_.size + kv_grad_.size + halo_.size + dhalo_.size + send_.size + recv_.size) * sizeof(real);
    }

    int chunk() const override { return rank_; }
    int chunks() const override { return size_; }
    Communicator &group() { return *group_; }
    int64_t seq_len() const { return T_; }
    int64_t chunk_len() const { return Tc_; } // tokens of each part

    // ChunkExchange (model/chunk_exchange.h). The batch holds each row's parts 0 and 1 in turn (with document
    // masking cut into documents); the gathered keys lie per row, its T rows in turn (chunk c at rows
    // c·chunk_len …), and the keys' gradients are summed onto the ranks that own them (one reduce per chunk and
    // row). Halos are per part: the sequence that starts a part reads its part's. A part cut short by a packed
    // row's padding is the row's last: nothing reads its tail, and its successors hold no tokens; the messages keep
    // their size (zeros stand for what such parts do not have), so every rank sends and receives alike.
    void begin(const Batch &batch) override;
    const SeqPrefix *prefix(int64_t l) const override { return &prefixes_[size_t(layer_slot(l))]; }
    const SeqPrefix *exchange_halos(int64_t l, const real *z, const real *v_del) override;
    std::pair<const real *, const real *> gather_kv(int64_t l, const real *k, const real *v) override;
    std::pair<const real *, const real *> gathered_kv(int64_t l) const override;
    std::pair<real *, real *> zeroed_kv_grads() override;
    void reduce_kv_grads(real *dk, real *dv) override;
    void return_halo_grads(real *dz, real *d_vdel) override;

  private:
    size_t halo_floats() const; // one message, one part of every sequence: B·H·C of z, then B·Dv of v_del
    real *halo_slot(int64_t l) const; // layer l's halo received: [2B, H, C] of z, then [2B, Dv] of v_del
    // Layer l's gathered keys [max_seqs·T, Dk], the values kv_values() floats after them (and so in kv_grad_).
    real *kv_slot(int64_t l) const;
    int64_t kv_values() const { return max_seqs_ * T_ * Dk_; }
    // The message of part p: each row's part p's last rows of z and v_del (its tails; zeros for a part not full)
    // into out; the other way, a message into part p's rows of a halo (or of its gradient).
    void pack_tails(int p, const real *z, const real *v_del, real *out) const;
    void unpack_halo(int p, const real *in, real *halo) const;
    // The gradients: part p's rows of the halo's gradient into a message (zeros for an empty part, which no op
    // wrote); a message added into part p's tails where the part is full.
    void pack_halo(int p, const real *halo, real *out) const;
    void add_to_tails(int p, const real *in, real *dz, real *d_vdel) const;
    int64_t part_start(int p) const { return chunk_part_start(rank_, size_, p, T_); }
    int64_t layer_slot(int64_t l) const { return keep_all_layers_ ? l : 0; }

    std::shared_ptr<Communicator> group_;
    int rank_, size_;
    int64_t T_, Tc_, max_seqs_, C_, H_, Dk_, Dv_;
    bool keep_all_layers_;
    int64_t B_ = 0; // rows of the pass begun (2·B_ parts)
    RealBuffer kv_;      // per layer slot: keys [max_seqs·T, Dk] then values, the current pass's B sequences first
    RealBuffer kv_grad_; // dk then dv, one layer's
    RealBuffer halo_;    // per layer slot: the halo received (the conv's backward reads it again)
    RealBuffer dhalo_;   // its gradient, as the ops write it
    RealBuffer send_, recv_; // one message each
    std::vector<int64_t> key_start_, pos0_, halo_of_; // per sequence of the batch
    std::vector<int64_t> part_at_, part_len_;          // per part (2·B_): its first row in the batch, its rows
    std::vector<SeqPrefix> prefixes_; // per layer slot
};

} // namespace zaya
