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

namespace {

// The largest j < end with p[j] == v, or −1: blocks of 64 tested whole first (a loop without an early exit, which the
// compiler vectorises), a block that holds v searched from its end.
int64_t find_last(const int32_t *p, int64_t end, int32_t v) {
    constexpr int64_t kBlock = 64;
    int64_t j = end;
    for (; j >= kBlock; j -= kBlock) {
        const int32_t *b = p + j - kBlock;
        bool any = false;
        for (int64_t k = 0; k < kBlock; ++k) any |= b[k] == v;
        if (any) break;
    }
    for (int64_t k = j - 1; k >= 0; --k)
        if (p[k] == v) return k;
    return -1;
}

// For each n in [lo, hi], the latest occurrence of the context's last n tokens (tail[hi − n .. hi), tail[hi − 1] the
// last) in a text read by text_at, ending at a position j ≤ last_j (a token follows it): latest[n − lo] = its start,
// or −1. One pass from the end over where the last token occurs (`find` gives the latest such j below a bound), each
// one matched backwards; it stops once the longest is found, since every shorter n found later is earlier.
template <class At, class Find>
std::vector<int64_t> latest_matches(const At &text_at, const Find &find, int64_t last_j, const int32_t *tail,
                                    int64_t lo, int64_t hi) {
    std::vector<int64_t> latest(size_t(hi - lo + 1), -1);
    for (int64_t j = find(last_j + 1); j >= 0; j = find(j)) {
        int64_t k = 1; // tokens matched, ending at j
        while (k < hi && j - k >= 0 && text_at(j - k) == tail[hi - 1 - k]) ++k;
        for (int64_t n = lo; n <= k; ++n)
            if (latest[size_t(n - lo)] < 0) latest[size_t(n - lo)] = j - n + 1;
        if (k == hi) break;
    }
    return latest;
}

} // namespace

std::vector<int32_t> lookup_draft(std::span<const int32_t> first, std::span<const int32_t> second,
                                  const LookupOptions &o, int64_t limit,
                                  std::span<const std::vector<int32_t>> history) {
    const int64_t F = int64_t(first.size()), L = F + int64_t(second.size());
    const auto at = [&](int64_t i) { return i < F ? first[size_t(i)] : second[size_t(i - F)]; };
    limit = std::min(limit, o.tokens);
    const int64_t hi = std::min(o.max_ngram, L - 1), lo = o.min_ngram;
    if (limit <= 0 || hi < lo) return {};
    std::vector<int32_t> tail(static_cast<size_t>(hi)); // the context's last hi tokens
    for (int64_t k = 0; k < hi; ++k) tail[size_t(k)] = at(L - hi + k);
    const int32_t last = tail.back();
    // The context's own: the last token's occurrences before its last position, in the answer, then in the prompt.
    const auto find_in_context = [&](int64_t end) {
        if (end > F) {
            const int64_t j = find_last(second.data(), end - F, last);
            if (j >= 0) return F + j;
            end = F;
        }
        return find_last(first.data(), end, last);
    };
    const std::vector<int64_t> own = latest_matches(at, find_in_context, L - 2, tail.data(), lo, hi);
    std::vector<std::vector<int64_t>> past(history.size()); // each finished text's, found when first needed
    for (int64_t n = hi; n >= lo; --n) {
        if (const int64_t i = own[size_t(n - lo)]; i >= 0) {
            // Past the context's end the copy reads itself: a pattern repeats whole (a loop of p tokens drafts
            // `limit` of them, not p).
            std::vector<int32_t> draft;
            for (int64_t j = i + n; int64_t(draft.size()) < limit; ++j)
                draft.push_back(j < L ? at(j) : draft[size_t(j - L)]);
            return draft;
        }
        for (size_t h = history.size(); h-- > 0;) { // the latest text first
            const std::vector<int32_t> &text = history[h];
            const int64_t T = int64_t(text.size());
            if (past[h].empty())
                past[h] = latest_matches([&](int64_t p) { return text[size_t(p)]; },
                                         [&](int64_t end) { return find_last(text.data(), end, last); }, T - 2,
                                         tail.data(), lo, hi);
            if (const int64_t i = past[h][size_t(n - lo)]; i >= 0)
                return std::vector<int32_t>(text.begin() + i + n, text.begin() + std::min(T, i + n + limit));
        }
    }
    return {};
}

} // namespace zaya
