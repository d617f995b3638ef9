#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and fuzzes safetensors_parse for a
# bounded time. Usage: scripts/fuzz.sh [SECONDS]   (default 60). Exits non-zero if the fuzzer finds a crash.
# The seed corpus is copied to a temp dir so new inputs never land in the repo; crash files are kept in
# build-fuzz/crashes/.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"

CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZAYA_FUZZ=ON -DZAYA_TESTS=OFF
cmake --build "$build" --target fuzz_safetensors

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$root"/fuzz/corpus/safetensors/* "$work"/
mkdir -p "$build/crashes"

# halt_on_error: a UBSan report is a failure, not a warning.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="detect_leaks=1"
set +e
"$build/fuzz_safetensors" "$work" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -dict="$root/fuzz/safetensors.dict" -print_final_stats=1 -artifact_prefix="$build/crashes/"
rc=$?
set -e
if [[ $rc -ne 0 ]]; then
    echo "fuzz.sh: fuzzer failed (exit $rc); reproducer in $build/crashes/" >&2
    exit "$rc"
fi
echo "fuzz.sh: no crash in ${seconds}s"
