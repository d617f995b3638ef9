#!/usr/bin/env bash
# The test suite: Release build + unit, parity and CLI tests; ASan+UBSan build of the unit tests; the CUDA kernels'
# tests emulated on the CPU under ASan+UBSan (the op tests again with the blocks run last first) and under TSan, their
# launch shapes against the sm_90 cubins' registers
# and shared memory, and training with --device cuda on them; bounded fuzzing of the safetensors and OpenAI request
# parsers, of JSON mode's grammar, of structured outputs' schemas and grammar, of tokenizer.json encoding and of the
# Jinja chat-template interpreter.
# Set ZAYA_FUZZ_SECONDS (default 60) to change the fuzz budget, 0 to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
# stage TITLE: the stage's heading, with the minutes and seconds since the suite began (CI's budget is per run).
stage() { printf '== %s [%d:%02d]\n' "$1" $((SECONDS / 60)) $((SECONDS % 60)); }

stage "release build and tests"
# One tree for everything built without -O0: zaya, its tests, the CUDA backend (when nvcc is here), and the kernels
# emulated on the CPU (their tests under ASan and under TSan, and zaya_emu), which share zaya's objects.
bash scripts/build.sh -DZAYA_CUDA_EMU=ON
ctest --test-dir build --output-on-failure -j "$jobs"

stage "ASan+UBSan build of the unit tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DZAYA_SANITIZE=ON -DZAYA_NATIVE=OFF -DZAYA_CUDA=OFF >/dev/null
cmake --build build-asan --target zaya_tests
# In $jobs shards at once (gtest's sharding): at -O0 the schema-grammar tests that take most of the time run on one
# thread (3.1 min in one process, 2.0 min in two, on 2 cores). OpenMP's runtime keeps thread pools alive at exit;
# that is not a leak of ours.
asan_logs=$(mktemp -d)
for ((shard = 0; shard < jobs; shard++)); do
    GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$shard ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 \
        build-asan/zaya_tests --gtest_brief=1 >"$asan_logs/$shard" 2>&1 &
done
asan_failed=0
for ((shard = 0; shard < jobs; shard++)); do
    wait -n || asan_failed=1
done
for ((shard = 0; shard < jobs; shard++)); do
    echo "-- shard $shard of $jobs"
    cat "$asan_logs/$shard"
done
rm -rf "$asan_logs"
[[ $asan_failed -eq 0 ]] || { echo "test.sh: the ASan+UBSan unit tests failed (above)" >&2; exit 1; }

stage "CUDA kernels emulated on the CPU (ASan+UBSan)"
launches=$(mktemp)
launches_tsan=$(mktemp)
trap 'rm -f "$launches" "$launches_tsan"' EXIT
ZAYA_EMU_LAUNCH_LOG=$launches ZAYA_EMU_JOBS=$jobs bash scripts/cuda_emulate.sh address --gtest_brief=1
# The op tests, not the model and decoder tests that compose the same kernels (they took ~8 of TSan's ~15
# CPU-minutes): races live in the kernels. Under TSan the decode graph's test too: its launches overlap (programmatic
# dependent launch), and a kernel there that reads the kernel before's output before its wait is a race (~2 CPU-min).
tsan_tests='-CudaOps.DecoderSlots*:CudaOps.DecoderPrefillsSeveralSlots*:CudaOps.DecoderEveryOption*'
tsan_tests+=':CudaOps.DecoderGemm*:CudaOps.DecoderBf16Cache*:CudaOps.Model*:CudaOps.Training*'
op_tests="$tsan_tests:CudaOps.DecoderGraph*"
stage "the op tests emulated with each grid's blocks run last first (a block reading another's unsynchronised writes)"
# The emulator runs a grid's blocks one after another, a GPU in any order: in index order a block that reads a
# lower block's output without waiting for it sees it written; run last first, it reads the poison (~40 s).
ZAYA_EMU_BLOCK_ORDER=reverse ZAYA_EMU_JOBS=$jobs bash scripts/cuda_emulate.sh address --gtest_brief=1 \
    --gtest_filter="$op_tests"
stage "CUDA kernels emulated on the CPU under TSan (races within and between blocks, and between overlapping kernels)"
# kernels_covered.py then fails if the op tests left any kernel the ASan run launched unlaunched.
ZAYA_EMU_LAUNCH_LOG=$launches_tsan ZAYA_EMU_JOBS=$jobs bash scripts/cuda_emulate.sh thread --gtest_brief=1 \
    --gtest_filter="$tsan_tests"
python3 tests/cuda_emu/kernels_covered.py "$launches" "$launches_tsan"
# and the races the emulator is there to catch are still reported (a lost update, a read of another block's write, a
# dependent launch's read before its wait).
bash tests/cuda_emu/expect_races.sh build/zaya_cuda_emu_tests_tsan
stage "the emulated launches against the sm_90 cubins (registers, shared memory, launch bounds)"
if [ -d build/CMakeFiles/zaya_cuda.dir ]; then
    python3 tests/cuda_emu/check_launches.py build/CMakeFiles/zaya_cuda.dir "$launches"
else
    echo "skipped: no CUDA backend in build/ (nvcc not found)"
fi
stage "training on the emulated CUDA backend against the CPU (zaya_emu)"
bash tests/cli/test_device_emu.sh build/zaya_emu .

fuzz_seconds=${ZAYA_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" -gt 0 ]; then
    stage "fuzzing safetensors, OpenAI requests, JSON mode, JSON schemas, tokenizer.json and Jinja: ${fuzz_seconds}s"
    bash scripts/fuzz.sh "$fuzz_seconds"
fi
stage "all tests passed"
