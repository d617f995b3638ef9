#!/usr/bin/env bash
# Runs the CUDA kernels' tests on the CPU (tests/cuda_emu/README.md): every test of tests/cuda, with the kernels
# compiled as C++ and executed thread by thread, under AddressSanitizer+UBSan (default) or ThreadSanitizer.
#   scripts/cuda_emulate.sh [address|thread] [gtest args...]
#   e.g. scripts/cuda_emulate.sh thread --gtest_filter='CudaAttention.*'
#   ZAYA_EMU_SHARDS=2 scripts/cuda_emulate.sh   (the tests split over 2 processes running at once)
# Builds in build/ (configured with -DZAYA_CUDA_EMU=ON): zaya_cuda_emu_tests (ASan) or zaya_cuda_emu_tests_tsan.
# Small shapes only: the whole suite takes ~1.5 CPU-minutes under ASan, ~15 under TSan (this Zen 3, 2026-12).
set -euo pipefail
cd "$(dirname "$0")/.."
san=${1:-address}
[[ $# -gt 0 ]] && shift
case $san in
    address) target=zaya_cuda_emu_tests ;;
    thread) target=zaya_cuda_emu_tests_tsan ;;
    *) echo "cuda_emulate.sh: the sanitizer is 'address' or 'thread', got '$san'" >&2; exit 2 ;;
esac
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DZAYA_CUDA_EMU=ON >/dev/null
nice -n 15 cmake --build build --target "$target" -j"${JOBS:-$(nproc)}"
# One OpenMP thread: the CPU reference ops run alongside, and libgomp's own threads are invisible to TSan.
shards=${ZAYA_EMU_SHARDS:-1}
if [[ $shards -le 1 ]]; then
    OMP_NUM_THREADS=1 build/$target "$@"
    exit
fi
# ZAYA_EMU_SHARDS=N: N processes, each running every N-th test (gtest sharding) — the emulator keeps about one core
# busy, so on N cores this divides the wall time. Each shard's output is printed when all are done.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for ((i = 0; i < shards; ++i)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i OMP_NUM_THREADS=1 build/$target "$@" >"$logs/$i" 2>&1 &
    pids+=($!)
done
rc=0
for ((i = 0; i < shards; ++i)); do
    wait "${pids[$i]}" || rc=1
    echo "-- shard $((i + 1))/$shards"
    cat "$logs/$i"
done
exit $rc
