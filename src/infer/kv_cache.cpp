#include "infer/kv_cache.h"

#include "core/error.h"

#include <algorithm>

namespace zaya {

KvRows::KvRows(DType element) : element_(element) {
    if (element != DType::F32 && element != DType::BF16)
        fail("the KV cache's element must be f32 or bf16, got {}", dtype_name(element));
}

void KvRows::append(const float *values, size_t n) {
    if (element_ == DType::F32) {
        f32_.insert(f32_.end(), values, values + n);
        return;
    }
    const size_t at = bf16_.size();
    bf16_.resize(at + n);
    for (size_t i = 0; i < n; ++i) bf16_[at + i] = f32_to_bf16(values[i]);
}

KvRows KvRows::first(size_t n) const {
    if (n > size()) fail("cannot take {} values of a KV cache holding {}", n, size());
    KvRows out(element_);
    if (element_ == DType::F32) out.f32_.assign(f32_.begin(), f32_.begin() + std::ptrdiff_t(n));
    else out.bf16_.assign(bf16_.begin(), bf16_.begin() + std::ptrdiff_t(n));
    return out;
}

void KvRows::truncate(size_t n) {
    if (n > size()) fail("cannot keep {} values of a KV cache holding {}", n, size());
    if (element_ == DType::F32) f32_.resize(n);
    else bf16_.resize(n);
}

void KvRows::shrink_to_fit() {
    f32_.shrink_to_fit();
    bf16_.shrink_to_fit();
}

size_t SequenceCache::bytes() const {
    size_t total = (conv.size() + vdel.size()) * sizeof(float);
    for (size_t l = 0; l < k.size(); ++l) total += k[l].bytes() + v[l].bytes();
    for (const SequenceState &s : snapshots) total += (s.conv.size() + s.vdel.size()) * sizeof(float);
    return total;
}

size_t SequenceCache::bytes_per_token(const ZayaConfig &c, DType element) {
    return 2 * size_t(c.num_hidden_layers * c.kv_dim()) * dtype_size(element);
}

bool SequenceCache::can_cut_to(int64_t n) const {
    return n == length ||
           std::any_of(snapshots.begin(), snapshots.end(), [n](const SequenceState &s) { return s.length == n; });
}

void SequenceCache::cut_back(int64_t n) {
    if (device_slot) fail("a sequence cached on the GPU cannot be cut back on the host");
    if (n < 0 || n > length) fail("cannot cut a sequence of {} tokens back to {}", length, n);
    if (n < length) {
        const auto at =
            std::find_if(snapshots.begin(), snapshots.end(), [n](const SequenceState &s) { return s.length == n; });
        if (at == snapshots.end()) fail("no state kept at length {} of a sequence of {} tokens", n, length);
        conv = at->conv;
        vdel = at->vdel;
        for (size_t l = 0; l < k.size(); ++l) {
            const size_t row = k[l].size() / size_t(length); // kv_dim
            k[l].truncate(size_t(n) * row);
            v[l].truncate(size_t(n) * row);
        }
        length = n;
    }
    std::erase_if(snapshots, [&](const SequenceState &s) {
        return s.length > n || (draft_from > 0 && s.length >= draft_from && !keeps_state_at(s.length));
    });
    draft_from = 0;
}

SequenceCache SequenceCache::prefix(int64_t n) const {
    if (device_slot) fail("a sequence cached on the GPU cannot be cut back on the host");
    if (n < 0 || n > length) fail("cannot cut a sequence of {} tokens back to {}", length, n);
    const SequenceState *at = nullptr;
    for (const SequenceState &s : snapshots)
        if (s.length == n) at = &s;
    if (n != length && !at) fail("no state kept at length {} of a sequence of {} tokens", n, length);
    SequenceCache out;
    out.length = n;
    for (size_t l = 0; l < k.size(); ++l) {
        const size_t row = length > 0 ? k[l].size() / size_t(length) : 0; // kv_dim
        out.k.push_back(k[l].first(size_t(n) * row));
        out.v.push_back(v[l].first(size_t(n) * row));
    }
    out.conv = at ? at->conv : conv;
    out.vdel = at ? at->vdel : vdel;
    out.snapshot_every = snapshot_every;
    for (const SequenceState &s : snapshots)
        if (s.length < n) out.snapshots.push_back(s);
    out.snapshots.push_back(SequenceState{n, out.conv, out.vdel});
    return out;
}

} // namespace zaya
