// zaya's version: `zaya --version`, and part of the server's system_fingerprint (infer/fingerprint.h).
#pragma once

namespace zaya {
inline constexpr const char *kVersion = "0.1.0";
} // namespace zaya
