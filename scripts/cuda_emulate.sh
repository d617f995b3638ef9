#!/usr/bin/env bash
# Runs the CUDA kernels' tests on the CPU (tests/cuda_emu/README.md): every test of tests/cuda, with the kernels
# compiled as C++ and executed thread by thread, under AddressSanitizer+UBSan (default) or ThreadSanitizer.
#   scripts/cuda_emulate.sh [address|thread] [gtest args...]
#   e.g. scripts/cuda_emulate.sh thread --gtest_filter='CudaAttention.*'
#   ZAYA_EMU_JOBS=2 scripts/cuda_emulate.sh   (2 test processes at once, taking the tests from one queue)
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
jobs=${ZAYA_EMU_JOBS:-1}
if [[ $jobs -le 1 ]]; then
    OMP_NUM_THREADS=1 build/$target "$@"
    exit
fi
# ZAYA_EMU_JOBS=N: N processes at once, taking work from one queue: each slow test below in a process of its own,
# first, then each suite's other tests four at a time, the largest suites first (as one item, CudaOps' 27 tests took
# 196 s under TSan and ended long after the rest). The emulator keeps about one core busy, so on N cores this divides
# the wall time; gtest's own sharding (every N-th test) left one process running a slow test long after the others
# had finished. Each item's output is printed, in queue order, when all are done.
# The slowest under TSan, longest first (~145, 70, 61, 37, 28, 24 and 11 s on a 2-core Zen 3, 2026-12, with two
# processes at once): a test that grows slow belongs here.
slow=(CudaOps.DecoderPrefillRowsMatchCpu CudaOps.DecoderGraphStepsEqualEager CudaMoe.ExpertsBf16TensorCores
      CudaAttention.TensorCoresEveryOtherHeadDim CudaOps.DecoderMatchesCpuBf16 CudaOps.DecoderMatchesCpuF32
      Shapes/CudaFused.ResidualRmsNormForwardBackward/6)
list=$(OMP_NUM_THREADS=1 build/$target "$@" --gtest_list_tests) || { echo "$list"; exit 1; }
declare -A listed=() in_suite=() count=()
suites=()
suite=
while IFS= read -r line; do
    if [[ $line == "  "* ]]; then
        name=${line#  }
        test=$suite${name%%  #*} # without a parameterised test's "# GetParam() = ..."
        listed[$test]=1
        [[ " ${slow[*]} " == *" $test "* ]] && continue
        in_suite[$suite]+=${in_suite[$suite]:+:}$test
        count[$suite]=$((${count[$suite]:-0} + 1))
    elif [[ -n $line ]]; then
        suite=${line%%  #*}
        suites+=("$suite")
    fi
done <<<"$list"
items=()
for test in "${slow[@]}"; do
    if [[ -n ${listed[$test]:-} ]]; then items+=("$test"); fi
done
while read -r _ suite; do
    IFS=: read -ra tests <<<"${in_suite[$suite]}"
    for ((k = 0; k < ${#tests[@]}; k += 4)); do
        chunk=("${tests[@]:k:4}")
        items+=("$(IFS=:; echo "${chunk[*]}")")
    done
done < <(for suite in "${suites[@]}"; do
    if [[ -n ${count[$suite]:-} ]]; then echo "${count[$suite]} $suite"; fi
done | sort -s -k1,1nr)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
run_item() {
    local i=$1 t0=$SECONDS code=0
    shift
    OMP_NUM_THREADS=1 build/$target "$@" --gtest_filter="${items[$i]}" >"$logs/$i" 2>&1 || code=$?
    echo "$code $((SECONDS - t0))" >"$logs/$i.rc"
}
running=0
for i in "${!items[@]}"; do
    if ((running >= jobs)); then
        wait -n || true
        running=$((running - 1))
    fi
    run_item "$i" "$@" &
    running=$((running + 1))
done
wait
rc=0
for i in "${!items[@]}"; do
    read -r code seconds <"$logs/$i.rc"
    filter=${items[$i]}
    [[ ${#filter} -gt 80 ]] && filter="${filter:0:77}..."
    echo "-- $filter (${seconds} s)"
    cat "$logs/$i"
    [[ $code -eq 0 ]] || { rc=1; echo "cuda_emulate: failed: ${items[$i]}"; }
done
exit $rc
