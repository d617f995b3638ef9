#include "dist/context_parallel.h"

#include "core/error.h"
#include "dist/comm.h"
#include "ops/cpu/cca.h"

#include <algorithm>

namespace zaya {

namespace {
int64_t conv_halo(const ZayaConfig &c) {
    return cpu::cca_conv_halo(cpu::ConvShape{c.conv_channels(), c.num_attention_heads + c.num_key_value_heads,
                                             c.cca_time0, c.cca_time1});
}

// The blocks of the gathered keys and values that rank `owner` holds: both parts of every sequence.
std::vector<Communicator::Block> owned_blocks(int owner, int n, int64_t B, int64_t T, int64_t Tc, int64_t Dk,
                                              size_t values) {
    std::vector<Communicator::Block> blocks;
    for (int64_t i = 0; i < B; ++i)
        for (int p = 0; p < 2; ++p) {
            const size_t at = size_t((i * T + chunk_part_start(owner, n, p, T)) * Dk), count = size_t(Tc * Dk);
            blocks.push_back({at, count});
            blocks.push_back({at + values, count});
        }
    return blocks;
}

} // namespace

ContextParallel::ContextParallel(std::shared_ptr<Communicator> group, const ZayaConfig &c, int64_t seq_len,
                                 int64_t max_seqs, bool keep_all_layers)
    : group_(std::move(group)), rank_(group_->rank()), size_(group_->size()), T_(seq_len),
      Tc_(seq_len / (2 * size_)), max_seqs_(max_seqs), C_(c.conv_channels()), H_(conv_halo(c)), Dk_(c.kv_dim()),
      Dv_(c.kv_dim() / 2), keep_all_layers_(keep_all_layers) {
    check_chunks(c, seq_len, size_);
    const size_t kv_floats = size_t(2 * kv_values());
    const int64_t slots = keep_all_layers ? c.num_hidden_layers : 1;
    kv_ = RealBuffer::zeros(kv_floats * size_t(slots));
    kv_grad_ = RealBuffer::zeros(kv_floats);
    const size_t halo = size_t(2 * max_seqs * (H_ * C_ + Dv_)); // both parts of every sequence
    halo_ = RealBuffer::zeros(halo * size_t(slots));
    dhalo_ = RealBuffer::zeros(halo);
    send_ = RealBuffer::zeros(halo / 2);
    recv_ = RealBuffer::zeros(halo / 2);
    prefixes_.resize(size_t(slots));
}

void ContextParallel::check_chunks(const ZayaConfig &c, int64_t seq_len, int n) {
    if (seq_len % (2 * n) != 0)
        fail("context parallelism over {} ranks cuts each sequence into {} chunks (2 per rank, balanced): the "
             "sequence length must divide by {}, got {}",
             n, 2 * n, 2 * n, seq_len);
    if (seq_len / (2 * n) < conv_halo(c))
        fail("context parallelism over {} ranks: chunks of {} tokens are shorter than the CCA conv's reach ({} "
             "tokens); use fewer ranks or longer sequences",
             n, seq_len / (2 * n), conv_halo(c));
}

void ContextParallel::check_options(const char *who, int64_t n, int64_t seq_len, const std::string &device) {
    if (n < 1) fail("{}: --context-parallel must be at least 1, got {}", who, n);
    if (n == 1) return;
    if (seq_len % (2 * n) != 0)
        fail("{}: --context-parallel {} needs --seq divisible by {} (2 equal chunks per rank), got {}", who, n, 2 * n,
             seq_len);
    if (device != "cpu") fail("{}: --context-parallel runs on --device cpu only so far", who);
}

void ContextParallel::check_ranks(const char *who, int ranks, int n) {
    if (ranks % n != 0)
        fail("{}: --context-parallel {} needs the ranks ({}) to divide into groups of {}", who, n, ranks, n);
}

std::shared_ptr<Communicator> ContextParallel::group_of(const char *who, Communicator &comm, int n) {
    check_ranks(who, comm.size(), n);
    // Consecutive ranks: with one launcher slot per core those share a machine, and the halos and keys cross the
    // fastest links.
    return comm.split(comm.rank() / n, comm.rank() % n);
}

size_t ContextParallel::bytes_needed(const ZayaConfig &c, int64_t seq_len, int64_t max_seqs, int n,
                                     bool keep_all_layers) {
    const size_t kv_floats = size_t(2 * max_seqs * seq_len * c.kv_dim());
    const size_t slots = keep_all_layers ? size_t(c.num_hidden_layers) : 1;
    const size_t halo = size_t(2 * max_seqs * (conv_halo(c) * c.conv_channels() + c.kv_dim() / 2));
    return n > 1 ? (kv_floats * (slots + 1) + halo * (slots + 2)) * sizeof(real) : 0;
}

size_t ContextParallel::halo_floats() const { return size_t(B_ * (H_ * C_ + Dv_)); }

real *ContextParallel::halo_slot(int64_t l) const {
    return halo_.data() + size_t(layer_slot(l)) * size_t(2 * max_seqs_ * (H_ * C_ + Dv_));
}

void ContextParallel::begin(const Batch &batch) {
    const std::vector<int64_t> &parts = batch.part_tokens;
    const int64_t N = batch.num_tokens(), B = batch.num_sequences();
    if (parts.empty() || parts.size() % 2 != 0 || int64_t(parts.size()) / 2 > max_seqs_)
        fail("context parallelism: a batch of {} parts, not 2 parts of each of at most {} rows (TokenBatch::chunk)",
             parts.size(), max_seqs_);
    B_ = int64_t(parts.size()) / 2; // rows
    part_at_.resize(parts.size());
    part_len_ = parts;
    int64_t at = 0;
    for (size_t q = 0; q < parts.size(); ++q) {
        if (parts[q] < 0 || parts[q] > Tc_)
            fail("context parallelism: part {} of the batch holds {} tokens, parts hold at most {}", q, parts[q], Tc_);
        part_at_[q] = at;
        at += parts[q];
    }
    if (at != N) fail("context parallelism: the batch's parts hold {} tokens, the batch {}", at, N);
    key_start_.resize(size_t(B));
    pos0_.resize(size_t(B));
    halo_of_.resize(size_t(B));
    const int64_t *seq_start = batch.seq_start.data();
    size_t q = 0; // the part holding sequence b: row q/2, part q % 2
    for (int64_t b = 0; b < B; ++b) {
        const int64_t n0 = seq_start[b];
        while (q < parts.size() && n0 >= part_at_[q] + part_len_[q]) ++q;
        if (q == parts.size() || seq_start[b + 1] > part_at_[q] + part_len_[q])
            fail("context parallelism: sequence {} of the batch (tokens {}..{}) crosses a part's end", b, n0,
                 seq_start[b + 1] - 1);
        const int64_t in_part = n0 - part_at_[q];
        const int64_t place = part_start(int(q % 2)) + in_part; // its first token's place in its row
        const int64_t pos0 = batch.positions[size_t(n0)];
        if (pos0 > place || (in_part != 0 && pos0 != 0))
            fail("context parallelism: sequence {} of the batch starts at position {}, at {} of its row", b, pos0,
                 place);
        key_start_[size_t(b)] = int64_t(q / 2) * T_ + place - pos0; // its document's first key in the gathered rows
        pos0_[size_t(b)] = pos0;
        halo_of_[size_t(b)] = in_part == 0 ? int64_t(q) : -1; // the halo of its part, if it starts the part
    }
    for (size_t slot = 0; slot < prefixes_.size(); ++slot) {
        real *halo = halo_slot(int64_t(slot));
        const int64_t v_at = 2 * B_ * H_ * C_; // the halo's v_del rows after its z rows, one entry per part
        prefixes_[slot] = SeqPrefix{pos0_.data(),         key_start_.data(), halo, halo + v_at, dhalo_.data(),
                                    dhalo_.data() + v_at, halo_of_.data()};
    }
}

void ContextParallel::pack_tails(int p, const real *z, const real *v_del, real *out) const {
    for (int64_t i = 0; i < B_; ++i) {
        const size_t q = size_t(2 * i + p);
        real *zo = out + i * H_ * C_, *vo = out + B_ * H_ * C_ + i * Dv_;
        if (part_len_[q] < Tc_) { // the row ends in or before this part: no part after it reads its tail
            std::fill_n(zo, H_ * C_, real(0));
            std::fill_n(vo, Dv_, real(0));
            continue;
        }
        const int64_t end = part_at_[q] + Tc_; // one past the part's last row
        std::copy_n(z + (end - H_) * C_, H_ * C_, zo);
        std::copy_n(v_del + (end - 1) * Dv_, Dv_, vo);
    }
}

void ContextParallel::unpack_halo(int p, const real *in, real *halo) const {
    for (int64_t i = 0; i < B_; ++i) {
        const int64_t s = 2 * i + p;
        std::copy_n(in + i * H_ * C_, H_ * C_, halo + s * H_ * C_);
        std::copy_n(in + B_ * H_ * C_ + i * Dv_, Dv_, halo + 2 * B_ * H_ * C_ + s * Dv_);
    }
}

void ContextParallel::pack_halo(int p, const real *halo, real *out) const {
    for (int64_t i = 0; i < B_; ++i) {
        const int64_t s = 2 * i + p;
        real *zo = out + i * H_ * C_, *vo = out + B_ * H_ * C_ + i * Dv_;
        if (part_len_[size_t(s)] == 0) { // no sequence, so no op wrote this entry's gradient
            std::fill_n(zo, H_ * C_, real(0));
            std::fill_n(vo, Dv_, real(0));
            continue;
        }
        std::copy_n(halo + s * H_ * C_, H_ * C_, zo);
        std::copy_n(halo + 2 * B_ * H_ * C_ + s * Dv_, Dv_, vo);
    }
}

void ContextParallel::add_to_tails(int p, const real *in, real *dz, real *d_vdel) const {
    for (int64_t i = 0; i < B_; ++i) {
        const size_t q = size_t(2 * i + p);
        if (part_len_[q] < Tc_) continue; // its tail went out as zeros: the part after it is empty
        const int64_t end = part_at_[q] + Tc_;
        const real *dzh = in + i * H_ * C_, *dvh = in + B_ * H_ * C_ + i * Dv_;
        real *dzr = dz + (end - H_) * C_, *dvr = d_vdel + (end - 1) * Dv_;
        for (int64_t k = 0; k < H_ * C_; ++k) dzr[k] += dzh[k];
        for (int64_t k = 0; k < Dv_; ++k) dvr[k] += dvh[k];
    }
}

// Each transfer below is a chain along the ranks: every rank sends before it receives, and the chain's end only
// receives, so the blocking transfers always complete.
const SeqPrefix *ContextParallel::exchange_halos(int64_t l, const real *z, const real *v_del) {
    real *halo = halo_slot(l);
    const bool first = rank_ == 0, last = rank_ + 1 == size_;
    real *out = send_.data(), *in = recv_.data();
    const size_t n = halo_floats();
    // Part 0 (chunk r) follows chunk r−1: rank r−1's part 0.
    if (!last) {
        pack_tails(0, z, v_del, out);
        group_->send(out, n, rank_ + 1);
    }
    if (!first) {
        group_->recv(in, n, rank_ - 1);
        unpack_halo(0, in, halo);
    }
    // Part 1 (chunk 2n−1−r) follows chunk 2n−2−r: rank r+1's part 1, or on the last rank its own part 0.
    if (!first) {
        pack_tails(1, z, v_del, out);
        group_->send(out, n, rank_ - 1);
    }
    if (!last) {
        group_->recv(in, n, rank_ + 1);
        unpack_halo(1, in, halo);
    } else {
        pack_tails(0, z, v_del, out);
        unpack_halo(1, out, halo);
    }
    return prefix(l);
}

void ContextParallel::return_halo_grads(real *dz, real *d_vdel) {
    const bool first = rank_ == 0, last = rank_ + 1 == size_;
    real *out = send_.data(), *in = recv_.data();
    const size_t n = halo_floats();
    // Part 0's halo came from rank r−1's part 0 (rank 0's part 0 has none).
    if (!first) {
        pack_halo(0, dhalo_.data(), out);
        group_->send(out, n, rank_ - 1);
    }
    if (!last) {
        group_->recv(in, n, rank_ + 1);
        add_to_tails(0, in, dz, d_vdel);
    }
    // Part 1's from rank r+1's part 1, or on the last rank from its own part 0.
    if (!last) {
        pack_halo(1, dhalo_.data(), out);
        group_->send(out, n, rank_ + 1);
    }
    if (!first) {
        group_->recv(in, n, rank_ - 1);
        add_to_tails(1, in, dz, d_vdel);
    }
    if (last) {
        pack_halo(1, dhalo_.data(), out);
        add_to_tails(0, out, dz, d_vdel);
    }
}

real *ContextParallel::kv_slot(int64_t l) const {
    return kv_.data() + size_t(layer_slot(l)) * size_t(2 * kv_values());
}

std::pair<const real *, const real *> ContextParallel::gathered_kv(int64_t l) const {
    const real *keys = kv_slot(l);
    return {keys, keys + kv_values()};
}

std::pair<const real *, const real *> ContextParallel::gather_kv(int64_t l, const real *k, const real *v) {
    real *keys = kv_slot(l);
    const int64_t values = kv_values();
    for (int64_t i = 0; i < B_; ++i)
        for (int p = 0; p < 2; ++p) { // a part cut short: zeros after its rows (no query reads them)
            real *at = keys + (i * T_ + part_start(p)) * Dk_;
            const size_t q = size_t(2 * i + p);
            const int64_t row = part_at_[q], len = part_len_[q];
            std::copy_n(k + row * Dk_, len * Dk_, at);
            std::copy_n(v + row * Dk_, len * Dk_, at + values);
            std::fill_n(at + len * Dk_, (Tc_ - len) * Dk_, real(0));
            std::fill_n(at + values + len * Dk_, (Tc_ - len) * Dk_, real(0));
        }
    for (int root = 0; root < size_; ++root)
        group_->broadcast_blocks(keys, owned_blocks(root, size_, B_, T_, Tc_, Dk_, size_t(values)), root);
    return {keys, keys + values};
}

std::pair<real *, real *> ContextParallel::zeroed_kv_grads() {
    std::fill_n(kv_grad_.data(), kv_grad_.size, real(0));
    return {kv_grad_.data(), kv_grad_.data() + kv_values()};
}

void ContextParallel::reduce_kv_grads(real *dk, real *dv) {
    real *dkeys = kv_grad_.data();
    const int64_t values = kv_values();
    std::vector<Communicator::Part> parts;
    for (int owner = 0; owner < size_; ++owner)
        for (const Communicator::Block &b : owned_blocks(owner, size_, B_, T_, Tc_, Dk_, size_t(values)))
            parts.push_back({b.offset, b.count, owner});
    group_->start_reduce_sum(dkeys, parts);
    group_->wait_all();
    for (int64_t i = 0; i < B_; ++i)
        for (int p = 0; p < 2; ++p) {
            const real *at = dkeys + (i * T_ + part_start(p)) * Dk_;
            const size_t q = size_t(2 * i + p);
            const int64_t row = part_at_[q], len = part_len_[q];
            std::copy_n(at, len * Dk_, dk + row * Dk_);
            std::copy_n(at + values, len * Dk_, dv + row * Dk_);
        }
}

} // namespace zaya
