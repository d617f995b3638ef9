#!/usr/bin/env python3
"""Greedy continuations from Hugging Face ``transformers``' ``generate`` (its own cached decoding of ZAYA: KV cache,
CCA conv state, delayed-value state) for the golden models in tests/golden, for zaya's cached decoder to match.

Usage:
    python3 tools/gen_generate_goldens.py --golden tests/golden

For each case it writes ``<case>/generate.json``: {"prompt": [...], "continuation": [...], "min_margin": m, ...}.
The model is loaded from the case's own checkpoint in float32 (bf16 checkpoints: their bf16 values, exactly) with
eager attention and the eager expert loop; the stored balancing biases are restored after loading (transformers
5.24 resets the skip slot's, see gen_goldens.py). Greedy decoding is only a fair test where the top two logits are
apart: prompts (drawn from a seeded generator) are redrawn until every step's top-1/top-2 margin is ≥ 1e-3, and the
margin reached is recorded. EOS does not stop generation (eos_token_id=None), so the continuation has exactly
``new_tokens`` ids. Deterministic: single thread, seeded draws.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import transformers
from safetensors.torch import load_file
from transformers import ZayaForCausalLM

CASES = {
    # case: (prompt length, new tokens) — `long` and `variants` cross their sliding windows (40 and 5).
    "tiny_f32": (7, 24),
    "tiny_bf16": (5, 24),
    "variants": (3, 20),
    "skip_slot": (6, 16),
    "long": (30, 24),
}


def load(case_dir: str) -> ZayaForCausalLM:
    model = ZayaForCausalLM.from_pretrained(
        case_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager"
    ).eval()
    stored = load_file(os.path.join(case_dir, "model.safetensors"))
    with torch.no_grad():
        for li, layer in enumerate(model.model.layers):
            key = f"model.layers.{li}.mlp.gate.balancing_biases"
            layer.mlp.gate.balancing_biases.copy_(stored[key].to(torch.float32))
    return model


@torch.no_grad()
def greedy(model: ZayaForCausalLM, prompt: torch.Tensor, new_tokens: int):
    out = model.generate(
        prompt,
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        eos_token_id=None,
        pad_token_id=0,
        output_scores=True,
        return_dict_in_generate=True,
        use_cache=True,
    )
    margins = []
    for s in out.scores:
        top2 = torch.topk(s[0].float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    continuation = out.sequences[0, prompt.shape[1]:].tolist()
    # The cached path must agree with a plain full-sequence forward of the whole result.
    full = model(out.sequences).logits[0]
    plen = prompt.shape[1]
    recomputed = full[plen - 1 : -1].argmax(-1).tolist()
    return continuation, min(margins), recomputed == continuation


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden", default="tests/golden")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for case, (plen, new) in CASES.items():
        case_dir = os.path.join(args.golden, case)
        model = load(case_dir)
        V = model.config.vocab_size
        gen = torch.Generator().manual_seed(1000 + plen)
        for attempt in range(50):
            prompt = torch.randint(3, V, (1, plen), generator=gen)
            cont, margin, agrees = greedy(model, prompt, new)
            if margin >= 1e-3 and agrees:
                break
        else:
            raise SystemExit(f"{case}: no prompt with a greedy margin ≥ 1e-3 in 50 draws")
        meta = {
            "prompt": prompt[0].tolist(),
            "continuation": cont,
            "min_margin": margin,
            "attempt": attempt,
            "note": "transformers generate(do_sample=False, use_cache=True, eos_token_id=None), float32, eager",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }
        with open(os.path.join(case_dir, "generate.json"), "w") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
        print(f"{case}: prompt {plen}, {new} new tokens, min margin {margin:.4g} (attempt {attempt})")


if __name__ == "__main__":
    main()
