#!/usr/bin/env python3
"""The compact table scripts/gpu_check.sh prints last, from what it left in OUT_DIR: the op tests' JSON and exit codes
(cuda_ops/), zaya_cuda_bench's lines (cuda_bench.jsonl), the 20-step parity runs (parity_*/metrics.jsonl), `zaya bench
train` (train_bench.json), generated ids (generate_*.ids) and `zaya bench decode` (decode_bench.json). A part whose
files are missing or unreadable prints as a failure or "no result", saying why. tests/cli/test_device_emu.sh makes the
bench files on the emulated GPU and checks the table reads them.

Usage: gpu_table.py OUT_DIR   (exits 1 if a check's row reads FAILED; a speed goal missed is no failure)
"""
import glob
import json
import os
import sys

if len(sys.argv) != 2:
    sys.exit("usage: gpu_table.py OUT_DIR")
out = sys.argv[1]
ops_dir, bench_path = os.path.join(out, "cuda_ops"), os.path.join(out, "cuda_bench.jsonl")
failed = 0
print(f"{'check':45s} {'result':8s} time")
for rc_path in sorted(glob.glob(os.path.join(ops_dir, "*.rc"))):
    name, code = os.path.basename(rc_path)[:-3], open(rc_path).read().strip()
    try:
        r = json.load(open(rc_path[:-3] + ".json"))
        for suite in r["testsuites"]:
            for t in suite["testsuite"]:
                res = "FAILED" if t.get("failures") else ("skipped" if t.get("result") == "SKIPPED" else "ok")
                failed += res == "FAILED"
                print(f"{suite['name'] + '.' + t['name']:45s} {res:8s} {t['time']}")
    except Exception as e:
        print(f"{'op tests ' + name:45s} {'FAILED':8s} exit code {code}, no result ({e})")
        failed += 1
try:
    for line in open(bench_path):
        b = json.loads(line)
        name = b.pop("bench")
        print(f"{'bench ' + name:45s} " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in b.items()))
except Exception as e:
    print(f"benchmarks: no result ({e})")
def metrics(name):
    path = os.path.join(out, name, "metrics.jsonl")
    rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    return [r["loss"] for r in rows if "loss" in r], [r["val_loss"] for r in rows if "val_loss" in r]
ref, ref_val = metrics("parity_cpu_fp32")
for name, tol in (("parity_cuda_fp32", 1e-3), ("parity_cuda_bf16", 3e-2)):
    got, val = metrics(name)
    label = f"train 20 steps {name[7:]} vs cpu fp32"
    if len(got) != 20 or len(ref) != 20:
        print(f"{label:45s} {'FAILED':8s} steps: cpu {len(ref)}, gpu {len(got)}")
        failed += 1
        continue
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    res = "ok" if worst <= tol else "FAILED"
    failed += res == "FAILED"
    print(f"{label:45s} {res:8s} max rel loss diff {worst:.2e} (≤ {tol:g}); final loss {got[-1]:.4f} vs {ref[-1]:.4f};"
          f" val {val[-1] if val else float('nan'):.4f} vs {ref_val[-1] if ref_val else float('nan'):.4f}")
try:
    b = json.load(open(os.path.join(out, "train_bench.json")))
    label = f"train step {b['model']} {b['precision']} ({b['batch']}×{b['seq']} tokens, micro {b['micro_batch']})"
    print(f"{label:45s} {'':8s} {b['median_step_s']:.3f} s, "
          f"{b['tokens_per_s']:.0f} tok/s, MFU {100 * b['mfu_989']:.1f}% of 989 TFLOP/s; fwd+bwd alone "
          f"{b['median_fwd_bwd_s']:.3f} s = MFU {100 * b['mfu_fwd_bwd_989']:.1f}%")
    peak, planned = b["peak_device_bytes"], b["planned_device_bytes"]
    print(f"{'  GPU memory':45s} {'':8s} peak {peak / 2**30:.2f} GiB of zaya's allocations, planned "
          f"{planned / 2**30:.2f} GiB ({100 * (peak / planned - 1):+.1f}%)")
    # Device time by phase of one more step (Backend::phase: events in stream order), the largest first.
    phases = sorted(b.get("phases", []), key=lambda p: -p["seconds"])
    timed = sum(p["seconds"] for p in phases) or 1.0
    for i in range(0, min(len(phases), 16), 4):
        print("  " + "   ".join(f"{p['phase']} {1e3 * p['seconds']:.1f} ms ({100 * p['seconds'] / timed:.0f}%)"
                               for p in phases[i:i + 4]))
except Exception as e:
    print(f"train speed: no result ({e})")
for cpu_path in sorted(glob.glob(os.path.join(out, "generate_cpu_*.ids"))):
    gpu_path = cpu_path.replace("generate_cpu_", "generate_cuda_")
    label = "generate f32 cuda vs cpu, " + os.path.basename(cpu_path)[13:-4]
    a = open(cpu_path).read().strip()
    b = open(gpu_path).read().strip() if os.path.exists(gpu_path) else "(no output)"
    if a == b and a:
        print(f"{label:45s} {'ok':8s} the same {len(a.split(','))} ids")
    else:
        ia, ib = a.split(","), b.split(",")
        first = next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
        print(f"{label:45s} {'FAILED':8s} first difference at token {first}: cpu {a[:60]} | cuda {b[:60]}")
        failed += 1
try:
    b = json.load(open(os.path.join(out, "decode_bench.json")))
    res = "ok" if b["fraction_of_bound"] >= 0.6 else "below"
    name = f"decode {b['model']} {b['dtype'].lower()}"
    print(f"{name + ' batch 1 vs HBM bound':45s} {res:8s} {b['decode_tokens_per_s']:.1f} tok/s = "
          f"{100 * b['fraction_of_bound']:.0f}% of {b['bound_tokens_per_s']:.1f} (goal ≥ 60%; "
          f"{b['weight_bytes_per_token'] / 1e9:.2f} GB/token ÷ {b['read_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s); "
          f"prefill {b['prefill_tokens_per_s']:.0f} tok/s ({b.get('prefill_flops_per_s', 0) / 1e12:.0f} TFLOP/s); "
          f"with logits downloaded {b['decode_with_logits_tokens_per_s']:.1f} "
          f"tok/s; {b['step_kernels']} kernels per step")
    together = f"{name}, {b['seqs']} sequences together"
    print(f"{together:45s} {'':8s} {b['batch_decode_tokens_per_s']:.1f} tok/s in all "
          f"({1e3 * b['batch_step_s']:.3f} ms a step; "
          f"{b['batch_decode_tokens_per_s'] / b['decode_tokens_per_s']:.2f}× batch 1); "
          f"their prompts together {1e3 * b['batch_prefill_s']:.1f} ms in {b['batch_prefill_passes']} pass(es), "
          f"one by one {1e3 * b['batch_prefill_one_by_one_s']:.1f} ms")
    if b.get("context_tokens", 0) > 0:
        n, tps, bound = b["context_tokens"], b["context_decode_tokens_per_s"], b["context_bound_tokens_per_s"]
        print(f"{name + f' after {n} tokens':45s} {'':8s} {tps:.1f} tok/s = {100 * tps / bound:.0f}% of {bound:.1f} "
              f"(+ {b['context_kv_bytes_per_token'] / 1e9:.2f} GB of {b['kv_dtype'].lower()} KV cache per token); "
              f"prefill {n / b['context_prefill_s']:.0f} tok/s ({b['context_prefill_flops_per_s'] / 1e12:.0f} TFLOP/s)")
    if b["dependent_launch"]:
        plain = b["decode_without_pdl_tokens_per_s"]
        print(f"{name + ' batch 1 without PDL':45s} {'':8s} {plain:.1f} tok/s = "
              f"{100 * plain / b['bound_tokens_per_s']:.0f}% of bound (PDL: {b['decode_tokens_per_s'] / plain:.2f}×)")
except Exception as e:
    print(f"decode speed: no result ({e})")
if failed:
    print(f"{failed} FAILED")
sys.exit(1 if failed else 0)
