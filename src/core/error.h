// zaya::Error — the one exception type thrown at boundaries (files, configs, arguments).
// Messages name the file / field / value at fault; the CLI prints them as one line and exits non-zero.
#pragma once
#include <fmt/format.h>
#include <stdexcept>
#include <string>
#include <utility>

namespace zaya {

struct Error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args &&...args) {
    throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// Internal invariant; a failure is a bug in zaya, not bad input.
#define ZAYA_ASSERT(cond)                                                                          \
    do {                                                                                           \
        if (!(cond)) ::zaya::fail("internal error: {} ({}:{})", #cond, __FILE__, __LINE__);       \
    } while (0)

} // namespace zaya
