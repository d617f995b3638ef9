#!/usr/bin/env python3
"""Fails unless every kernel launched in one emulated run was launched in another too.

scripts/test.sh runs the emulated tests under TSan without the slowest model- and decoder-level tests (they compose
kernels the op tests launch; under TSan they took half of CI's time). TSan is there for races between a block's
threads, which live in the kernels: so what must hold is that the TSan run still launches every kernel (every
template instance) the full ASan run does. Both logs come from ZAYA_EMU_LAUNCH_LOG (tests/cuda_emu/emu.cpp).

Usage: kernels_covered.py FULL_LOG PART_LOG
"""
import sys

from check_launches import fail, launched_names, read_launches


def kernels(log):
    """The demangled names of the functions a launch log's launches started."""
    return {name for names in launched_names(read_launches(log)).values() for name in names}


def main():
    if len(sys.argv) != 3:
        fail(__doc__.strip().splitlines()[-1])
    full, part = (kernels(log) for log in sys.argv[1:])
    missing = sorted(full - part)
    for name in missing:
        print(f"kernels_covered: not launched in {sys.argv[2]}: {name}", file=sys.stderr)
    if missing:
        sys.exit(1)
    print(f"kernels_covered: all {len(full)} kernels of the full run were launched")


if __name__ == "__main__":
    main()
