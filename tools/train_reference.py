#!/usr/bin/env python3
"""Re-run a ``zaya train`` run in PyTorch (Hugging Face ZayaForCausalLM + torch.optim) and compare the losses.

Usage:
    build/zaya train --data DIR --out RUN ... --save-init --dump-batches
    python3 tools/train_reference.py --run RUN [--threads 2] [--attn eager|sdpa] [--tolerance 2.0]

Reads from RUN/:
  train_config.json   every hyper-parameter of the run (steps, batch, micro_batch, seq, lr, schedule, warmup,
                      min_lr_ratio, weight_decay, grad_clip, balance, balance_lr, eval_every, eval_batches, data)
  init/               the initial model (config.json + model.safetensors, HF layout) -- needs --save-init
  batches.bin         int32 [steps, batch, seq+1] token rows of every step -- needs --dump-batches
  batches_learned.bin u8, the same shape: each token's loss-mask flag (data prepared from prompt/completion or chat
                      records; 0 = a prompt token, not a target)
  metrics.jsonl       zaya's per-step loss / lr / grad_norm and val_loss lines, for the comparison
and the validation split of the data directory named in train_config.json.

Trains the same model from the same initial weights on exactly the same token rows with zaya's training recipe
(tools/gen_optim_goldens.py's functions and constants are imported and reused):
  * Muon (torch.optim.Muon; Newton-Schulz as the run's ns_precision says: torch's stock bf16 code, or patched to
    fp32; match_rms_adamw lr adjustment; each expert matrix a separate Parameter) for every 2-D matrix except the (tied) embedding, with weight decay
    train_config.weight_decay; AdamW (betas 0.9/0.95, eps 1e-8) for the rest, weight decay only on the embedding;
  * the lr schedule of src/optim/schedule.h (linear warmup, then cosine | wsd | constant down to min_lr_ratio*lr);
  * gradient accumulation over micro-batches (the step loss is the mean over the step's learned targets: each
    micro-batch's summed cross entropy over the step's count; without loss masks or doc_mask, the mean of the
    micro-batch means), global-norm clipping (clip_grad_norm_ semantics; a non-finite norm skips the
    step like zaya does: no update, no balancing, the schedule does not advance);
  * the balancing-bias controller (AdamW lr balance_lr on the balancing_biases buffers, error = top-1 class
    frequencies of the whole step - target), if balance is on;
  * validation exactly like zaya's Trainer::evaluate(): the val split's shards cut into chunks of seq+1 tokens starting
    every seq tokens, in order, batches of micro_batch sequences, at most eval_batches*(batch/micro_batch) batches,
    mean cross entropy over all learned target tokens; at every eval_every steps (not the last) and at the end;
  * loss masks (the data's mask shards, batches_learned.bin): a target whose flag is 0 is ignored (ignore_index);
  * packing "documents": the batches.bin rows as they are (zaya packed them; padding's flags are 0), the validation
    documents packed again here by the same best-fit decreasing;
  * doc_mask: each row cut after every EOS, every piece run through the model as a sequence of its own (positions
    from 0, nothing of the other pieces visible), the target after an EOS ignored.

Prints per-step losses next to zaya's (rel diff = (pytorch - zaya) / zaya), writes RUN/reference_metrics.jsonl (one
line per step: step, loss, lr, grad_norm, routing_entropy, skipped, seconds; one per validation: step, val_loss),
and ends with
    final val_loss: zaya X  pytorch Y  relative difference Z%
exiting 1 if |Z| exceeds --tolerance (percent, default 2).

Expected agreement: the first steps' losses agree to ~1e-7 relative (fp32 summation-order differences only;
--attn sdpa agrees as closely as eager; with bf16 Newton-Schulz from step 2 on to the bf16 level); later
ones drift apart slowly because tiny differences eventually flip a near-tied router argmax, after which the two runs
are different (but statistically equivalent) trainings.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim._muon as torch_muon
import transformers
from safetensors.torch import load_file
from transformers import ZayaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_goldens  # noqa: E402  (passthrough_semantics)
import gen_optim_goldens as og  # noqa: E402  (Muon/AdamW constants, fp32 NS, split_experts_, partition)

SHARD_HEADER_BYTES = 64
SHARD_MAGIC = b"ZAYATOK1"


# --------------------------------------------------------------------------------------------------------------------
# Schedule (src/optim/schedule.cpp)
# --------------------------------------------------------------------------------------------------------------------


def lr_at(step: int, peak: float, kind: str, warmup: int, total: int, min_lr_ratio: float, decay_frac: float = 0.2):
    """LrSchedule::lr(step), step >= 1."""
    if step <= warmup:
        return peak * step / warmup
    floor = min_lr_ratio * peak
    if kind == "constant":
        return peak
    if kind == "cosine":
        span = total - warmup
        tau = min(1.0, (step - warmup) / span) if span > 0 else 1.0
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * tau))
    if kind == "wsd":
        decay = int(math.floor(decay_frac * total + 0.5))  # std::llround (non-negative argument)
        start = total - decay
        if decay == 0 or step <= start:
            return peak
        t = min(1.0, (step - start) / decay)
        return peak + (floor - peak) * t
    raise SystemExit(f"unknown lr schedule '{kind}' (known: constant, cosine, wsd)")


# --------------------------------------------------------------------------------------------------------------------
# Data (src/data/shards.h, src/data/loader.cpp)
# --------------------------------------------------------------------------------------------------------------------


def open_shard(path: str) -> np.ndarray:
    with open(path, "rb") as fh:
        head = fh.read(SHARD_HEADER_BYTES)
    if len(head) < SHARD_HEADER_BYTES or head[:8] != SHARD_MAGIC:
        raise SystemExit(f"{path}: not a zaya token shard")
    (version, dtype_code) = struct.unpack_from("<II", head, 8)
    (count, _vocab) = struct.unpack_from("<QQ", head, 16)
    if version != 1 or dtype_code not in (0, 1, 2):
        raise SystemExit(f"{path}: unsupported shard version {version} / dtype {dtype_code}")
    dtype = {0: np.uint16, 1: np.uint32, 2: np.uint8}[dtype_code]
    return np.memmap(path, dtype=dtype, mode="r", offset=SHARD_HEADER_BYTES, shape=(count,))


def pack_best_fit(lengths, capacity):
    """data/packing.h pack_best_fit over the documents in order: longest first (ties in order), each into the row
    whose free space fits it most tightly (equal free space: the row that got it first), else a new row."""
    rows, free = [], []  # free: sorted (free tokens, insertion counter, row)
    counter = 0
    for d in sorted(range(len(lengths)), key=lambda i: -min(lengths[i], capacity)):  # sorted() is stable
        n = min(lengths[d], capacity)
        k = bisect.bisect_left(free, (n, -1, -1))
        if k == len(free):
            row, left = len(rows), capacity
            rows.append([])
        else:
            left, _, row = free.pop(k)
        rows[row].append(d)
        if left > n:
            bisect.insort(free, (left - n, counter, row))
            counter += 1
    return rows


def packed_val_rows(data_dir: str, manifest: dict, seq: int):
    """ValBatches' rows under --pack documents: the val documents (up to each EOS) packed by best-fit decreasing,
    cut to the row, padded with pad_id (eos_id if none) whose flags are 0."""
    split = manifest["val"]
    stream = np.concatenate([np.asarray(open_shard(os.path.join(data_dir, n)), dtype=np.int64)
                             for n in split["shards"]])
    if manifest.get("loss_mask"):
        flags = np.concatenate([np.asarray(open_shard(os.path.join(data_dir, n)), dtype=np.int64)
                                for n in split["masks"]])
    else:
        flags = np.ones_like(stream)
    ends = list(np.nonzero(stream == manifest["eos_id"])[0] + 1)
    if not ends or ends[-1] != len(stream):
        ends.append(len(stream))
    docs = [(a, b) for a, b in zip([0] + ends[:-1], ends) if b > a]
    cap = seq + 1
    pad = manifest["pad_id"] if manifest["pad_id"] >= 0 else manifest["eos_id"]
    for row in pack_best_fit([b - a for a, b in docs], cap):
        t, f = np.full(cap, pad, dtype=np.int64), np.zeros(cap, dtype=np.int64)
        at = 0
        for d in row:
            a, b = docs[d]
            n = min(b - a, cap - at)
            t[at : at + n], f[at : at + n] = stream[a : a + n], flags[a : a + n]
            at += n
        yield t, f


def val_batches(data_dir: str, micro: int, seq: int, max_batches: int, packing: str = "chunks"):
    """ValBatches(data, micro, seq) with Trainer::evaluate()'s batch limit: yields (int64 [b, seq+1] token rows,
    their loss-mask flags or None)."""
    with open(os.path.join(data_dir, "data.json")) as fh:
        manifest = json.load(fh)
    if packing == "documents":
        rows = list(packed_val_rows(data_dir, manifest, seq))
        for b, lo in enumerate(range(0, len(rows), micro)):
            if max_batches and b >= max_batches:
                break
            yield np.stack([t for t, _ in rows[lo : lo + micro]]), np.stack([f for _, f in rows[lo : lo + micro]])
        return
    masks = manifest["val"].get("masks") if manifest.get("loss_mask") else None
    chunks = []  # (shard array, mask array or None, start offset)
    for i, name in enumerate(manifest["val"]["shards"]):
        shard = open_shard(os.path.join(data_dir, name))
        mask = open_shard(os.path.join(data_dir, masks[i])) if masks else None
        n = (len(shard) - 1) // seq if len(shard) > seq else 0
        chunks.extend((shard, mask, c * seq) for c in range(n))
    if not chunks:
        raise SystemExit(f"validation split of '{data_dir}' has no sequence of {seq + 1} tokens")
    done = 0
    for lo in range(0, len(chunks), micro):
        if max_batches and done >= max_batches:
            break
        part = chunks[lo : lo + micro]
        rows = np.stack([np.asarray(s[o : o + seq + 1], dtype=np.int64) for s, _, o in part])
        flags = np.stack([np.asarray(m[o : o + seq + 1], dtype=np.int64) for _, m, o in part]) if masks else None
        yield rows, flags
        done += 1


# --------------------------------------------------------------------------------------------------------------------
# Model
# --------------------------------------------------------------------------------------------------------------------


def load_init(init_dir: str, attn: str) -> ZayaForCausalLM:
    model, info = ZayaForCausalLM.from_pretrained(
        init_dir, dtype=torch.float32, attn_implementation=attn, experts_implementation="eager",
        output_loading_info=True,
    )
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        if info[k]:
            raise SystemExit(f"{init_dir}: loading reported {k}: {info[k]}")
    # transformers 5.24's _init_weights resets balancing_biases[-1] to -1 after loading: restore every tensor from
    # the file (see tools/gen_goldens.py self_check).
    file_sd = load_file(os.path.join(init_dir, "model.safetensors"))
    model_sd = model.state_dict()
    with torch.no_grad():
        for k, v in file_sd.items():
            model_sd[k].copy_(v.to(torch.float32))
        # fresh, aligned memory (see gen_goldens.self_check); tied parameters stay one Parameter
        for p in model.parameters():
            p.data = p.data.clone()
        for b in model.buffers():
            b.data = b.data.clone()
    if model.config.tie_word_embeddings:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    return model


def router_count_hooks(model: ZayaForCausalLM, counts: list) -> list:
    """Accumulate each layer's top-1 class counts (E+1 classes, class E = skip) into counts[l]."""
    handles = []
    for li, layer in enumerate(model.model.layers):
        gate = layer.mlp.gate

        def hook(m, i, o, li=li, gate=gate):
            biased = torch.softmax(o.detach(), dim=-1).to(torch.float32) + gate.balancing_biases
            counts[li] += torch.bincount(biased.argmax(dim=-1).reshape(-1), minlength=counts[li].numel())

        handles.append(gate.router_mlp.register_forward_hook(hook))
    return handles


def routing_entropy(c: torch.Tensor, E: int) -> float:
    """normalised_routing_entropy (src/optim/balancing.cpp): H(p_real)/ln E over the real experts."""
    real = c[:E].double()
    tot = real.sum().item()
    if tot == 0:
        return 0.0
    if E == 1:
        return 1.0
    p = real[real > 0] / tot
    return max(0.0, float(-(p * p.log()).sum().item() / math.log(E)))


def targets_of(rows: torch.Tensor, flags, doc_eos: int) -> torch.Tensor:
    """Each row's targets, -100 (ignored) where the loss mask says 0 and, with doc_eos >= 0, after an EOS input."""
    targets = rows[:, 1:].clone()
    if flags is not None:
        targets[torch.as_tensor(flags)[:, 1:] == 0] = -100
    if doc_eos >= 0:
        targets[rows[:, :-1] == doc_eos] = -100
    return targets


def sum_ce(model: ZayaForCausalLM, rows: torch.Tensor, flags=None, doc_eos: int = -1, pad: int = -1):
    """(summed cross entropy over the learned targets, their count) of token rows [b, seq+1]. pad >= 0 (packed
    rows): each row's trailing pad tokens are left out, as zaya leaves them out of the model's inputs."""
    targets = targets_of(rows, flags, doc_eos)
    inputs = rows[:, :-1]
    if doc_eos < 0 and pad < 0:
        logits = model(input_ids=inputs, use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="sum")
        return loss, int((targets != -100).sum())
    loss, count = 0.0, 0
    for r in range(inputs.shape[0]):
        n = inputs.shape[1]
        if pad >= 0:
            real = (rows[r] != pad).nonzero()
            n = max(int(real[-1]) if len(real) else 0, 0)  # inputs: the tokens before the padding, but the last
        if n == 0:
            continue
        # document masking: every piece up to and including an EOS is a sequence of its own
        cuts = [0] + ([t + 1 for t in range(n - 1) if int(inputs[r, t]) == doc_eos] if doc_eos >= 0 else []) + [n]
        pieces = [model(input_ids=inputs[r : r + 1, a:b], use_cache=False).logits[0] for a, b in zip(cuts, cuts[1:])]
        logits = torch.cat(pieces)
        loss = loss + F.cross_entropy(logits.float(), targets[r, :n], reduction="sum")
        count += int((targets[r, :n] != -100).sum())
    return loss, count


@torch.no_grad()
def evaluate(model, data_dir, micro, seq, max_batches, doc_eos, packing, pad) -> float:
    total, tokens = 0.0, 0
    for rows, flags in val_batches(data_dir, micro, seq, max_batches, packing):
        loss, n = sum_ce(model, torch.from_numpy(rows), flags, doc_eos, pad)
        total += loss.item()
        tokens += n
    return total / tokens


# --------------------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------------------


def read_zaya_metrics(path: str):
    steps, vals = {}, {}
    if not os.path.exists(path):
        return steps, vals
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            if "val_loss" in j:
                vals[j["step"]] = j["val_loss"]
            elif "loss" in j:
                steps[j["step"]] = j
    return steps, vals


def rel(zaya, ours):
    """(pytorch - zaya) / |zaya|, the sign convention of every relative difference printed."""
    return (ours - zaya) / abs(zaya) if zaya else float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="run directory of `zaya train --save-init --dump-batches`")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    ap.add_argument("--attn", choices=("eager", "sdpa"), default="eager", help="attention implementation")
    ap.add_argument("--tolerance", type=float, default=2.0, help="max |relative final val_loss difference| in %%")
    ap.add_argument("--data", help="override the data directory named in train_config.json")
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    run = args.run
    with open(os.path.join(run, "train_config.json")) as fh:
        tc = json.load(fh)
    # Newton-Schulz as the run did it: torch's stock bf16 iteration (zaya's default) or patched to fp32.
    ns_precision = tc.get("ns_precision", "fp32")  # runs from before the option existed used fp32
    if ns_precision == "fp32":
        torch_muon._zeropower_via_newtonschulz = og._zeropower_via_newtonschulz_fp32
    elif ns_precision != "bf16":
        raise SystemExit(f"train_config.json: unknown ns_precision '{ns_precision}'")
    steps, batch, seq = int(tc["steps"]), int(tc["batch"]), int(tc["seq"])
    micro = int(tc.get("micro_batch") or 0) or batch
    if batch % micro:
        raise SystemExit(f"micro_batch {micro} does not divide batch {batch}")
    accum = batch // micro
    data_dir = args.data or tc["data"]
    for need in ("init/config.json", "init/model.safetensors", "batches.bin"):
        if not os.path.exists(os.path.join(run, need)):
            raise SystemExit(f"{run}/{need} missing: run zaya train with --save-init --dump-batches")
    raw = np.fromfile(os.path.join(run, "batches.bin"), dtype="<i4")
    per_step = batch * (seq + 1)
    if raw.size % per_step:
        raise SystemExit(f"batches.bin holds {raw.size} tokens, not a multiple of batch*(seq+1) = {per_step}")
    have = raw.size // per_step
    if have < steps:
        print(f"note: batches.bin holds {have} of {steps} steps; training {have}")
    n_steps = min(steps, have)
    batches = torch.from_numpy(raw[: n_steps * per_step].reshape(n_steps, batch, seq + 1).astype(np.int64))
    with open(os.path.join(data_dir, "data.json")) as fh:
        manifest = json.load(fh)
    learned = None  # loss-mask flags of the batches, [steps, batch, seq+1]
    packing = tc.get("packing", "chunks")
    if manifest.get("loss_mask") or packing == "documents":
        path = os.path.join(run, "batches_learned.bin")
        if not os.path.exists(path):
            raise SystemExit(f"{path} missing: the data has loss masks or padding; rerun zaya train --dump-batches")
        flags = np.fromfile(path, dtype=np.uint8)
        if flags.size < n_steps * per_step:
            raise SystemExit(f"{path} holds {flags.size} flags, fewer than batches.bin's {n_steps * per_step} tokens")
        learned = flags[: n_steps * per_step].reshape(n_steps, batch, seq + 1).astype(np.int64)
    doc_eos = int(manifest["eos_id"]) if tc.get("doc_mask") else -1
    pad = -1  # packed rows: the pad id their padding uses (data/packing.h)
    if packing == "documents":
        pad = int(manifest["pad_id"]) if manifest["pad_id"] >= 0 else int(manifest["eos_id"])

    model = load_init(os.path.join(run, "init"), args.attn)
    cfg = model.config
    E, L = cfg.num_experts, cfg.num_hidden_layers
    passthrough = bool(getattr(cfg, "zaya_skip_passthrough", False))
    model.train()  # all dropouts are 0: identical to eval
    og.split_experts_(model)
    muon_p, decay_p, no_decay_p, _groups = og.partition(model)
    all_params = list(model.parameters())
    wd = float(tc["weight_decay"])
    muon_hyper = dict(og.MUON, weight_decay=wd)
    opt_muon = torch.optim.Muon(muon_p, lr=0.0, **muon_hyper)
    opt_adamw = torch.optim.AdamW(
        [{"params": decay_p, "weight_decay": wd}, {"params": no_decay_p, "weight_decay": 0.0}],
        lr=0.0, betas=og.ADAMW_BETAS, eps=og.ADAMW_EPS, foreach=False,
    )
    biases = [layer.mlp.gate.balancing_biases for layer in model.model.layers]
    balance = bool(tc.get("balance", True))
    opt_bias = torch.optim.AdamW(
        biases, lr=float(tc.get("balance_lr", 1e-3)), betas=og.BIAS_BETAS, eps=og.BIAS_EPS,
        weight_decay=og.BIAS_WD, foreach=False,
    )
    target = torch.full((E + 1,), 1.0 / E, dtype=torch.float32)
    target[E] = 0.0
    clip = float(tc.get("grad_clip", 1.0))
    sched = dict(
        peak=float(tc["lr"]), kind=tc.get("schedule", "cosine"), warmup=int(tc.get("warmup", 0)), total=steps,
        min_lr_ratio=float(tc.get("min_lr_ratio", 0.1)), decay_frac=float(tc.get("decay_frac", 0.2)),
    )
    eval_every, eval_batches = int(tc.get("eval_every", 0)), int(tc.get("eval_batches", 0))
    max_val_batches = eval_batches * accum

    zsteps, zvals = read_zaya_metrics(os.path.join(run, "metrics.jsonl"))
    print(
        f"train_reference: torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads, "
        f"attn {args.attn}, experts eager, fp32 (Muon Newton-Schulz {ns_precision})"
    )
    print(
        f"  {run}: {n_steps} steps x {batch} seq x {seq} tokens (micro-batch {micro}), lr {sched['peak']} "
        f"{sched['kind']} warmup {sched['warmup']} min_lr_ratio {sched['min_lr_ratio']}, wd {wd}, clip {clip}, "
        f"balancing {'on lr ' + str(tc.get('balance_lr', 1e-3)) if balance else 'off'}, skip "
        f"{'passthrough' if passthrough else 'HF (zero)'}; Muon {len(muon_p)} matrices, AdamW {len(decay_p)} + "
        f"{len(no_decay_p)} tensors"
    )
    print(f"{'step':>5} {'lr':>9} {'zaya loss':>10} {'torch loss':>10} {'rel diff':>9} {'zaya gnorm':>10} "
          f"{'torch gnorm':>11} {'s/step':>7}")

    out_path = os.path.join(run, "reference_metrics.jsonl")
    out = open(out_path, "w")
    sem = gen_goldens.passthrough_semantics() if passthrough else contextlib.nullcontext()
    opt_step = 0  # optimizer steps taken (a skipped step does not advance the schedule)
    val_zaya = val_torch = None
    with sem:

        def validate(s):
            vl = evaluate(model, data_dir, micro, seq, max_val_batches, doc_eos, packing, pad)
            zv = zvals.get(s)
            zs = f"{zv:10.5f}" if zv is not None else f"{'-':>10}"
            rd = f"{rel(zv, vl):+9.1e}" if zv is not None else ""
            print(f"{s:>5} {'val':>9} {zs} {vl:10.5f} {rd}")
            out.write(json.dumps({"step": s, "val_loss": vl}) + "\n")
            out.flush()
            return zv, vl

        for s in range(1, n_steps + 1):
            t0 = time.perf_counter()
            lr = lr_at(opt_step + 1, **sched)
            for opt in (opt_muon, opt_adamw):
                for g in opt.param_groups:
                    g["lr"] = lr
            opt_muon.zero_grad(set_to_none=True)
            opt_adamw.zero_grad(set_to_none=True)
            counts = [torch.zeros(E + 1, dtype=torch.long) for _ in range(L)]
            handles = router_count_hooks(model, counts)
            loss_sum = 0.0
            try:
                # the step's learned targets first: each micro-batch's summed loss is divided by their count
                parts = [slice(a * micro, (a + 1) * micro) for a in range(accum)]
                flags = [learned[s - 1, p] if learned is not None else None for p in parts]
                count = sum(int((targets_of(batches[s - 1, p], f, doc_eos) != -100).sum())
                            for p, f in zip(parts, flags))
                for p, f in zip(parts, flags):
                    loss, _ = sum_ce(model, batches[s - 1, p], f, doc_eos, pad)
                    if not torch.is_tensor(loss):  # nothing but padding and one-token documents
                        continue
                    loss = loss / max(count, 1)
                    loss_sum += loss.item()
                    loss.backward()
            finally:
                for h in handles:
                    h.remove()
            for p in all_params:  # zaya updates every parameter every step (zero gradient if unused)
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            grads = [p.grad for p in all_params]
            total_norm = torch.nn.utils.get_total_norm(grads, 2.0)
            gn = total_norm.item()
            skipped = not math.isfinite(gn)
            if not skipped:
                if clip > 0:
                    torch.nn.utils.clip_grads_with_norm_(all_params, clip, total_norm)
                opt_muon.step()
                opt_adamw.step()
                opt_step += 1
                if balance:
                    with torch.no_grad():
                        for li, b in enumerate(biases):
                            b.grad = counts[li].to(torch.float32) / counts[li].sum().to(torch.float32) - target
                    opt_bias.step()
                    opt_bias.zero_grad(set_to_none=True)
            dt = time.perf_counter() - t0
            ent = [routing_entropy(c, E) for c in counts]
            out.write(json.dumps({"step": s, "loss": loss_sum, "lr": lr, "grad_norm": gn, "routing_entropy": ent,
                                  "skipped": skipped, "seconds": dt}) + "\n")
            z = zsteps.get(s)
            if z is not None:
                print(f"{s:>5} {lr:9.3e} {z['loss']:10.5f} {loss_sum:10.5f} {rel(z['loss'], loss_sum):+9.1e} "
                      f"{z['grad_norm']:10.5f} {gn:11.5f} {dt:7.2f}" + ("  SKIPPED" if skipped else ""))
            else:
                print(f"{s:>5} {lr:9.3e} {'-':>10} {loss_sum:10.5f} {'':>9} {'-':>10} {gn:11.5f} {dt:7.2f}")
            if z is not None and abs(z["lr"] - lr) > 1e-12 * max(1.0, abs(lr)):
                print(f"  warning: zaya's lr at step {s} is {z['lr']!r}, ours {lr!r}")
            if eval_every > 0 and s % eval_every == 0 and s != steps:
                validate(s)
        val_zaya, val_torch = validate(n_steps)
    out.close()

    if val_zaya is None:
        print(f"final val_loss: zaya (missing from metrics.jsonl)  pytorch {val_torch:.6f}")
        return 1
    z = 100.0 * (val_torch - val_zaya) / val_zaya
    print(f"final val_loss: zaya {val_zaya:.6f}  pytorch {val_torch:.6f}  relative difference {z:+.3g}%")
    print(f"(reference metrics written to {out_path})")
    if abs(z) > args.tolerance:
        print(f"FAIL: |relative difference| {abs(z):.3g}% > {args.tolerance}%")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
