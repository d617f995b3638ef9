// Context parallelism (spec C.4: ZAYA1's context extension ran "all-gather KV context parallelism", 2 ranks at
// 32K, 8 at 131K). The n ranks of a group hold the same sequences of T tokens, rank r the chunk of positions
// [r·T/n, (r+1)·T/n) of each, so activation memory per rank falls with n. Everything but CCA works token by token;
// what crosses the chunks, per layer:
// - the conv reads the 2 z rows before a chunk, the value shift the delayed projection of the token before: the
//   rank before sends them point to point (the halo), and in backward their gradients go back to it;
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
#include <utility>

namespace zaya {

class Communicator;

class ContextParallel final : public ChunkExchange {
  public:
    // group: rank r of it holds chunk r. Buffers for up to max_seqs sequences of seq_len tokens, for every layer
    // (keep_all_layers: training, whose backward reads each layer's gathered keys) or one reused (evaluation).
    // Fails naming the value when seq_len does not split into chunks of at least the conv's halo.
    ContextParallel(std::shared_ptr<Communicator> group, const ZayaConfig &c, int64_t seq_len, int64_t max_seqs,
                    bool keep_all_layers);
    // Fails, naming the values, unless seq_len splits into n chunks of at least the conv's halo.
    static void check_chunks(const ZayaConfig &c, int64_t seq_len, int n);
    // Bytes the buffers take (zaya info): gathered keys and values, their gradients, the halos.
    static size_t bytes_needed(const ZayaConfig &c, int64_t seq_len, int64_t max_seqs, int n, bool keep_all_layers);
    size_t bytes() const {
        return (kv_.size + kv_grad_.size + halo_.size + halo_out_.size + dhalo_.size + dhalo_in_.size) * sizeof(real);
    }

    int chunk() const override { return rank_; }
    int chunks() const override { return size_; }
    Communicator &group() { return *group_; }
    int64_t seq_len() const { return T_; }
    int64_t chunk_len() const { return Tc_; }
    int64_t first_position() const { return int64_t(rank_) * Tc_; } // of this rank's chunk

    // ChunkExchange (model/chunk_exchange.h). The chunks are this group's ranks in order: the halo comes from rank
    // r−1 (rank 0's chunks start their sequences: no halo), the gathered keys lie per sequence, its T rows in turn
    // (every rank's chunk r at rows r·chunk_len …), and the keys' gradients are summed onto the ranks that own them
    // (one reduce per chunk and sequence).
    void begin(const int64_t *seq_start, int64_t B) override;
    const SeqPrefix *prefix(int64_t l) const override { return &prefixes_[size_t(layer_slot(l))]; }
    const SeqPrefix *exchange_halos(int64_t l, const real *z, const real *v_del) override;
    std::pair<const real *, const real *> gather_kv(int64_t l, const real *k, const real *v) override;
    std::pair<const real *, const real *> gathered_kv(int64_t l) const override;
    std::pair<real *, real *> zeroed_kv_grads() override;
    void reduce_kv_grads(real *dk, real *dv) override;
    void return_halo_grads(real *dz, real *d_vdel) override;

  private:
    size_t halo_floats() const; // one message: B·H·C of z, then B·Dv of v_del
    int64_t layer_slot(int64_t l) const { return keep_all_layers_ ? l : 0; }

    std::shared_ptr<Communicator> group_;
    int rank_, size_;
    int64_t T_, Tc_, max_seqs_, C_, H_, Dk_, Dv_;
    bool keep_all_layers_;
    int64_t B_ = 0; // sequences of the pass begun
    RealBuffer kv_;      // per layer slot: keys [max_seqs·T, Dk] then values, the current pass's B sequences first
    RealBuffer kv_grad_; // dk then dv, one layer's
    RealBuffer halo_;    // per layer slot: the halo received (the conv's backward reads it again)
    RealBuffer halo_out_, dhalo_, dhalo_in_; // the halo sent; its gradient sent, received
    std::vector<int64_t> key_start_;
    std::vector<SeqPrefix> prefixes_; // per layer slot
};

} // namespace zaya
