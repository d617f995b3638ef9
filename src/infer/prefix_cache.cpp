#include "infer/prefix_cache.h"

#include "core/error.h"

#include <algorithm>

namespace zaya {

PrefixCache::PrefixCache(size_t max_bytes) : max_bytes_(max_bytes) {}

void PrefixCache::drop(size_t i) {
    bytes_ -= entries_[i].bytes;
    entries_.erase(entries_.begin() + std::ptrdiff_t(i));
}

void PrefixCache::insert(std::vector<int32_t> tokens, SequenceCache cache) {
    if (int64_t(tokens.size()) != cache.length)
        fail("prefix cache: {} tokens given for a sequence of {}", tokens.size(), cache.length);
    for (Entry &e : entries_) // already held: the entry is only marked used
        if (e.tokens.size() >= tokens.size() && std::equal(tokens.begin(), tokens.end(), e.tokens.begin()) &&
            e.cache.can_cut_to(cache.length)) {
            e.used = ++clock_;
            return;
        }
    for (size_t i = entries_.size(); i-- > 0;) {
        const std::vector<int32_t> &old = entries_[i].tokens;
        if (old.size() <= tokens.size() && std::equal(old.begin(), old.end(), tokens.begin()) &&
            cache.can_cut_to(int64_t(old.size())))
            drop(i);
    }
    for (auto &kv : cache.k) kv.shrink_to_fit(); // grown by doubling while decoding
    for (auto &vv : cache.v) vv.shrink_to_fit();
    Entry e{std::move(tokens), std::move(cache), 0, ++clock_};
    e.bytes = e.cache.bytes() + e.tokens.size() * sizeof(int32_t);
    if (e.bytes > max_bytes_) return;
    while (bytes_ + e.bytes > max_bytes_) drop_lru();
    bytes_ += e.bytes;
    entries_.push_back(std::move(e));
}

bool PrefixCache::drop_lru() {
    if (entries_.empty()) return false;
    size_t lru = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
        if (entries_[i].used < entries_[lru].used) lru = i;
    drop(lru);
    return true;
}

std::optional<SequenceCache> PrefixCache::resume(std::span<const int32_t> prompt, int64_t max_length) {
    Entry *best = nullptr;
    int64_t best_n = 0;
    for (Entry &e : entries_) {
        const int64_t shared = std::min<int64_t>(
            int64_t(std::mismatch(e.tokens.begin(), e.tokens.end(), prompt.begin(), prompt.end()).first -
                    e.tokens.begin()),
            max_length);
        int64_t n = shared == e.cache.length ? shared : 0; // the whole entry, or its longest snapshot within
        for (const SequenceState &s : e.cache.snapshots)
            if (s.length <= shared) n = std::max(n, s.length);
        if (n > best_n || (n == best_n && n > 0 && e.used > best->used)) {
            best = &e;
            best_n = n;
        }
    }
    if (!best) return std::nullopt;
    ++hits_;
    tokens_reused_ += best_n;
    if (best->cache.device_slot) { // a device slot cannot be copied: the entry is handed over whole
        SequenceCache taken = std::move(best->cache);
        drop(size_t(best - entries_.data()));
        return taken;
    }
    best->used = ++clock_;
    return best->cache.prefix(best_n);
}

} // namespace zaya
