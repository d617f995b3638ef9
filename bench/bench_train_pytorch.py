#!/usr/bin/env python3
"""Training throughput: zaya vs PyTorch (Hugging Face ZayaForCausalLM + torch.optim) on the same model shape.

Usage:
    python3 bench/bench_train_pytorch.py [--model small] [--batch 8] [--seq 256] [--steps 10] [--threads 2]
                                         [--warmup 2] [--ns bf16|fp32] [--precision fp32|bf16] [--zaya build/zaya]
                                         [--no-zaya]

(a) runs `zaya bench train --model M --batch B --seq T --ns-precision NS --precision P --json` with OMP_NUM_THREADS=threads and reads its
    tokens_per_s / mfu (and gflops / median_step_s, to express PyTorch's speed in the same model-FLOP units);
(b) times a full PyTorch training step of the same preset shape, fp32, on random tokens, with
    torch.set_num_threads(threads): forward + mean next-token cross entropy + backward + clip_grad_norm_(1.0) +
    torch.optim.Muon (every 2-D matrix except the tied embedding; each expert matrix a separate Parameter, as zaya
    does it, see tools/gen_optim_goldens.py) + AdamW (the rest) + the AdamW-driven balancing-bias controller.
    Muon's Newton-Schulz is torch's stock bf16 iteration (--ns bf16, default) or patched to fp32 (--ns fp32);
    zaya runs the same precision (its --ns-precision). --precision bf16 runs the forward under
    torch.autocast("cpu", bfloat16) and zaya with --precision bf16 (bf16 matmul operands, fp32 accumulation).

To be fair to PyTorch, every correct configuration of attn_implementation in {eager, sdpa} x
experts_implementation in {eager, grouped_mm} is first timed round-robin (--select-rounds steps each, after one
warm-up step; all four compute the same loss and gradients to ~1e-6, checked here); the fastest (by median) is then
timed for --steps steps after --warmup warm-up steps. (experts_implementation "batched_mm" is also correct but
gathers one weight matrix per token and is ~10x slower on CPU, so it is not a candidate.)

Reported tokens/s = batch*seq / median step time (zaya's `bench train` also reports the median); the mean is
printed too. The machine's load average is printed before and after: other processes skew CPU timings.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
import torch.optim._muon as torch_muon
import transformers
from transformers import ZayaConfig, ZayaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import gen_goldens  # noqa: E402  (rope)
import gen_optim_goldens as og  # noqa: E402  (optimizer constants, fp32 NS, split_experts_, partition)

# zaya's presets (src/model/config.cpp config_preset): vocab, hidden, layers, heads, kv heads, head_dim, experts,
# moe_intermediate_size, router_hidden_size, max_position_embeddings; all layers "hybrid", rope theta 1e4, partial
# 0.5, cca_time 2/2, rms_norm_eps 1e-5, tied embeddings, fp32.
PRESETS = {
    "tiny": (512, 64, 2, 4, 2, 16, 4, 96, 32, 1024),
    "small": (4096, 256, 4, 8, 2, 32, 8, 384, 64, 4096),
    "base": (32768, 768, 12, 8, 2, 96, 16, 768, 128, 8192),
}
ATTN = ("eager", "sdpa")
EXPERTS = ("eager", "grouped_mm")
_STOCK_NS = torch_muon._zeropower_via_newtonschulz


def loadavg() -> str:
    try:
        with open("/proc/loadavg") as fh:
            return " ".join(fh.read().split()[:3])
    except OSError:
        return "?"


def make_config(preset: str, seq: int) -> ZayaConfig:
    v, d, L, h, kv, hd, E, inter, router, maxpos = PRESETS[preset]
    return ZayaConfig(
        vocab_size=v, hidden_size=d, num_hidden_layers=L, num_attention_heads=h, num_key_value_heads=kv,
        head_dim=hd, num_experts=E, num_experts_per_tok=1, moe_intermediate_size=inter, router_hidden_size=router,
        max_position_embeddings=max(maxpos, seq), rms_norm_eps=1e-5, cca_time0=2, cca_time1=2,
        rope_parameters=gen_goldens.rope(10000.0, 0.5, 10000.0, 0.5), tie_word_embeddings=True,
        attention_bias=False, lm_head_bias=False, pad_token_id=0, bos_token_id=2, eos_token_id=106,
    )


class Trainer:
    """One PyTorch model + zaya's optimizer recipe; step() is one full optimizer step."""

    def __init__(self, base: ZayaForCausalLM, attn: str, experts: str, precision: str = "fp32"):
        self.name = f"attn={attn} experts={experts}"
        # --precision bf16: forward (and so backward) matmuls under torch.autocast(bfloat16), as zaya's --precision
        # bf16 runs its GEMMs; master weights, gradients and the optimizer stay fp32.
        self.autocast = precision == "bf16"
        m = copy.deepcopy(base)
        m.config._attn_implementation = attn
        m.config._experts_implementation = experts
        m.train()
        og.split_experts_(m)
        self.model = m
        muon_p, decay_p, no_decay_p, _ = og.partition(m)
        self.params = list(m.parameters())
        self.opt_muon = torch.optim.Muon(muon_p, lr=1e-2, **og.MUON)
        self.opt_adamw = torch.optim.AdamW(
            [{"params": decay_p, "weight_decay": og.EMBED_WD}, {"params": no_decay_p, "weight_decay": 0.0}],
            lr=1e-2, betas=og.ADAMW_BETAS, eps=og.ADAMW_EPS,
        )
        self.biases = [layer.mlp.gate.balancing_biases for layer in m.model.layers]
        self.opt_bias = torch.optim.AdamW(self.biases, lr=og.BIAS_LR, betas=og.BIAS_BETAS, eps=og.BIAS_EPS,
                                          weight_decay=0.0)
        E = m.config.num_experts
        self.target = torch.full((E + 1,), 1.0 / E)
        self.target[E] = 0.0
        self.counts = [None] * len(self.biases)
        for li, layer in enumerate(m.model.layers):
            gate = layer.mlp.gate

            def hook(mod, i, o, li=li, gate=gate):
                biased = torch.softmax(o.detach(), dim=-1).to(torch.float32) + gate.balancing_biases
                self.counts[li] = torch.bincount(biased.argmax(dim=-1).reshape(-1), minlength=E + 1)

            gate.router_mlp.register_forward_hook(hook)
        self.times = []

    def loss_grads(self, rows: torch.Tensor):
        for p in self.params:
            p.grad = None
        loss = self.forward_loss(rows)
        loss.backward()
        return loss.item(), [p.grad.detach().clone() for p in self.params]

    def forward_loss(self, rows: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):
            logits = self.model(input_ids=rows[:, :-1], use_cache=False).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))

    def step(self, rows: torch.Tensor) -> float:
        t0 = time.perf_counter()
        self.opt_muon.zero_grad(set_to_none=True)
        self.opt_adamw.zero_grad(set_to_none=True)
        loss = self.forward_loss(rows)
        loss.backward()
        t1 = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(self.params, og.CLIP)
        self.opt_muon.step()
        self.opt_adamw.step()
        with torch.no_grad():
            for li, b in enumerate(self.biases):
                c = self.counts[li].to(torch.float32)
                b.grad = c / c.sum() - self.target
        self.opt_bias.step()
        self.opt_bias.zero_grad(set_to_none=True)
        dt = time.perf_counter() - t0
        self.last_split = (t1 - t0, dt - (t1 - t0))
        return dt


def run_zaya(args) -> dict | None:
    cmd = [args.zaya, "bench", "train", "--model", args.model, "--batch", str(args.batch), "--seq", str(args.seq),
           "--ns-precision", args.ns, "--precision", args.precision, "--json"]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    print(f"(a) zaya: {' '.join(cmd)}  [OMP_NUM_THREADS={args.threads}]  load {loadavg()}", flush=True)
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.zaya_timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"    zaya failed: {e}")
        return None
    if p.returncode != 0:
        why = f"killed by signal {-p.returncode}" if p.returncode < 0 else f"exited {p.returncode}"
        print(f"    zaya {why}: {(p.stderr or p.stdout).strip()[-500:]}")
        return None
    for line in reversed(p.stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                res = json.loads(line)
                break
            except json.JSONDecodeError:
                pass
    else:
        print(f"    no JSON object in zaya's output: {p.stdout.strip()[-500:]}")
        return None
    print(f"    zaya: {res.get('tokens_per_s', float('nan')):.1f} tokens/s, mfu {100 * res.get('mfu', float('nan')):.1f}%"
          + (f", median step {res['median_step_s']:.3f} s" if "median_step_s" in res else ""))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="small", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=10, help="timed PyTorch steps (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed PyTorch warm-up steps (default 2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ns", choices=("bf16", "fp32"), default="bf16",
                    help="Muon Newton-Schulz precision: torch's stock bf16 (default) or zaya's fp32")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                    help="matmul operands of forward/backward: fp32 (default) or bf16 (torch.autocast; zaya --precision bf16)")
    ap.add_argument("--select-rounds", type=int, default=3,
                    help="timed steps per candidate configuration when picking the fastest (0: eager/eager only)")
    ap.add_argument("--zaya", default=os.path.join(ROOT, "build", "zaya"))
    ap.add_argument("--zaya-timeout", type=float, default=1800.0)
    ap.add_argument("--zaya-runs", type=int, default=2, choices=(1, 2),
                    help="run zaya's bench before (1) or before and after (2, default) the PyTorch timing: on a "
                    "shared machine the spread shows how much the load moved the numbers")
    ap.add_argument("--no-zaya", action="store_true", help="skip (a), time PyTorch only")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    if args.ns == "fp32":
        torch_muon._zeropower_via_newtonschulz = og._zeropower_via_newtonschulz_fp32
    else:
        torch_muon._zeropower_via_newtonschulz = _STOCK_NS

    load_before = loadavg()
    print(f"bench_train_pytorch: model {args.model}, batch {args.batch} x seq {args.seq}, {args.threads} threads, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, load average {load_before}")
    zaya_runs = [] if args.no_zaya else [run_zaya(args)]

    # (b) PyTorch
    torch.manual_seed(args.seed)
    base = ZayaForCausalLM(make_config(args.model, args.seq)).to(torch.float32)
    vocab = base.config.vocab_size
    gen = torch.Generator().manual_seed(args.seed + 1)

    def batch():
        return torch.randint(1, vocab, (args.batch, args.seq + 1), generator=gen)

    tokens_per_step = args.batch * args.seq
    print(f"(b) PyTorch: {'fp32' if args.precision == 'fp32' else 'autocast bf16 matmuls'}, Muon Newton-Schulz {args.ns} ({'torch stock' if args.ns == 'bf16' else 'patched, as zaya'}),"
          f" {sum(p.numel() for p in base.parameters())} parameters; load {loadavg()}", flush=True)

    candidates = [(a, e) for a in ATTN for e in EXPERTS] if args.select_rounds > 0 else [("eager", "eager")]
    trainers = []
    ref = None
    probe = batch()
    for a, e in candidates:
        try:
            t = Trainer(base, a, e, args.precision)
            loss, grads = t.loss_grads(probe)
        except Exception as exc:  # an implementation this torch/transformers build lacks
            print(f"    {a}/{e}: unavailable ({type(exc).__name__}: {str(exc)[:120]})")
            continue
        if ref is None:
            ref = (loss, grads)
        num = sum(((g - r) ** 2).sum().item() for g, r in zip(grads, ref[1])) ** 0.5
        den = sum((r ** 2).sum().item() for r in ref[1]) ** 0.5
        tol = 1e-2 if args.precision == "bf16" else 1e-5  # bf16 kernels differ between implementations
        if abs(loss - ref[0]) > tol * abs(ref[0]) or num > 10 * tol * den:
            print(f"    {t.name}: results differ from eager/eager (loss {loss} vs {ref[0]}, grad rel {num / den:.2e})"
                  " -- not a candidate")
            continue
        trainers.append(t)

    if len(trainers) > 1:
        print(f"    selecting: {args.select_rounds} timed steps per configuration, round-robin, after 1 warm-up step")
        for t in trainers:
            t.step(batch())
        for _ in range(args.select_rounds):
            for t in trainers:
                t.times.append(t.step(batch()))
        for t in trainers:
            med = statistics.median(t.times)
            print(f"      {t.name:<32} median {med:7.3f} s/step  {tokens_per_step / med:8.1f} tokens/s  "
                  f"(steps {', '.join(f'{x:.2f}' for x in t.times)})")
        best = min(trainers, key=lambda t: statistics.median(t.times))
    else:
        best = trainers[0]
    for t in trainers:
        if t is not best:
            t.model = t.opt_muon = t.opt_adamw = None
    print(f"    timing {best.name}: {args.warmup} warm-up + {args.steps} timed steps; load {loadavg()}", flush=True)
    for _ in range(args.warmup):
        best.step(batch())
    times, splits = [], []
    for _ in range(args.steps):
        times.append(best.step(batch()))
        splits.append(best.last_split)
    med, mean = statistics.median(times), statistics.fmean(times)
    fb_med, opt_med = statistics.median(x[0] for x in splits), statistics.median(x[1] for x in splits)
    torch_tps = tokens_per_step / med
    print(f"      steps: {', '.join(f'{x:.2f}' for x in times)} s")
    print(f"      median {med:.3f} s/step = {torch_tps:.1f} tokens/s (mean {mean:.3f} s = {tokens_per_step / mean:.1f}); "
          f"of which forward+backward {fb_med:.3f} s, clip+Muon+AdamW+controller {opt_med:.3f} s (medians)")

    if not args.no_zaya and args.zaya_runs == 2:
        zaya_runs.append(run_zaya(args))
    load_after = loadavg()
    print()
    print(f"model {args.model}, batch {args.batch} x seq {args.seq}, {args.threads} threads "
          f"(load average before {load_before}, after {load_after})")
    print(f"  PyTorch ({best.name}, matmuls {args.precision}, Muon NS {args.ns}): {torch_tps:10.1f} tokens/s "
          f"(fwd+bwd {fb_med:.3f} s + optimizer {opt_med:.3f} s per step)")
    zaya_ok = [z for z in zaya_runs if z and "tokens_per_s" in z]
    if not zaya_ok:
        print("  zaya: not measured (see above)")
        return 0
    for i, zaya in enumerate(zaya_ok):
        z = float(zaya["tokens_per_s"])
        when = ("before", "after")[i] if len(zaya_ok) == 2 else "run"
        print(f"  zaya ({when} PyTorch): {z:10.1f} tokens/s, mfu {100 * zaya.get('mfu', float('nan')):.1f}%   "
              f"zaya / PyTorch = {z / torch_tps:.2f}x")
    best_z = max(zaya_ok, key=lambda z: z["tokens_per_s"])
    if all(k in best_z for k in ("gflops", "median_step_s", "mfu")) and best_z["mfu"] > 0:
        flops_step = best_z["gflops"] * 1e9 * best_z["median_step_s"]
        peak = best_z["gflops"] * 1e9 / best_z["mfu"]
        print(f"  at zaya's model-FLOP count ({flops_step / 1e9:.1f} GFLOP/step fwd+bwd; optimizer not counted): "
              f"zaya {best_z['gflops']:.1f} GFLOP/s, PyTorch {flops_step / med / 1e9:.1f} GFLOP/s "
              f"(mfu {100 * flops_step / med / peak:.1f}% of the {args.precision} matmul peak zaya measured, {peak / 1e9:.1f} GFLOP/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
