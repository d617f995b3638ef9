#!/usr/bin/env bash
# The races the emulator exists to catch are reported: each EmulatorRaces test of test_emu.cpp (disabled in the
# ordinary runs) must make TSan report a data race and the test binary fail. Without this check, a change to the
# emulator that hid races from TSan (an ordering too many) would leave every TSan run green.
#   tests/cuda_emu/expect_races.sh build/zaya_cuda_emu_tests_tsan
set -euo pipefail
bin=${1:?usage: expect_races.sh ZAYA_CUDA_EMU_TESTS_TSAN}
names=$("$bin" --gtest_also_run_disabled_tests --gtest_filter='EmulatorRaces.*' --gtest_list_tests | sed -n 's/^  //p')
if [[ -z $names ]]; then
    echo "expect_races.sh: no EmulatorRaces tests in $bin" >&2
    exit 1
fi
fail=0
for name in $names; do
    code=0
    out=$(OMP_NUM_THREADS=1 "$bin" --gtest_also_run_disabled_tests --gtest_filter="EmulatorRaces.$name" 2>&1) || code=$?
    # Reported, and only in the test's own kernels (a race TSan saw in the emulator's bookkeeping would be a false one).
    races=$(grep "SUMMARY: ThreadSanitizer: data race" <<<"$out" || true)
    if [[ $code -ne 0 && -n $races ]] && ! grep -qv "test_emu.cpp:" <<<"$races"; then
        echo "reported, as it must be: EmulatorRaces.$name"
    else
        echo "expect_races.sh: EmulatorRaces.$name (exit $code): TSan reported no race in its kernel, or others:" >&2
        echo "${races:-(none)}" >&2
        fail=1
    fi
done
exit $fail
