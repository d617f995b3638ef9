#!/usr/bin/env python3
"""What `--quantize int8` costs in likelihood: the mean negative log-likelihood a model gives real text, with and
without it, through `zaya serve` (/v1/completions with echo and logprobs: every prompt token's log-probability).

The text: the first --chars characters of the first --files Python standard-library modules (sorted by name) of
the interpreter running this script. Prints one line per setting and the relative change.

    python3 bench/bench_quant_nll.py --model runs/small/model [--files 24] [--chars 1500]
"""

from __future__ import annotations

import glob
import math
import os
import sysconfig

from zaya_serve import arguments, post, start, stop


def texts(files: int, chars: int) -> list[str]:
    paths = sorted(glob.glob(os.path.join(sysconfig.get_paths()["stdlib"], "*.py")))[:files]
    out = []
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            out.append(f.read()[:chars])
    return out


def mean_nll(url: str, docs: list[str]) -> tuple[float, int]:
    total, count = 0.0, 0
    for d in docs:
        r = post(url + "/v1/completions",
                 {"prompt": d, "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 0})
        lps = r["choices"][0]["logprobs"]["token_logprobs"]
        prompt = lps[:r["usage"]["prompt_tokens"]]
        for lp in prompt:
            if lp is not None:  # the first token has no prediction
                total -= lp
                count += 1
    return total / count, count


def main() -> None:
    ap = arguments(__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=24)
    ap.add_argument("--chars", type=int, default=1500)
    a = ap.parse_args()
    docs = texts(a.files, a.chars)
    results = {}
    for quantize in ("none", "int8"):
        proc, url = start(a.zaya, a.model, a.layers, a.dtype, ["--quantize", quantize, "--prefix-cache-mb", "0"])
        try:
            results[quantize] = mean_nll(url, docs)
        finally:
            stop(proc)
        print(f"--quantize {quantize}: mean NLL {results[quantize][0]:.5f} over {results[quantize][1]} tokens")
    base, q = results["none"][0], results["int8"][0]
    print(f"int8 changes the mean NLL by {100 * (q - base) / base:+.3f} % ({base:.5f} -> {q:.5f}; "
          f"perplexity {math.exp(base):.3f} -> {math.exp(q):.3f})")


if __name__ == "__main__":
    main()
