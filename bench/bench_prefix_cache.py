#!/usr/bin/env python3
"""A multi-turn conversation against `zaya serve`, with its prefix cache and without (not CI).

Usage:
    python3 bench/bench_prefix_cache.py [--zaya build/zaya] [--model zaya1-8b] [--layers 4] [--dtype bf16]
                                        [--system 512] [--turns 4] [--user 64] [--tokens 32]

Each run starts `zaya serve` (a preset gets random weights; a directory is memory-mapped) on a free port, once
with the default prefix cache and once with --prefix-cache-mb 0, and holds the same conversation with it: a
--system-token prefix, then --turns turns, each adding --user prompt tokens to everything said so far and asking
for --tokens greedy tokens (/v1/completions with token ids, as a chat client re-sends its history). Reports, per
turn and run, the prompt's tokens, the tokens resumed from the cache (usage.prompt_tokens_details.cached_tokens)
and the request's wall time; and checks that both runs generated the same tokens.
Uses only the Python standard library.
"""

from __future__ import annotations

import argparse
import json
import time

from zaya_serve import arguments, post, start, stop


def conversation(a: argparse.Namespace, cache_mb: int | None) -> list[dict]:
    proc, base = start(a.zaya, a.model, a.layers, a.dtype,
                       [] if cache_mb is None else ["--prefix-cache-mb", str(cache_mb)])
    try:
        url = base + "/v1/completions"
        history = [(i * 7919) % 1000 + 10 for i in range(a.system)]
        turns = []
        for t in range(a.turns):
            history += [(t * 131 + i * 17) % 1000 + 10 for i in range(a.user)]
            t0 = time.time()
            out = post(url, {"prompt": history, "max_tokens": a.tokens, "temperature": 0})
            dt = time.time() - t0
            ids = out["choices"][0]["token_ids"]
            cached = out["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0)
            turns.append({"turn": t + 1, "prompt_tokens": len(history), "cached_tokens": cached, "seconds": dt,
                          "tokens": ids})
            print(f"  turn {t + 1}: prompt {len(history):5d} tokens, {cached:5d} from the cache, {dt:6.2f} s")
            history += ids
        return turns
    finally:
        stop(proc)


def main() -> None:
    ap = arguments(__doc__.split("\n")[0])
    ap.add_argument("--system", type=int, default=512)
    ap.add_argument("--turns", type=int, default=4)
    ap.add_argument("--user", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    print("with the prefix cache (default):")
    on = conversation(a, None)
    print("without (--prefix-cache-mb 0):")
    off = conversation(a, 0)
    same = all(x["tokens"] == y["tokens"] for x, y in zip(on, off))
    total_on, total_off = sum(t["seconds"] for t in on), sum(t["seconds"] for t in off)
    print(f"turns after the first: {sum(t['seconds'] for t in on[1:]):.2f} s with the cache, "
          f"{sum(t['seconds'] for t in off[1:]):.2f} s without; whole conversation {total_on:.2f} s vs "
          f"{total_off:.2f} s; same tokens: {same}")
    for r in on + off:
        del r["tokens"]
    print(json.dumps({"model": a.model, "layers": a.layers, "dtype": a.dtype, "same_tokens": same,
                      "with_cache": on, "without": off}))


if __name__ == "__main__":
    main()
