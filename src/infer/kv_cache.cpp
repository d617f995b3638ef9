#include "infer/kv_cache.h"

namespace zaya {

size_t SequenceCache::bytes() const {
    size_t total = (conv.size() + vdel.size()) * sizeof(float);
    for (size_t l = 0; l < k.size(); ++l) total += (k[l].size() + v[l].size()) * sizeof(float);
    return total;
}

size_t SequenceCache::bytes_per_token(const ZayaConfig &c, DType element) {
    return 2 * size_t(c.num_hidden_layers * c.kv_dim()) * dtype_size(element);
}

} // namespace zaya
