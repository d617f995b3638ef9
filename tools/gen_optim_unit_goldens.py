#!/usr/bin/env python3
"""Generate the small optimizer goldens of tests/unit/test_optim.cpp from torch's own optimizers.

Usage:
    python3 tools/gen_optim_unit_goldens.py --out tests/golden/optim_unit

Writes ``optim.safetensors`` (all F32) and ``meta.json`` (hyper-parameters, scalar results, versions):

* ``muon.{case}.param`` / ``muon.{case}.momentum``: torch.optim.Muon (adjust_lr_fn="match_rms_adamw", lr 0.02,
  weight_decay 0.1, momentum 0.95, ns_steps 5, eps 1e-7; nesterov True unless the case says otherwise) after 5 steps.
  torch 2.15 runs Newton-Schulz in bf16 (``grad.to(torch.bfloat16)``); it is patched here to run in fp32, the
  precision zaya uses, with torch's code otherwise unchanged.
* ``ns.{case}``: the fp32 Newton-Schulz output (5 steps) for one matrix.
* ``ns_bf16.{case}``: torch's stock (bf16) Newton-Schulz output for the same and larger matrices, and
  ``muon_bf16.{case}.param``: torch.optim.Muon unpatched (bf16 Newton-Schulz) after 5 steps — zaya's default
  ``ns_precision: bf16``.
* ``adamw.{case}.param|exp_avg|exp_avg_sq``: torch.optim.AdamW (single-tensor path, foreach=False) after 5 steps.
* ``clip.{case}.grads``: gradients (all tensors concatenated) after torch.nn.utils.clip_grad_norm_; the returned
  total norm is in meta.json.
* ``balancing.biases``: [layers, E+1] balancing biases after 3 controller steps (AdamW lr 1e-3, betas (0.9, 0.95),
  eps 1e-8, wd 0 on the pseudo-gradient counts/total - target, target 1/E for experts and 0 for the skip slot).

Inputs are not stored: every input value is ``u(stream, i)``, a splitmix64 hash of (stream << 32 | i) mapped exactly
to a float in [-1, 1) (24 bits), times a power of two, so the C++ test regenerates them bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import torch
import torch.optim._muon as muon_mod
from safetensors.numpy import save_file

MASK = (1 << 64) - 1
STOCK_NS = muon_mod._zeropower_via_newtonschulz  # torch's bf16 iteration, before run_muon patches it


def splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def hashed(stream: int, shape: list[int], scale: float) -> torch.Tensor:
    n = int(np.prod(shape))
    vals = [((2 * (splitmix64((stream << 32) | i) >> 40)) - (1 << 24)) / float(1 << 24) for i in range(n)]
    return (torch.tensor(vals, dtype=torch.float64) * scale).to(torch.float32).reshape(shape)


def ns_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch 2.15's _zeropower_via_newtonschulz with bfloat16 replaced by float32 (nothing else changed)."""
    a, b, c = ns_coefficients
    ortho_grad = grad.to(dtype=torch.float32, copy=True)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    ortho_grad.div_(ortho_grad.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = torch.addmm(gram_matrix, gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    return ortho_grad


STEPS = 5
MUON = dict(lr=0.02, weight_decay=0.1, momentum=0.95, ns_steps=5, eps=1e-7, adjust_lr_fn="match_rms_adamw")
ADAMW = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8)
PARAM_SCALE, GRAD_SCALE = 0.125, 0.0625

# name -> (shape, stream base, nesterov)
MUON_CASES = {
    "8x16": ([8, 16], 100, True),
    "16x8": ([16, 8], 200, True),
    "17x32": ([17, 32], 300, True),
    "32x17": ([32, 17], 400, True),
    "8x16_plain": ([8, 16], 500, False),
}
NS_CASES = {"17x32": ([17, 32], 600), "40x24": ([40, 24], 700)}
NS_BF16_CASES = {**NS_CASES, "64x192": ([64, 192], 710), "256x96": ([256, 96], 720)}
MUON_BF16_CASES = {"17x32": ([17, 32], 300), "64x24": ([64, 24], 730)}
# name -> (shape, stream base, weight decay)
ADAMW_CASES = {"vec37": ([37], 800, 0.0), "8x16": ([8, 16], 900, 0.1)}
CLIP_SHAPES = [[8, 16], [37], [5]]
CLIP_CASES = {"clipped": (1000, 1.0), "unclipped": (1100, 5.0)}
BAL_LAYERS, BAL_E = 2, 4
BAL_COUNTS = [  # [step][layer][E+1]
    [[40, 10, 10, 10, 0], [25, 25, 25, 25, 0]],
    [[35, 15, 10, 10, 0], [20, 30, 25, 20, 5]],
    [[30, 20, 15, 15, 0], [10, 40, 30, 20, 0]],
]


def muon_steps(shape, stream, nesterov):
    """torch.optim.Muon (with whichever Newton-Schulz is installed) for STEPS steps on one hashed matrix."""
    p = torch.nn.Parameter(hashed(stream, shape, PARAM_SCALE))
    opt = torch.optim.Muon([p], nesterov=nesterov, **MUON)
    for t in range(1, STEPS + 1):
        p.grad = hashed(stream + t, shape, GRAD_SCALE)
        opt.step()
    return p.detach().numpy().copy(), opt.state[p]["momentum_buffer"].numpy().copy()


def run_muon_bf16(out, meta):
    muon_mod._zeropower_via_newtonschulz = STOCK_NS
    for name, (shape, stream) in NS_BF16_CASES.items():
        g = hashed(stream, shape, GRAD_SCALE)
        out[f"ns_bf16.{name}"] = STOCK_NS(g, (3.4445, -4.7750, 2.0315), 5, 1e-7).float().numpy().copy()
        meta["ns_bf16_cases"][name] = {"shape": shape, "stream": stream}
    for name, (shape, stream) in MUON_BF16_CASES.items():
        out[f"muon_bf16.{name}.param"] = muon_steps(shape, stream, True)[0]
        meta["muon_bf16_cases"][name] = {"shape": shape, "stream": stream}


def run_muon(out, meta):
    muon_mod._zeropower_via_newtonschulz = ns_fp32  # _single_tensor_muon looks the name up at call time
    for name, (shape, stream, nesterov) in MUON_CASES.items():
        out[f"muon.{name}.param"], out[f"muon.{name}.momentum"] = muon_steps(shape, stream, nesterov)
        meta["muon_cases"][name] = {"shape": shape, "stream": stream, "nesterov": nesterov}
    for name, (shape, stream) in NS_CASES.items():
        g = hashed(stream, shape, GRAD_SCALE)
        out[f"ns.{name}"] = ns_fp32(g, (3.4445, -4.7750, 2.0315), 5, 1e-7).numpy().copy()
        meta["ns_cases"][name] = {"shape": shape, "stream": stream}


def run_adamw(out, meta):
    for name, (shape, stream, wd) in ADAMW_CASES.items():
        p = torch.nn.Parameter(hashed(stream, shape, PARAM_SCALE))
        opt = torch.optim.AdamW([p], weight_decay=wd, foreach=False, **ADAMW)
        for t in range(1, STEPS + 1):
            p.grad = hashed(stream + t, shape, GRAD_SCALE)
            opt.step()
        st = opt.state[p]
        out[f"adamw.{name}.param"] = p.detach().numpy().copy()
        out[f"adamw.{name}.exp_avg"] = st["exp_avg"].numpy().copy()
        out[f"adamw.{name}.exp_avg_sq"] = st["exp_avg_sq"].numpy().copy()
        meta["adamw_cases"][name] = {"shape": shape, "stream": stream, "weight_decay": wd}


def run_clip(out, meta):
    for name, (stream, max_norm) in CLIP_CASES.items():
        params = []
        for k, shape in enumerate(CLIP_SHAPES):
            p = torch.nn.Parameter(torch.zeros(shape))
            p.grad = hashed(stream + k, shape, 0.25)
            params.append(p)
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        out[f"clip.{name}.grads"] = torch.cat([p.grad.reshape(-1) for p in params]).numpy().copy()
        meta["clip_cases"][name] = {"stream": stream, "max_norm": max_norm, "total_norm": float(norm)}


def run_balancing(out, meta):
    biases = torch.zeros(BAL_LAYERS, BAL_E + 1)
    biases[:, BAL_E] = -1.0
    ps = [torch.nn.Parameter(biases[l].clone()) for l in range(BAL_LAYERS)]
    opt = torch.optim.AdamW(ps, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0, foreach=False)
    target = np.array([1.0 / BAL_E] * BAL_E + [0.0])
    for counts in BAL_COUNTS:
        for l, p in enumerate(ps):
            c = np.array(counts[l], dtype=np.float64)
            p.grad = torch.tensor(c / c.sum() - target, dtype=torch.float64).to(torch.float32)
        opt.step()
    out["balancing.biases"] = torch.stack([p.detach() for p in ps]).numpy().copy()
    meta["balancing"] = {"layers": BAL_LAYERS, "experts": BAL_E, "counts": BAL_COUNTS}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="tests/golden/optim_unit")
    args = ap.parse_args()
    torch.set_num_threads(1)
    out: dict[str, np.ndarray] = {}
    meta = {
        "versions": {"torch": torch.__version__, "numpy": np.__version__},
        "steps": STEPS,
        "param_scale": PARAM_SCALE,
        "grad_scale": GRAD_SCALE,
        "muon": MUON,
        "adamw": {**ADAMW, "betas": list(ADAMW["betas"])},
        "clip_shapes": CLIP_SHAPES,
        "muon_cases": {},
        "ns_cases": {},
        "ns_bf16_cases": {},
        "muon_bf16_cases": {},
        "adamw_cases": {},
        "clip_cases": {},
    }
    run_muon_bf16(out, meta)
    run_muon(out, meta)
    run_adamw(out, meta)
    run_clip(out, meta)
    run_balancing(out, meta)
    os.makedirs(args.out, exist_ok=True)
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in out.items()},
              os.path.join(args.out, "optim.safetensors"))
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
