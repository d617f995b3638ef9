#!/usr/bin/env bash
# The test suite: Release build + unit, parity and CLI tests; ASan+UBSan build of the unit tests; the CUDA kernels'
# tests emulated on the CPU under ASan+UBSan and under TSan, their launch shapes against the sm_90 cubins' registers
# and shared memory, and training with --device cuda on them; bounded fuzzing of the safetensors and OpenAI request
# parsers.
# Set ZAYA_FUZZ_SECONDS (default 60) to change the fuzz budget, 0 to skip it.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== release build and tests"
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$jobs"

echo "== ASan+UBSan build of the unit tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DZAYA_SANITIZE=ON -DZAYA_NATIVE=OFF -DZAYA_CUDA=OFF >/dev/null
cmake --build build-asan --target zaya_tests
# OpenMP's runtime keeps thread pools alive at exit; that is not a leak of ours.
ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1 build-asan/zaya_tests --gtest_brief=1

echo "== CUDA kernels emulated on the CPU (ASan+UBSan)"
launches=$(mktemp)
trap 'rm -f "$launches"' EXIT
ZAYA_EMU_LAUNCH_LOG=$launches ZAYA_EMU_SHARDS=$jobs bash scripts/cuda_emulate.sh address --gtest_brief=1
echo "== CUDA kernels emulated on the CPU under TSan (races between a block's threads: a missing __syncthreads)"
ZAYA_EMU_SHARDS=$jobs bash scripts/cuda_emulate.sh thread --gtest_brief=1
echo "== the emulated launches against the sm_90 cubins (registers, shared memory, launch bounds)"
if [ -d build/CMakeFiles/zaya_cuda.dir ]; then
    python3 tests/cuda_emu/check_launches.py build/CMakeFiles/zaya_cuda.dir "$launches"
else
    echo "skipped: no CUDA backend in build/ (nvcc not found)"
fi
echo "== training on the emulated CUDA backend against the CPU (zaya_emu)"
nice cmake --build build-emu-address --target zaya_emu -j"$jobs" >/dev/null
bash tests/cli/test_device_emu.sh build-emu-address/zaya_emu .

fuzz_seconds=${ZAYA_FUZZ_SECONDS:-60}
if [ "$fuzz_seconds" -gt 0 ]; then
    echo "== fuzzing the safetensors and OpenAI request parsers for ${fuzz_seconds}s"
    bash scripts/fuzz.sh "$fuzz_seconds"
fi
echo "== all tests passed"
