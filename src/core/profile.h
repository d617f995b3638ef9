// Opt-in per-op wall-time profile: ZAYA_PROFILE=1 makes `zaya` print where forward time went at exit.
// A scope costs one branch when profiling is off.
#pragma once
#include <chrono>

namespace zaya {

bool profile_enabled();
void profile_add(const char *name, double seconds);

struct ProfileScope {
    const char *name;
    std::chrono::steady_clock::time_point start;
    bool on;
    explicit ProfileScope(const char *n) : name(n), on(profile_enabled()) {
        if (on) start = std::chrono::steady_clock::now();
    }
    ~ProfileScope() {
        if (on) profile_add(name, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
};

#define ZAYA_PROFILE_CONCAT2(a, b) a##b
#define ZAYA_PROFILE_CONCAT(a, b) ZAYA_PROFILE_CONCAT2(a, b)
#define ZAYA_PROFILE(name) ::zaya::ProfileScope ZAYA_PROFILE_CONCAT(zaya_profile_, __LINE__)(name)

} // namespace zaya
