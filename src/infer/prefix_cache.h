// Prefix reuse across requests (what vLLM calls automatic prefix caching and llama.cpp's server cache_prompt): the
// caches of finished sequences, kept by the tokens they hold, so that a new prompt that starts with the same tokens
// — a chat's next turn, a shared system prompt, few-shot examples — resumes from them instead of computing them
// again.
//
// A cache can be resumed at its full length or at one of its snapshots (SequenceCache::snapshot_every): ZAYA1's
// conv and value state belong to the last tokens, unlike a KV cache, which could be cut anywhere. So a prompt
// resumes at the longest such length within what it shares with an entry; the rest of its tokens are fed as usual.
// Host entries are copied out: one entry serves any number of later prompts. An entry whose cache lives in a GPU
// decoder's slot (SequenceCache::device_slot) cannot be copied or cut back: a prompt that continues it whole takes
// it over, slot and all; the engine drops such entries (drop_lru) when it needs their slots. Least recently used
// entries go first when the bytes held pass the budget.
#pragma once
#include "infer/kv_cache.h"

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace zaya {

class PrefixCache {
  public:
    explicit PrefixCache(size_t max_bytes);

    // Keeps a sequence's cache under the tokens it holds (tokens.size() must be cache.length), unless an entry
    // already holds it (begins with its tokens and can be cut back to them). Drops the entries it makes redundant
    // (the same the other way round), then the least recently used while over budget; a cache larger than the
    // whole budget is not kept.
    void insert(std::vector<int32_t> tokens, SequenceCache cache);

    // A copy of the entry sharing the longest resumable prefix with `prompt`, cut back to it (at most max_length
    // tokens), or nothing when no entry shares one of at least one token. A device entry is taken out whole.
    std::optional<SequenceCache> resume(std::span<const int32_t> prompt, int64_t max_length);
    // Drops the least recently used entry (a device entry frees its slot); false when there is none.
    bool drop_lru();

    size_t max_bytes() const { return max_bytes_; }
    size_t bytes() const { return bytes_; }
    size_t entries() const { return entries_.size(); }
    int64_t hits() const { return hits_; }                 // resume() calls that found a prefix
    int64_t tokens_reused() const { return tokens_reused_; } // the tokens those prefixes held

  private:
    struct Entry {
        std::vector<int32_t> tokens;
        SequenceCache cache;
        size_t bytes = 0;
        uint64_t used = 0; // the last insert or resume that touched it
    };
    void drop(size_t i);

    size_t max_bytes_, bytes_ = 0;
    std::vector<Entry> entries_;
    uint64_t clock_ = 0;
    int64_t hits_ = 0, tokens_reused_ = 0;
};

} // namespace zaya
