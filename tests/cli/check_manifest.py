#!/usr/bin/env python3
"""Checks a zaya checkpoint directory against its manifest (format "zaya-checkpoint" version 3): every file's size,
and for every tensor that its chunks cover it in element order and that each chunk's safetensors entry (the
tensor's name when whole, else "NAME[at:end]") lies at the recorded offset with the recorded size, dtype and shape.

Usage: check_manifest.py CHECKPOINT_DIR STEP WORLD_SIZE
Prints one line: the files, the chunk count and the largest file's share of the data (each rank writes its own).
"""
import json
import math
import os
import struct
import sys

d, step, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = json.load(open(os.path.join(d, "manifest.json")))
assert m["format"] == "zaya-checkpoint" and m["version"] == 3, (m["format"], m["version"])
assert m["step"] == step and m["world_size"] == world, (m["step"], m["world_size"])
for k in ("optimizer_step", "balancing_step", "loader", "step_guard", "model_config", "train_config"):
    assert k in m, k
names = {t["name"] for t in m["tensors"]}
assert "model.embed_tokens.weight" in names and "model.embed_tokens.weight.exp_avg_sq" in names
assert "model.layers.0.self_attn.qkv_proj.q_proj.weight.muon_momentum" in names
assert "model.layers.0.mlp.experts.gate_up_proj.muon_momentum" in names
assert any(n.endswith("balancing_biases.exp_avg") for n in names)

if world == 1:
    want_files = {"model.safetensors", "optimizer.safetensors"}
else:
    want_files = {f"{g}-{r:05d}-of-{world:05d}.safetensors"
                  for g in ("model", "optimizer") for r in range(1, world + 1)}
files = set(m["files"])
assert files <= want_files and {f for f in want_files if f.startswith("optimizer")} <= files, sorted(files)
assert set(os.listdir(d)) == files | {"manifest.json"}, sorted(os.listdir(d))  # no reports or temporary files left

headers = {}
for f, info in m["files"].items():
    path = os.path.join(d, f)
    assert os.path.getsize(path) == info["bytes"], f
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        headers[f] = (n, json.loads(fh.read(n)))

chunks, data = 0, {f: 0 for f in files}
for t in m["tensors"]:
    assert t["dtype"] == "F32", t["name"]
    numel = math.prod(t["shape"])
    at = 0
    for c in t["chunks"]:
        assert c["at"] == at and c["numel"] > 0, (t["name"], c)
        whole = c["at"] == 0 and c["numel"] == numel
        entry = t["name"] if whole else f'{t["name"]}[{c["at"]}:{c["at"] + c["numel"]}]'
        n, h = headers[c["file"]]
        e = h[entry]
        assert e["dtype"] == "F32" and e["shape"] == (t["shape"] if whole else [c["numel"]]), (entry, e)
        assert 8 + n + e["data_offsets"][0] == c["offset"], (entry, e, c)
        assert e["data_offsets"][1] - e["data_offsets"][0] == c["bytes"] == 4 * c["numel"], (entry, e, c)
        assert len(c["xxh64"]) == 16, c
        at += c["numel"]
        chunks += 1
        data[c["file"]] += c["bytes"]
    assert at == numel, (t["name"], at, numel)
per_rank = [sum(b for f, b in data.items() if f.endswith(f"-{r:05d}-of-{world:05d}.safetensors") or world == 1)
            for r in range(1, world + 1)]
print(f"{len(files)} files, {chunks} chunks, largest rank part {max(per_rank) / sum(per_rank):.3f} of the data")
