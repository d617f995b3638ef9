#!/usr/bin/env python3
"""Rewrites a .cu file into C++ for the CPU emulation (tests/cuda_emu): the two CUDA-only syntaxes become calls.

  kernel<<<grid, block[, shared]>>>(args)   ->  ::emu::launch(kernel, grid, block[, shared])(args)
  extern __shared__ T name[];               ->  T *name = static_cast<T *>(::emu::dynamic_shared());

A #line directive keeps compiler messages and sanitizer reports pointing at the .cu file.
usage: to_cpp.py IN.cu OUT.cpp
"""
import re
import sys

src_path, out_path = sys.argv[1], sys.argv[2]
text = open(src_path, encoding="utf-8").read()
launch = re.compile(r"([A-Za-z_][\w:]*(?:<[^<>;()]*>)?)\s*<<<(.*?)>>>", re.S)
text, launches = launch.subn(lambda m: f"::emu::launch({m.group(1)}, {m.group(2)})", text)
shared = re.compile(r"extern\s+__shared__\s+(\w+)\s+(\w+)\s*\[\s*\]\s*;")
text = shared.sub(lambda m: f"{m.group(1)} *{m.group(2)} = static_cast<{m.group(1)} *>(::emu::dynamic_shared());", text)
if "<<<" in text or "extern __shared__" in text:
    sys.exit(f"to_cpp.py: {src_path}: a launch or shared declaration was not rewritten")
with open(out_path, "w", encoding="utf-8") as f:
    f.write(f'#line 1 "{src_path}"\n{text}')
