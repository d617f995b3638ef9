#!/usr/bin/env python3
"""Aggregate generation throughput of `zaya serve` with 1, 4 and 16 concurrent clients (not CI).

Usage:
    python3 bench/bench_serve.py [--zaya build/zaya] [--model zaya1-8b] [--layers 4] [--dtype bf16]
                                 [--clients 1,4,16] [--tokens 64] [--prompt 32] [--serve "FLAGS"]

Starts `zaya serve` (a preset gets random weights; a directory is memory-mapped) on a free port, then for each
client count runs that many threads, each sending two /v1/completions requests with a token-id prompt of --prompt
tokens and max_tokens --tokens (greedy, no stop tokens reachable: stop ids are the model's EOS only). Reports, per
client count, generated tokens / wall seconds, the mean seconds a request took (with --tokens 1, the time to the
first token: how fast prompts are read, e.g. --clients 1 --prompt 2000 --tokens 1), and the largest decode batch
the server saw (/health).
Uses only the Python standard library.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request

from zaya_serve import arguments, post, start, stop


def main() -> None:
    ap = arguments(__doc__.split("\n")[0])
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=32)
    ap.add_argument("--serve", default="", help="more flags for zaya serve, e.g. \"--precision fp32\"")
    a = ap.parse_args()
    proc, url = start(a.zaya, a.model, a.layers, a.dtype, ["--max-batch", "16"] + a.serve.split())
    try:
        results = []
        for clients in [int(c) for c in a.clients.split(",")]:
            generated = [0] * clients
            request_s: list[float] = []

            def client(k: int) -> None:
                for r in range(2):
                    prompt = [(k * 131 + r * 17 + i * 7) % 1000 + 10 for i in range(a.prompt)]
                    t = time.time()
                    out = post(url + "/v1/completions",
                               {"prompt": prompt, "max_tokens": a.tokens, "temperature": 0, "seed": k})
                    request_s.append(time.time() - t)
                    generated[k] += out["usage"]["completion_tokens"]

            threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
            t0 = time.time()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            dt = time.time() - t0
            health = json.loads(urllib.request.urlopen(url + "/health").read())
            mean_s = sum(request_s) / len(request_s)
            results.append({"clients": clients, "tokens": sum(generated), "seconds": dt,
                            "tokens_per_s": sum(generated) / dt, "mean_request_s": mean_s,
                            "max_batch_seen": health["max_batch_seen"]})
            print(f"{clients:3d} clients: {sum(generated):5d} tokens in {dt:6.1f} s = "
                  f"{sum(generated) / dt:7.2f} tokens/s aggregate, {mean_s:.2f} s a request "
                  f"(largest batch so far {health['max_batch_seen']})")
        print(json.dumps({"model": a.model, "layers": a.layers, "dtype": a.dtype, "results": results}))
    finally:
        stop(proc)


if __name__ == "__main__":
    main()
