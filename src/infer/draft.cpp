#include "infer/draft.h"

#include "core/error.h"

#include <algorithm>

namespace zaya {

void LookupOptions::validate() const {
    if (tokens < 0) fail("speculative tokens must be ≥ 0 (0: off), got {}", tokens);
    if (min_ngram < 1) fail("prompt lookup's shortest n-gram must be ≥ 1, got {}", min_ngram);
    if (max_ngram < min_ngram)
        fail("prompt lookup's longest n-gram ({}) is shorter than its shortest ({})", max_ngram, min_ngram);
    if (history < 0) fail("prompt lookup's history must be ≥ 0 finished requests, got {}", history);
}

std::vector<int32_t> lookup_draft(std::span<const int32_t> first, std::span<const int32_t> second,
                                  const LookupOptions &o, int64_t limit,
                                  std::span<const std::vector<int32_t>> history) {
    const int64_t F = int64_t(first.size()), L = F + int64_t(second.size());
    const auto at = [&](int64_t i) { return i < F ? first[size_t(i)] : second[size_t(i - F)]; };
    limit = std::min(limit, o.tokens);
    if (limit <= 0) return {};
    // The latest start i < T − n in a text of T tokens whose n tokens are the context's last n (so a token follows
    // them, at i + n < T); −1 where none.
    const auto latest = [&](const auto &text_at, int64_t T, int64_t n) {
        for (int64_t i = T - n - 1; i >= 0; --i) {
            int64_t k = 0;
            while (k < n && text_at(i + k) == at(L - n + k)) ++k;
            if (k == n) return i;
        }
        return int64_t(-1);
    };
    for (int64_t n = std::min(o.max_ngram, L - 1); n >= o.min_ngram; --n) {
        if (const int64_t i = latest(at, L, n); i >= 0) {
            // Past the context's end the copy reads itself: a pattern repeats whole (a loop of p tokens drafts
            // `limit` of them, not p).
            std::vector<int32_t> draft;
            for (int64_t j = i + n; int64_t(draft.size()) < limit; ++j)
                draft.push_back(j < L ? at(j) : draft[size_t(j - L)]);
            return draft;
        }
        for (auto text = history.rbegin(); text != history.rend(); ++text) {
            const int64_t T = int64_t(text->size());
            const int64_t i = latest([&](int64_t p) { return (*text)[size_t(p)]; }, T, n);
            if (i >= 0) return std::vector<int32_t>(text->begin() + i + n, text->begin() + std::min(T, i + n + limit));
        }
    }
    return {};
}

} // namespace zaya
