#!/usr/bin/env python3
"""transformers' ZAYA with the rows each weight multiplies rounded to bf16 first: the reference for zaya's CPU decoder
with ``--precision bf16`` (the default for a bf16 model; ops/cpu/linear_bf16.h).

Usage:
    python3 tools/gen_bf16_input_goldens.py --golden tests/golden

zaya then multiplies bf16 rows by bf16 weights — each product exact in fp32 — and sums in fp32; outputs, and all that
is not a product with a weight (norms, the CCA convolution, attention, the router's softmax), stay fp32. Here the
model is loaded as gen_generate_goldens.py loads it (the checkpoint's bf16 values exactly; eager attention and
experts), cast to float64, and run under a torch function mode that, in every linear / matmul with a weight operand
(a tensor sharing a parameter's storage: expert slices and transposes included), rounds the other operand to bf16
and back: the same products. Float64, because rounding makes the result jump where a value lies on a rounding
boundary: in float32 the reference's sums and zaya's differ by an ulp here and there, and the rare value they send
opposite ways moves that token's later logits by up to ~0.02 (measured on skip_slot: transformers in float32 and
float64 part from its fourth token on, and zaya follows float64 there). Against float64 such a flip is zaya's own
and rare, which the test allows for (tests/unit/test_generate_golden.cpp).

For each bf16 case it writes ``<case>/bf16_inputs.safetensors`` with ``logits`` [Σ T, V] of meta.json's token
sequences (the same rows as golden.safetensors), and ``<case>/generate_bf16_inputs.json``: greedy continuation of
generate.json's prompt under the same rounding, with the smallest top-1/top-2 margin of its steps. Deterministic:
single thread.
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from torch.overrides import TorchFunctionMode

from gen_generate_goldens import greedy, load

CASES = ["tiny_bf16", "variants", "skip_slot", "long"]  # the golden cases whose matrices are bf16

_MATMULS = {F.linear, torch.matmul, torch.mm, torch.bmm, torch.Tensor.matmul, torch.Tensor.mm, torch.Tensor.bmm,
            torch.Tensor.__matmul__, torch.Tensor.__rmatmul__}


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).to(t.dtype)


class RoundWeightInputs(TorchFunctionMode):
    """Rounds to bf16 the operand that multiplies a weight, in every linear and matmul."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.storages = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.rounded = 0

    def _is_weight(self, t) -> bool:
        return isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in self.storages

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _MATMULS and len(args) >= 2:
            a, b = args[0], args[1]
            if self._is_weight(b) and not self._is_weight(a):
                args = (_bf16(a), b, *args[2:])
                self.rounded += 1
            elif self._is_weight(a) and not self._is_weight(b):
                args = (a, _bf16(b), *args[2:])
                self.rounded += 1
        return func(*args, **kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golden", default="tests/golden")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for case in CASES:
        case_dir = os.path.join(args.golden, case)
        model = load(case_dir).double()
        with open(os.path.join(case_dir, "meta.json")) as fh:
            sequences = json.load(fh)["tokens"]
        with open(os.path.join(case_dir, "generate.json")) as fh:
            fp32_generate = json.load(fh)
        prompt = torch.tensor([fp32_generate["prompt"]])
        new_tokens = len(fp32_generate["continuation"])
        with torch.no_grad():
            plain = torch.cat([model(torch.tensor([s])).logits[0] for s in sequences])
            mode = RoundWeightInputs(model)
            with mode:
                logits = torch.cat([model(torch.tensor([s])).logits[0] for s in sequences])
                cont, margin, agrees = greedy(model, prompt, new_tokens)
        assert mode.rounded > 0, f"{case}: no matmul with a weight was seen"
        assert agrees, f"{case}: the cached greedy path disagrees with a full forward"
        save_file({"logits": logits.float().contiguous()}, os.path.join(case_dir, "bf16_inputs.safetensors"))
        meta = {
            "prompt": prompt[0].tolist(),
            "continuation": cont,
            "min_margin": margin,
            "note": "transformers generate(do_sample=False, use_cache=True, eos_token_id=None), float64, eager, "
            "every weight's other operand rounded to bf16 (tools/gen_bf16_input_goldens.py)",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        }
        with open(os.path.join(case_dir, "generate_bf16_inputs.json"), "w") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
        moved = (logits - plain).abs().max().item()
        print(f"{case}: {logits.shape[0]} rows, {mode.rounded} matmuls with a weight, logits moved by up to "
              f"{moved:.3g} by the rounding; greedy {new_tokens} tokens, min margin {margin:.3g}")


if __name__ == "__main__":
    main()
