#!/usr/bin/env bash
# Runs the CUDA kernels' tests on the CPU (tests/cuda_emu/README.md): every test of tests/cuda, with the kernels
# compiled as C++ and executed thread by thread, under AddressSanitizer+UBSan (default) or ThreadSanitizer.
#   scripts/cuda_emulate.sh [address|thread] [gtest args...]
#   e.g. scripts/cuda_emulate.sh thread --gtest_filter='CudaAttention.*'
# Builds into build-emu-<sanitizer>/ (the CUDA backend itself is not built there). Slow: small shapes only.
set -euo pipefail
cd "$(dirname "$0")/.."
san=${1:-address}
[[ $# -gt 0 ]] && shift
dir=build-emu-$san
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DZAYA_CUDA=OFF -DZAYA_CUDA_EMU=ON \
    -DZAYA_CUDA_EMU_SANITIZER="$san" >/dev/null
nice -n 15 cmake --build "$dir" --target zaya_cuda_emu_tests -j"${JOBS:-2}"
# One OpenMP thread: the CPU reference ops run alongside, and libgomp's own threads are invisible to TSan.
OMP_NUM_THREADS=1 "$dir"/zaya_cuda_emu_tests "$@"
