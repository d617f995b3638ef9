#!/usr/bin/env python3
"""Rewrites a .cu file (or a .cuh it includes) into C++ for the CPU emulation (tests/cuda_emu): the CUDA-only
syntaxes become calls.

  kernel<<<grid, block[, shared]>>>(args)   ->  ::emu::launch(kernel, grid, block[, shared])(args)
  extern __shared__ T name[];               ->  T *name = static_cast<T *>(::emu::dynamic_shared());
  __shared__ T a[M][N], b;                  ->  the same (a function static), then ::emu::fresh_shared(&a, sizeof(a));
                                                ::emu::fresh_shared(&b, sizeof(b)); — poisoned at each block's first
                                                pass, as uninitialised as the GPU's

A #line directive keeps compiler messages and sanitizer reports pointing at the original file.
usage: to_cpp.py IN.cu|IN.cuh OUT
"""
import re
import sys

src_path, out_path = sys.argv[1], sys.argv[2]
text = open(src_path, encoding="utf-8").read()
launch = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>", re.S)
text, launches = launch.subn(lambda m: f"::emu::launch({m.group(1)}, {m.group(2)})", text)
dynamic = re.compile(r"extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;")
text = dynamic.sub(lambda m: f"{m.group(1)} *{m.group(2)} = static_cast<{m.group(1)} *>(::emu::dynamic_shared());", text)


def declarator_names(declarators):
    """The names of `a[M][N], b`: each comma-separated declarator's leading identifier (commas inside brackets or
    template arguments do not separate)."""
    names, depth, start = [], 0, 0
    for i, ch in enumerate(declarators + ","):
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        elif ch == "," and depth == 0:
            m = re.match(r"\s*(\w+)", declarators[start:i])
            if not m:
                sys.exit(f"to_cpp.py: {src_path}: cannot name the __shared__ declarator '{declarators[start:i]}'")
            names.append(m.group(1))
            start = i + 1
    return names


static = re.compile(r"(?<!\w)__shared__\s+([\w:<>]+)\s+([^;{}]+);")
text, statics = static.subn(
    lambda m: m.group(0) + "".join(f" ::emu::fresh_shared(&{n}, sizeof({n}));" for n in declarator_names(m.group(2))),
    text)
if "<<<" in text or "extern __shared__" in text or len(re.findall(r"(?<!\w)__shared__", text)) != statics:
    sys.exit(f"to_cpp.py: {src_path}: a launch or shared declaration was not rewritten")
with open(out_path, "w", encoding="utf-8") as f:
    f.write(f'#line 1 "{src_path}"\n{text}')
