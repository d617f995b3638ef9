// What the model's passes exchange when each batch holds chunks of longer sequences whose other chunks are on other
// ranks (context parallelism). The passes call it where a layer reads across a chunk's start; dist/context_parallel.h
// implements it over a communicator (the model itself knows nothing of ranks). See that file for what crosses.
#pragma once
#include "core/real.h"
#include "model/batch.h"
#include "ops/backend.h"

#include <cstdint>
#include <utility>

namespace zaya {

// Context parallelism's layout, load-balanced as Megatron-LM's: a sequence of T tokens is cut into 2n chunks of
// T/(2n) and rank r of n holds chunks r and 2n−1−r — its parts 0 and 1 — so every rank's queries see as many keys
// in all and causal attention's work is equal across the ranks (with n contiguous chunks the last rank's would be
// 2n−1 times the first's). The position of part `part`'s first token:
inline int64_t chunk_part_start(int r, int n, int part, int64_t T) {
    return int64_t(part == 0 ? r : 2 * n - 1 - r) * (T / (2 * int64_t(n)));
}

class ChunkExchange {
  public:
    virtual ~ChunkExchange() = default;
    // This rank r of the n that share each sequence (a data loader cuts its rows with them: TokenBatch::chunk).
    virtual int chunk() const = 0;
    virtual int chunks() const = 0;
    // Starts a pass over a batch (host memory) of this rank's parts 0 and 1 of every row in turn (chunk_part_start),
    // as many tokens of each as batch.part_tokens says (fewer where a packed row's padding begins), each part one
    // sequence, or with document masking cut after each EOS into sequences whose positions count from their
    // document's start; fails naming the sequence that is not so. Every rank of the group begins every pass, with
    // the same rows, even one whose parts are all empty (no tokens): the exchanges are collective.
    virtual void begin(const Batch &batch) = 0;
    // Forward, after layer l's projections: sends what the next chunk reads of this one's end (the last rows of z
    // [N, C] and v_del [N, Dv] of each sequence), receives the previous chunk's; returns layer l's prefix
    // (SeqBatch::prefix) for the conv, the value shift and attention.
    virtual const SeqPrefix *exchange_halos(int64_t l, const real *z, const real *v_del) = 0;
    // Layer l's prefix again (backward), for the pass begun.
    virtual const SeqPrefix *prefix(int64_t l) const = 0;
    // Layer l's keys and values [N, Dk] gathered from every chunk: the k and v attention reads, laid out as the
    // prefix's key_start says.
    virtual std::pair<const real *, const real *> gather_kv(int64_t l, const real *k, const real *v) = 0;
    // Backward: layer l's gathered keys and values, and zeroed buffers of their layout for their gradients.
    virtual std::pair<const real *, const real *> gathered_kv(int64_t l) const = 0;
    virtual std::pair<real *, real *> zeroed_kv_grads() = 0;
    // Sums those gradients over the chunks onto their owners; this chunk's into dk, dv [N, Dk] (=).
    virtual void reduce_kv_grads(real *dk, real *dv) = 0;
    // After layer l's conv and value shift backward wrote its prefix's dz_prev, dv_prev: sends them to the previous
    // chunk; adds the next chunk's into the last rows of dz [N, C] and d_vdel [N, Dv] of each sequence.
    virtual void return_halo_grads(real *dz, real *d_vdel) = 0;
};

} // namespace zaya
