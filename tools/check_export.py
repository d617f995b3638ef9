#!/usr/bin/env python3
"""Check a model directory written by ``zaya export`` (or ``zaya train``) against the reference implementation.

Loads MODEL_DIR with transformers' ``ZayaForCausalLM`` (float32; tools/train_reference.load_init, which also
restores the stored balancing biases that transformers 5.24 resets on load), runs the same token sequence through
``zaya forward``, and compares the logits. Exits non-zero when the largest absolute difference exceeds --tol.

    python3 tools/check_export.py MODEL_DIR [--zaya build/zaya] [--tokens 2,17,5,...] [--tol 1e-4]

Needs ``pip install -r tools/requirements.txt``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_reference import load_init  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--zaya", default=os.path.join(os.path.dirname(__file__), "..", "build", "zaya"))
    ap.add_argument("--tokens", default="2,17,5,33,8,91,4,12,60,7,3,44,19,25,11,9")
    ap.add_argument("--tol", type=float, default=1e-4)
    args = ap.parse_args()
    tokens = [int(t) for t in args.tokens.split(",")]

    model = load_init(args.model_dir, "eager").eval()
    with torch.no_grad():
        ref = model(torch.tensor([tokens])).logits[0].to(torch.float32)

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.safetensors")
        subprocess.run([args.zaya, "forward", args.model_dir, "--tokens", args.tokens, "--out", out], check=True,
                       stdout=subprocess.DEVNULL)
        ours = load_file(out)["logits"].to(torch.float32)

    if ours.shape != ref.shape:
        print(f"shape mismatch: zaya {tuple(ours.shape)}, transformers {tuple(ref.shape)}")
        return 1
    err = (ours - ref).abs().max().item()
    scale = ref.abs().max().item()
    ok = err <= args.tol
    print(f"{args.model_dir}: {len(tokens)} tokens, vocab {ref.shape[-1]}: max |zaya - transformers| = {err:.3e} "
          f"(logits up to {scale:.2f}; tolerance {args.tol:g}) {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
