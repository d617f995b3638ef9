#include "data/split.h"

#include "core/error.h"
#include "core/rng.h"

namespace zaya {

uint32_t split_score(std::string_view key) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ull;
    return uint32_t(splitmix64(h) % 10000);
}

std::vector<bool> assign_val_split(const std::vector<std::string> &keys, double val_percent) {
    if (!(val_percent >= 0 && val_percent <= 50)) fail("val percent {} out of range [0, 50]", val_percent);
    const auto threshold = uint32_t(val_percent * 100 + 0.5);
    const size_t n = keys.size();
    std::vector<bool> val(n, false);
    if (n < 2 || threshold == 0) return val;
    std::vector<uint32_t> score(n);
    size_t n_val = 0;
    for (size_t i = 0; i < n; ++i) {
        score[i] = split_score(keys[i]);
        val[i] = score[i] < threshold;
        n_val += val[i];
    }
    if (n_val == 0) {
        size_t best = 0;
        for (size_t i = 1; i < n; ++i)
            if (score[i] < score[best]) best = i;
        val[best] = true;
    } else if (n_val == n) {
        size_t best = 0;
        for (size_t i = 1; i < n; ++i)
            if (score[i] > score[best]) best = i;
        val[best] = false;
    }
    return val;
}

} // namespace zaya
