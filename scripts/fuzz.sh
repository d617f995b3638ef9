#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) in build-fuzz/ and fuzzes, for a bounded time split between
# them: safetensors_parse (three eighths), the OpenAI request parser, JSON mode's grammar, structured outputs'
# schemas and grammar, tokenizer.json encoding and the Jinja chat-template interpreter (an eighth each).
# Usage: scripts/fuzz.sh [SECONDS]   (default 60). Exits non-zero if the fuzzer finds a crash.
# The seed corpus is copied to a temp dir so new inputs never land in the repo; crash files are kept in
# build-fuzz/crashes/.
set -euo pipefail

seconds="${1:-60}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build-fuzz"

CC="${CC:-clang}" CXX="${CXX:-clang++}" cmake -S "$root" -B "$build" -G Ninja \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZAYA_FUZZ=ON -DZAYA_TESTS=OFF -DZAYA_CUDA=OFF
cmake --build "$build" --target fuzz_safetensors fuzz_openai_request fuzz_json_grammar fuzz_json_schema \
    fuzz_hf_tokenizer fuzz_jinja

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/crashes"

# halt_on_error: a UBSan report is a failure, not a warning.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="detect_leaks=1"
# fuzz TARGET CORPUS SECONDS [FLAGS...]
fuzz() {
    local target=$1 corpus=$2 secs=$3
    shift 3
    mkdir -p "$work/$corpus"
    cp "$root/fuzz/corpus/$corpus"/* "$work/$corpus"/
    set +e
    "$build/$target" "$work/$corpus" -max_total_time="$secs" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
        -artifact_prefix="$build/crashes/" "$@"
    local rc=$?
    set -e
    if [[ $rc -ne 0 ]]; then
        echo "fuzz.sh: $target failed (exit $rc); reproducer in $build/crashes/" >&2
        exit "$rc"
    fi
}
eighth=$((seconds / 8 > 0 ? seconds / 8 : 1))
fuzz fuzz_safetensors safetensors $((seconds * 3 / 8 > 0 ? seconds * 3 / 8 : 1)) -dict="$root/fuzz/safetensors.dict"
fuzz fuzz_openai_request openai "$eighth"
fuzz fuzz_json_grammar json "$eighth" -dict="$root/fuzz/json.dict"
fuzz fuzz_json_schema schema "$eighth" -dict="$root/fuzz/schema.dict"
fuzz fuzz_hf_tokenizer tokenizer "$eighth"
fuzz fuzz_jinja jinja "$eighth" -dict="$root/fuzz/jinja.dict"
echo "fuzz.sh: no crash in ${seconds}s"
