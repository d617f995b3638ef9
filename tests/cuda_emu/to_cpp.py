#!/usr/bin/env python3
"""Rewrites a .cu file (or a .cuh it includes) into C++ for the CPU emulation (tests/cuda_emu): the CUDA-only
syntaxes become calls.

  kernel<<<grid, block[, shared]>>>(args)   ->  ::emu::launch(kernel, grid, block[, shared])(args)
  extern __shared__ T name[];               ->  T *name = static_cast<T *>(::emu::dynamic_shared());
  __shared__ T a[M][N], b;                  ->  static char a_block_key_; auto &a = ::emu::block_shared<T[M][N]>(
                                                &a_block_key_); and the same for b: memory of the block's own,
                                                poisoned when its first thread gets there (emu.cpp)

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


def declarators(text):
    """The comma-separated declarators of `a[M][N], b` (commas inside brackets or template arguments do not
    separate), each as (name, what follows it)."""
    found, depth, start = [], 0, 0
    for i, ch in enumerate(text + ","):
        if ch in "[(<":
            depth += 1
        elif ch in "])>":
            depth -= 1
        elif ch == "," and depth == 0:
            m = re.fullmatch(r"\s*(\w+)\s*((?:\[[^\]]*\]\s*)*)", text[start:i])
            if not m:
                sys.exit(f"to_cpp.py: {src_path}: cannot read the __shared__ declarator '{text[start:i]}'")
            found.append((m.group(1), re.sub(r"\s+", "", m.group(2))))
            start = i + 1
    return found


def block_shared(m):
    return " ".join(f"static char {name}_block_key_; "
                    f"auto &{name} = ::emu::block_shared<{m.group(1)}{dims}>(&{name}_block_key_);"
                    for name, dims in declarators(m.group(2)))


static = re.compile(r"(?<!\w)__shared__\s+([\w:<>]+)\s+([^;{}]+);")
text = static.sub(block_shared, text)
if "<<<" in text or re.search(r"(?<!\w)__shared__", text):
    sys.exit(f"to_cpp.py: {src_path}: a launch or shared declaration was not rewritten")
with open(out_path, "w", encoding="utf-8") as f:
    f.write(f'#line 1 "{src_path}"\n{text}')
