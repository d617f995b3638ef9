#include "core/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace zaya {

namespace {
struct Table {
    std::mutex mu;
    std::map<std::string, std::pair<double, long>> entries;
    ~Table() {
        if (entries.empty()) return;
        std::vector<std::pair<std::string, std::pair<double, long>>> rows(entries.begin(), entries.end());
        std::sort(rows.begin(), rows.end(), [](auto &a, auto &b) { return a.second.first > b.second.first; });
        double total = 0;
        for (auto &r : rows) total += r.second.first;
        std::fprintf(stderr, "profile (ZAYA_PROFILE=1): %.3f s in profiled scopes\n", total);
        for (auto &r : rows)
            std::fprintf(stderr, "  %-22s %9.3f s %6.1f%% %8ld calls\n", r.first.c_str(), r.second.first,
                         100.0 * r.second.first / total, r.second.second);
    }
};
Table &table() {
    static Table t;
    return t;
}
} // namespace

bool profile_enabled() {
    static const bool on = [] {
        const char *e = std::getenv("ZAYA_PROFILE");
        return e && *e && *e != '0';
    }();
    return on;
}

void profile_add(const char *name, double seconds) {
    Table &t = table();
    std::lock_guard<std::mutex> lock(t.mu);
    auto &e = t.entries[name];
    e.first += seconds;
    e.second += 1;
}

} // namespace zaya
