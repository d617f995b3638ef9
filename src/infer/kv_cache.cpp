#include "infer/kv_cache.h"

#include "core/error.h"

#include <algorithm>

namespace zaya {

size_t SequenceCache::bytes() const {
    size_t total = (conv.size() + vdel.size()) * sizeof(float);
    for (size_t l = 0; l < k.size(); ++l) total += (k[l].size() + v[l].size()) * sizeof(float);
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

SequenceCache SequenceCache::prefix(int64_t n) const {
    if (device_slot) fail("a sequence cached on the GPU cannot be cut back on the host");
    if (n < 0 || n > length) fail("cannot cut a sequence of {} tokens back to {}", length, n);
    const SequenceState *at = nullptr;
    for (const SequenceState &s : snapshots)
        if (s.length == n) at = &s;
    if (n != length && !at) fail("no state kept at length {} of a sequence of {} tokens", n, length);
    SequenceCache out;
    out.length = n;
    out.k.resize(k.size());
    out.v.resize(v.size());
    for (size_t l = 0; l < k.size(); ++l) {
        const size_t row = length > 0 ? k[l].size() / size_t(length) : 0; // kv_dim
        out.k[l].assign(k[l].begin(), k[l].begin() + std::ptrdiff_t(size_t(n) * row));
        out.v[l].assign(v[l].begin(), v[l].begin() + std::ptrdiff_t(size_t(n) * row));
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
