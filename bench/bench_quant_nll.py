#!/usr/bin/env python3
"""What a lossy inference setting costs in likelihood: the mean negative log-likelihood a model gives real text under
each setting of `zaya serve` (/v1/completions with echo and logprobs: every prompt token's log-probability).

The settings: `--quantize int8` against none by default, or those given with --setting (the first is the baseline),
e.g. `--setting "--precision fp32" --setting "--precision bf16"` for a bf16 model's rounded rows. The text: the first
--chars characters of the first --files Python standard-library modules (sorted by name) of the interpreter running
this script. Prints one line per setting and each one's relative change from the first.

    python3 bench/bench_quant_nll.py --model runs/small/model [--files 24] [--chars 1500] [--setting "FLAGS" ...]
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
    ap.add_argument("--setting", action="append", help="flags of one setting (repeatable; the first is the baseline)")
    a = ap.parse_args()
    docs = texts(a.files, a.chars)
    settings = a.setting or ["--quantize none", "--quantize int8"]
    results = {}
    for setting in settings:
        proc, url = start(a.zaya, a.model, a.layers, a.dtype, setting.split() + ["--prefix-cache-mb", "0"])
        try:
            results[setting] = mean_nll(url, docs)
        finally:
            stop(proc)
        print(f"{setting}: mean NLL {results[setting][0]:.5f} over {results[setting][1]} tokens")
    base = results[settings[0]][0]
    for setting in settings[1:]:
        q = results[setting][0]
        print(f"{setting} changes the mean NLL by {100 * (q - base) / base:+.3f} % ({base:.5f} -> {q:.5f}; "
              f"perplexity {math.exp(base):.3f} -> {math.exp(q):.3f})")

if __name__ == "__main__":
    main()
