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
} // namespace

ContextParallel::ContextParallel(std::shared_ptr<Communicator> group, const ZayaConfig &c, int64_t seq_len,
                                 int64_t max_seqs, bool keep_all_layers)
    : group_(std::move(group)), rank_(group_->rank()), size_(group_->size()), T_(seq_len), Tc_(seq_len / size_),
      max_seqs_(max_seqs), C_(c.conv_channels()), H_(conv_halo(c)), Dk_(c.kv_dim()), Dv_(c.kv_dim() / 2),
      keep_all_layers_(keep_all_layers) {
    check_chunks(c, seq_len, size_);
    const size_t kv_floats = size_t(2 * max_seqs * T_ * Dk_);
    const int64_t slots = keep_all_layers ? c.num_hidden_layers : 1;
    kv_ = RealBuffer::zeros(kv_floats * size_t(slots));
    kv_grad_ = RealBuffer::zeros(kv_floats);
    const size_t halo = size_t(max_seqs * (H_ * C_ + Dv_));
    halo_ = RealBuffer::zeros(halo * size_t(slots));
    prefixes_.resize(size_t(slots));
    halo_out_ = RealBuffer::zeros(halo);
    dhalo_ = RealBuffer::zeros(halo);
    dhalo_in_ = RealBuffer::zeros(halo);
}

void ContextParallel::check_chunks(const ZayaConfig &c, int64_t seq_len, int n) {
    if (seq_len % n != 0)
        fail("context parallelism over {} ranks needs a sequence length that splits evenly into {} chunks, got {}", n,
             n, seq_len);
    if (seq_len / n < conv_halo(c))
        fail("context parallelism over {} ranks: chunks of {} tokens are shorter than the CCA conv's reach ({} "
             "tokens); use fewer ranks or longer sequences",
             n, seq_len / n, conv_halo(c));
}

size_t ContextParallel::bytes_needed(const ZayaConfig &c, int64_t seq_len, int64_t max_seqs, int n,
                                     bool keep_all_layers) {
    const size_t kv_floats = size_t(2 * max_seqs * seq_len * c.kv_dim());
    const size_t slots = keep_all_layers ? size_t(c.num_hidden_layers) : 1;
    const size_t halo = size_t(max_seqs * (conv_halo(c) * c.conv_channels() + c.kv_dim() / 2));
    return n > 1 ? (kv_floats * (slots + 1) + halo * (slots + 3)) * sizeof(real) : 0;
}

size_t ContextParallel::halo_floats() const { return size_t(B_ * (H_ * C_ + Dv_)); }

void ContextParallel::begin(const int64_t *seq_start, int64_t B) {
    if (B > max_seqs_)
        fail("context parallelism: a batch of {} sequences, planned for {}", B, max_seqs_);
    for (int64_t b = 0; b < B; ++b)
        if (seq_start[b + 1] - seq_start[b] != Tc_)
            fail("context parallelism: sequence {} of the batch holds {} tokens, not this rank's chunk of {} (every "
                 "sequence must be {} tokens long, cut into {} chunks)",
                 b, seq_start[b + 1] - seq_start[b], Tc_, T_, size_);
    B_ = B;
    key_start_.resize(size_t(B));
    for (int64_t b = 0; b < B; ++b) key_start_[size_t(b)] = b * T_;
    const size_t halo_slot = size_t(max_seqs_ * (H_ * C_ + Dv_));
    for (size_t slot = 0; slot < prefixes_.size(); ++slot) {
        SeqPrefix &p = prefixes_[slot];
        p = SeqPrefix{};
        p.pos0 = first_position();
        p.key_start = key_start_.data();
        if (rank_ == 0) continue; // its chunks start their sequences: nothing before them
        real *halo = halo_.data() + slot * halo_slot;
        p.z_prev = halo;
        p.v_prev = halo + B * H_ * C_;
        p.dz_prev = dhalo_.data();
        p.dv_prev = dhalo_.data() + B * H_ * C_;
    }
}

const SeqPrefix *ContextParallel::exchange_halos(int64_t l, const real *z, const real *v_del) {
    // Send first, then receive: the last rank only receives, so the chain of blocking transfers always completes.
    if (rank_ + 1 < size_) {
        real *out = halo_out_.data();
        for (int64_t b = 0; b < B_; ++b) {
            const int64_t end = (b + 1) * Tc_; // one past the sequence's last row
            std::copy_n(z + (end - H_) * C_, H_ * C_, out + b * H_ * C_);
            std::copy_n(v_del + (end - 1) * Dv_, Dv_, out + B_ * H_ * C_ + b * Dv_);
        }
        group_->send(out, halo_floats(), rank_ + 1);
    }
    if (rank_ > 0) { // into layer l's slot, where its prefix points
        const size_t halo_slot = size_t(max_seqs_ * (H_ * C_ + Dv_));
        group_->recv(halo_.data() + size_t(layer_slot(l)) * halo_slot, halo_floats(), rank_ - 1);
    }
    return prefix(l);
}

std::pair<const real *, const real *> ContextParallel::gathered_kv(int64_t l) const {
    const real *slot = kv_.data() + size_t(layer_slot(l)) * size_t(2 * max_seqs_ * T_ * Dk_);
    return {slot, slot + max_seqs_ * T_ * Dk_};
}

std::pair<const real *, const real *> ContextParallel::gather_kv(int64_t l, const real *k, const real *v) {
    real *keys = kv_.data() + size_t(layer_slot(l)) * size_t(2 * max_seqs_ * T_ * Dk_);
    const int64_t values = max_seqs_ * T_ * Dk_; // offset of the values from the keys
    for (int64_t b = 0; b < B_; ++b) {
        real *at = keys + (b * T_ + first_position()) * Dk_;
        std::copy_n(k + b * Tc_ * Dk_, Tc_ * Dk_, at);
        std::copy_n(v + b * Tc_ * Dk_, Tc_ * Dk_, at + values);
    }
    std::vector<Communicator::Block> blocks;
    for (int root = 0; root < size_; ++root) { // each rank's chunks of every sequence, keys and values
        blocks.clear();
        for (int64_t b = 0; b < B_; ++b) {
            const size_t at = size_t((b * T_ + int64_t(root) * Tc_) * Dk_), n = size_t(Tc_ * Dk_);
            blocks.push_back({at, n});
            blocks.push_back({at + size_t(values), n});
        }
        group_->broadcast_blocks(keys, blocks, root);
    }
    return {keys, keys + values};
}

std::pair<real *, real *> ContextParallel::zeroed_kv_grads() {
    std::fill_n(kv_grad_.data(), kv_grad_.size, real(0));
    return {kv_grad_.data(), kv_grad_.data() + max_seqs_ * T_ * Dk_};
}

void ContextParallel::reduce_kv_grads(real *dk, real *dv) {
    real *dkeys = kv_grad_.data();
    const int64_t values = max_seqs_ * T_ * Dk_;
    std::vector<Communicator::Part> parts;
    for (int owner = 0; owner < size_; ++owner)
        for (int64_t b = 0; b < B_; ++b) {
            const size_t at = size_t((b * T_ + int64_t(owner) * Tc_) * Dk_), n = size_t(Tc_ * Dk_);
            parts.push_back({at, n, owner});
            parts.push_back({at + size_t(values), n, owner});
        }
    group_->start_reduce_sum(dkeys, parts);
    group_->wait_all();
    for (int64_t b = 0; b < B_; ++b) {
        const real *at = dkeys + (b * T_ + first_position()) * Dk_;
        std::copy_n(at, Tc_ * Dk_, dk + b * Tc_ * Dk_);
        std::copy_n(at + values, Tc_ * Dk_, dv + b * Tc_ * Dk_);
    }
}

void ContextParallel::return_halo_grads(real *dz, real *d_vdel) {
    // Send first, then receive: rank 0 only receives, so the chain completes.
    if (rank_ > 0) group_->send(dhalo_.data(), halo_floats(), rank_ - 1);
    if (rank_ + 1 == size_) return;
    real *in = dhalo_in_.data();
    group_->recv(in, halo_floats(), rank_ + 1);
    for (int64_t b = 0; b < B_; ++b) {
        const int64_t end = (b + 1) * Tc_;
        const real *dzh = in + b * H_ * C_, *dvh = in + B_ * H_ * C_ + b * Dv_;
        real *dzr = dz + (end - H_) * C_, *dvr = d_vdel + (end - 1) * Dv_;
        for (int64_t i = 0; i < H_ * C_; ++i) dzr[i] += dzh[i];
        for (int64_t i = 0; i < Dv_; ++i) dvr[i] += dvh[i];
    }
}

} // namespace zaya
