"""What the server benchmarks share: starting `zaya serve` on a free port and posting JSON to it."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import urllib.request


def arguments(description: str) -> argparse.ArgumentParser:
    """The options every server benchmark takes: the binary, and the model (a preset's layers and dtype)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--zaya", default="build/zaya")
    ap.add_argument("--model", default="zaya1-8b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dtype", default="bf16")
    return ap


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def start(zaya: str, model: str, layers: int, dtype: str, extra: list[str]) -> tuple[subprocess.Popen, str]:
    """Starts `zaya serve MODEL --port 0 EXTRA...` (a preset with --layers and --dtype; a directory as it is), echoes
    its start-up lines, sends one short warm-up request, and returns the process and its base URL."""
    cmd = [zaya, "serve", model, "--port", "0"] + extra
    if not model.startswith("/") and not model.startswith("."):
        cmd += ["--layers", str(layers), "--dtype", dtype]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    port = None
    while port is None:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            raise SystemExit("zaya serve exited before listening")
        print(line.rstrip())
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1))
    url = f"http://127.0.0.1:{port}"
    post(url + "/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0})
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=60)
