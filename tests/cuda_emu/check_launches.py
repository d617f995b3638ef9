#!/usr/bin/env python3
"""Holds every kernel launch the emulated tests made against what the sm_90 cubins say the kernel needs.

A launch the emulator runs happily can still fail on the GPU: a block whose threads need more registers than an SM
has ("too many resources requested for launch"), more threads than the kernel's __launch_bounds__, or more shared
memory than the default 48 KiB without opting in. Those limits depend on what ptxas made of the kernel, which only the
real compilation knows. So:
  - the launch shapes come from the emulated tests (ZAYA_EMU_LAUNCH_LOG, tests/cuda_emu/emu.cpp): kernel, threads per
    block, dynamic shared memory and the opted-in maximum;
  - the kernels' registers, static shared memory, local memory and launch bounds come from the sm_90 cubins that
    nvcc embeds in the CUDA backend's object files (ELF .nv.info attributes), matched by demangled name.
Prints a table: per kernel and block size, the registers and local memory (spills, stack) a thread needs, the static
shared memory (as the cubin counts it, with the 1 KiB sm_90 reserves per block where it adds it), the largest dynamic
shared memory launched with, and the blocks per SM that allows (the occupancy). Exits 1 on a launch the GPU would
refuse, on a launch it cannot match to a cubin kernel, or when either side is empty.

Usage: check_launches.py OBJECT_DIR LAUNCH_LOG   e.g. build/CMakeFiles/zaya_cuda.dir /tmp/launches.tsv
"""
import collections
import os
import struct
import subprocess
import sys

# sm_90 (H100/H200) per-block and per-SM limits (CUDA C Programming Guide, compute capability 9.0).
REGS_PER_SM = 65536          # also the most one block may use
REG_UNIT = 256               # registers are allocated per warp in units of 256
THREADS_PER_BLOCK = 1024
WARPS_PER_SM = 64
BLOCKS_PER_SM = 32
SMEM_DEFAULT = 48 * 1024     # static + dynamic without cudaFuncAttributeMaxDynamicSharedMemorySize
SMEM_OPT_IN = 227 * 1024     # the most one block may opt in to
SMEM_PER_SM = 228 * 1024
SMEM_RESERVED = 1024         # per block, by the system

EM_CUDA = 190
EIATTR_MAX_THREADS, EIATTR_FRAME_SIZE, EIATTR_REGCOUNT = 0x05, 0x11, 0x2F
EIFMT_SVAL = 4


def fail(msg):
    sys.exit(f"check_launches: {msg}")


def cubins(data):
    """The CUDA ELF images (sm_XX cubins) inside a host object file's fat binary, which nvcc stores uncompressed."""
    at = data.find(b"\x7fELF", 1)
    while at >= 0:
        if data[at + 4] == 2 and struct.unpack_from("<H", data, at + 18)[0] == EM_CUDA:
            yield data[at:]
        at = data.find(b"\x7fELF", at + 1)


def cstr(buf, at):
    return buf[at:buf.index(b"\0", at)].decode()


def kernels_of(elf, origin):
    """{mangled name: dict(regs, smem, local, max_threads, origin)} for the entry functions of one cubin."""
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    heads = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    names = [cstr(elf, heads[shstrndx][4] + h[0]) for h in heads]
    sec = dict(zip(names, heads))
    symtab = sec[".symtab"]
    strtab_off = heads[symtab[6]][4]
    syms = [cstr(elf, strtab_off + struct.unpack_from("<I", elf, symtab[4] + 24 * k)[0])
            for k in range(symtab[5] // 24)]

    def records(head):
        at, end = head[4], head[4] + head[5]
        while at < end:
            fmt, attr, value = struct.unpack_from("<BBH", elf, at)
            at += 4
            if fmt == EIFMT_SVAL:
                yield attr, elf[at:at + value]
                at += value
            else:
                yield attr, value

    per_symbol = collections.defaultdict(dict)
    for attr, value in records(sec[".nv.info"]):
        if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE):
            sym, n = struct.unpack("<II", value)
            per_symbol[syms[sym]]["regs" if attr == EIATTR_REGCOUNT else "local"] = n
    out = {}
    for name, head in sec.items():
        if not name.startswith(".nv.info."):
            continue
        fn = name[len(".nv.info."):]
        k = {"regs": per_symbol[fn].get("regs"), "local": per_symbol[fn].get("local", 0), "max_threads": None,
             "smem": sec[".nv.shared." + fn][5] if ".nv.shared." + fn in sec else 0, "origin": origin}
        for attr, value in records(head):
            if attr == EIATTR_MAX_THREADS:
                x, y, z = struct.unpack("<III", value)
                k["max_threads"] = x * y * z
        if k["regs"] is None:
            fail(f"{origin}: no register count for {fn}")
        out[fn] = k
    return out


def demangle(names):
    names = list(names)
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    return dict(zip(names, out.stdout.splitlines()))


def symbols_at(exe):
    """{offset: [mangled names]} of the functions defined in an executable (local ones too)."""
    out = subprocess.run(["nm", "--defined-only", exe], capture_output=True, text=True, check=True)
    at = collections.defaultdict(list)
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "tTwW":
            at[int(parts[0], 16)].append(parts[2])
    return at


def blocks_per_sm(threads, regs, smem):
    warps = -(-threads // 32)
    regs_per_warp = -(-regs * 32 // REG_UNIT) * REG_UNIT
    limits = [BLOCKS_PER_SM, WARPS_PER_SM // warps]
    if regs:
        limits.append(REGS_PER_SM // (warps * regs_per_warp))
    if smem:
        limits.append(SMEM_PER_SM // (smem + SMEM_RESERVED))
    return min(limits), warps * regs_per_warp


def read_launches(log):
    """{(executable, offset, threads per block, dynamic shared memory, opted-in maximum)}: a launch log's shapes."""
    try:
        lines = open(log).read().splitlines()
    except OSError as e:
        fail(f"cannot read the launch log {log}: {e.strerror} (run the emulated tests with ZAYA_EMU_LAUNCH_LOG={log})")
    launches = set()
    for line in lines:
        exe, offset, threads, dyn, opted = line.split("\t")
        launches.add((exe, int(offset, 16), int(threads), int(dyn), int(opted)))
    if not launches:
        fail(f"{log} lists no launch")
    return launches


def launched_names(launches):
    """{(executable, offset): the demangled names of the functions there} for every launch; one c++filt for all."""
    symbols = {exe: symbols_at(exe) for exe in {l[0] for l in launches}}
    plain = demangle({m for exe, offset, *_ in launches for m in symbols[exe].get(offset, [])})
    return {(exe, offset): [plain[m] for m in symbols[exe].get(offset, [])] for exe, offset, *_ in launches}


def main():
    if len(sys.argv) != 3:
        fail(__doc__.strip().splitlines()[-1])
    obj_dir, log = sys.argv[1:]
    kernels = {}
    for root, _, files in os.walk(obj_dir):
        for f in sorted(files):
            if f.endswith(".o"):
                path = os.path.join(root, f)
                for elf in cubins(open(path, "rb").read()):
                    kernels.update(kernels_of(elf, os.path.basename(f)[:-2]))
    if not kernels:
        fail(f"no sm_90 kernels in the object files under {obj_dir} (built with nvcc?)")
    by_name = collections.defaultdict(list)
    for mangled, name in demangle(kernels).items():
        by_name[name].append(kernels[mangled])

    launches = read_launches(log)
    launched = launched_names(launches)
    resolved = collections.defaultdict(set)  # demangled name -> {(threads, dynamic, opted in)}
    unmatched = set()
    others = set()  # the emulator's own test kernels (test_emu.cpp), not zaya's
    for exe, offset, threads, dyn, opted in launches:
        found = launched[exe, offset]
        names = [n for n in found if n in by_name]
        if found and not names and not any("zaya::" in n for n in found):
            others.update(found)
        elif not names:
            unmatched.add(f"{exe}+{offset:#x}: {', '.join(found) or 'no symbol'}")
        for n in names:
            resolved[n].add((threads, dyn, opted))

    errors = list(f"launch of a kernel no cubin has: {u}" for u in sorted(unmatched))
    print(f"{'kernel (sm_90)':60s} {'regs':>4s} {'local':>5s} {'smem':>6s} {'threads':>7s} {'dyn smem':>8s} "
          f"{'blocks/SM':>9s}")
    for name in sorted(resolved):
        # A name compiled in several files (a kernel in each one's anonymous namespace): the most demanding one.
        ks = by_name[name]
        regs = max(k["regs"] for k in ks)
        smem = max(k["smem"] for k in ks)
        local = max(k["local"] for k in ks)
        bounds = min((k["max_threads"] for k in ks if k["max_threads"]), default=THREADS_PER_BLOCK)
        short = name.replace("(anonymous namespace)::", "").removeprefix("void ").split("(")[0]
        short = short.replace("zaya::cuda::", "")
        # One row per block size, at the largest dynamic shared memory it was launched with; every shape is checked.
        for threads in sorted({t for t, _, _ in resolved[name]}):
            dyn = max(d for t, d, _ in resolved[name] if t == threads)
            fits, _ = blocks_per_sm(threads, regs, smem + dyn)
            print(f"{short[:60]:60s} {regs:4d} {local:5d} {smem:6d} {threads:7d} {dyn:8d} {fits:9d}")
        for threads, dyn, opted in sorted(resolved[name]):
            fits, block_regs = blocks_per_sm(threads, regs, smem + dyn)
            where = f"{short} with {threads} threads ({', '.join(sorted({k['origin'] for k in ks}))})"
            if threads > bounds:
                errors.append(f"{where}: more threads than its __launch_bounds__ ({bounds})")
            if block_regs > REGS_PER_SM:
                errors.append(f"{where}: {regs} registers a thread need {block_regs} a block, over {REGS_PER_SM}")
            limit = SMEM_DEFAULT if opted < 0 else min(opted + smem, SMEM_OPT_IN)
            if smem + dyn > limit:
                errors.append(f"{where}: {smem} + {dyn} bytes of shared memory, over {limit}"
                              + (" (not opted in)" if opted < 0 else ""))
            if fits == 0:
                errors.append(f"{where}: no block fits on an SM")
    never = sorted(n for n in by_name if n not in resolved)
    print(f"check_launches: {sum(len(v) for v in resolved.values())} launch shapes of {len(resolved)} kernels checked"
          f" against {len(kernels)} sm_90 kernels ({len(others)} launched kernels outside zaya:: not checked);"
          f" {len(never)} kernels never launched by the emulated tests")
    for n in never:
        print(f"  not launched: {n}")
    for e in errors:
        print(f"check_launches: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
