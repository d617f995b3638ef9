#!/usr/bin/env python3
"""Generate the optimizer golden case ``tests/golden/optim/``: 10 training steps of a tiny ZAYA1 model with the zaya
training recipe (Muon + AdamW, warmup/cosine schedule, global-norm clipping, AdamW-driven balancing-bias controller),
computed with Hugging Face transformers' ZayaForCausalLM and torch.optim.

Usage:
    python3 tools/gen_optim_goldens.py --out tests/golden          # writes tests/golden/optim/

Files written to ``<out>/optim/``:

* ``config.json`` (+ ``generation_config.json``), ``model.safetensors``: the INITIAL model (native HF layout, all F32,
  including the ``balancing_biases`` buffers), written by ``save_pretrained``;
* ``golden.safetensors`` (all F32):
    - ``batches``        [10, 4, 32]  token ids of the batch used at step s (index s-1), stored as float;
    - ``losses``         [10]  HF loss of step s's forward pass, BEFORE that step's update (mean next-token cross
                               entropy over all 4*31 positions, labels = input_ids);
    - ``grad_norm``      [10]  global L2 norm of all trainable gradients BEFORE clipping (clip_grad_norm_'s return);
    - ``lr``             [10]  learning rate used at step s (both optimizers);
    - ``router_counts``  [10, L, E+1]  top-1 router class counts of step s's forward (class E = skip slot), the
                               input of the balancing-bias controller;
    - ``min_router_margin`` [10]  smallest top1-top2 gap of the biased router probabilities in step s's forward;
    - ``final.<name>``   every parameter after step 10 (native names: experts stacked as
                               ``mlp.experts.gate_up_proj`` [E, 2I, D] / ``down_proj`` [E, D, I]; tied embeddings: one
                               ``model.embed_tokens.weight``, no ``lm_head.weight``);
    - ``final.model.layers.{l}.mlp.gate.balancing_biases``  [E+1]  balancing biases after step 10;
* ``meta.json``: every hyper-parameter below, seeds, per-step losses / lr / grad norms / margins, the float64 re-run
  comparison and versions.

Model: the zaya ``tiny`` preset shape -- vocab 512, hidden 64, 2 layers (both "hybrid"), 4 query heads / 2 KV heads,
head_dim 16, cca_time0 = cca_time1 = 2, 4 experts (+ skip slot), moe_intermediate_size 96, router_hidden_size 32,
rms_norm_eps 1e-5, max_position_embeddings 1024, rope theta 1e4 with partial_rotary_factor 0.5, tied embeddings, no
attention/lm_head bias -- with gen_goldens.init_params' random non-trivial F32 init (balancing biases U(-0.05, 0.05)
for the real experts, -1 for the skip slot).  attn_implementation = experts_implementation = "eager", float32, model in
train mode (all dropouts are 0, so identical to eval).

Data: 10 batches of 4 x 32 tokens drawn with a seeded torch.Generator from a fixed random sparse Markov chain (a random
set S of 128 token ids from 1..511; a uniformly random first token from S; each next token uniform over the current
token's 4 random successors in S), so there is something to learn and the loss falls.  Token 0 (pad) never occurs.

Training recipe (spec /work/shared/docs/zaya1-spec.md §C.1, §C.2, §B.1, §B.4; hyper-parameters are project choices
where the spec marks them UNKNOWN).  For step s = 1..10:

 1. lr(s) = peak * s / warmup                                                       for s <= warmup
    lr(s) = min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi * (s - warmup) / (total - warmup)))   for s > warmup
    with peak = 1e-2, warmup = 3, total = 10, min_lr = 0.1 * peak = 1e-3 (lr(10) = min_lr).  The same lr(s) is set
    as the group lr of both optimizers (Muon's per-matrix adjustment below is applied on top).
 2. forward + backward of the HF loss on batch s (all parameters get a gradient every step: an expert chosen by no
    token gets an all-zero gradient, not "no gradient", so its momentum and weight decay still apply).
 3. global-norm clipping, torch.nn.utils.clip_grad_norm_(all trainable params, max_norm=1.0, norm_type=2):
    total = || (||g_p||_2)_p ||_2 over all parameters (tied embedding counted once); every gradient is multiplied by
    min(1, 1.0 / (total + 1e-6)).  ``grad_norm`` stores ``total`` (pre-clip).
 4. Muon step (torch.optim.Muon, torch 2.15, torch/optim/_muon.py) for every 2-D weight matrix except
    model.embed_tokens.weight / lm_head.weight: q_proj, k_proj, v_proj_current, v_proj_delayed, o_proj, router
    down_proj / fc1 / fc2 / out_proj weights, and EACH EXPERT MATRIX SEPARATELY (gate_up_proj[e] [2I, D] and
    down_proj[e] [D, I] are separate leaf Parameters, see below).  Settings: momentum mu = 0.95, nesterov = True,
    ns_coefficients (a, b, c) = (3.4445, -4.7750, 2.0315), ns_steps = 5, eps = 1e-7, weight_decay wd = 0.1,
    adjust_lr_fn = "match_rms_adamw".  Exactly what torch computes per matrix W [A, B] (A = rows = fan-out,
    B = cols = fan-in) with (clipped) gradient G:
        buf   <- buf.lerp(G, 1 - mu)  = mu * buf + (1 - mu) * G        (buf starts at 0; an EMA, NOT mu*buf + G)
        U     <- G.lerp(buf, mu)      = (1 - mu) * G + mu * buf        (nesterov=True; else U = buf)
        X     <- U (transposed if A > B, so X has rows <= cols)
        X     <- X / max(||X||_F, eps)                                 (eps is a clamp on the norm, not added to it)
        repeat 5 times:  M = X X^T;  P = b*M + c*(M M);  X = a*X + P X   (torch.addmm(M, M, M, beta=b, alpha=c),
                                                                         torch.addmm(X, P, X, beta=a))
        O     <- X (transposed back to [A, B])
        W     <- W * (1 - lr * wd)                                     (decoupled weight decay FIRST, with the
                                                                         UNADJUSTED lr)
        W     <- W - lr * 0.2 * sqrt(max(A, B)) * O                    (match_rms_adamw lr adjustment)
    (torch's docstring writes B_t = mu*B_{t-1} + g_t and g_t + mu*B_t; the code's EMA buffer and nesterov mix are
    exactly (1 - mu) times those, and the factor cancels in the Frobenius normalisation except where the eps clamp
    is active, i.e. only for an all-zero (or < 1e-7 norm) update.)
    Newton-Schulz precision: torch's _zeropower_via_newtonschulz casts the input to bfloat16
    (``grad.to(dtype=torch.bfloat16, copy=True)``) and runs the normalisation and all 5 iterations in bf16, returning
    a bf16 matrix.  This script replaces ``torch.optim._muon._zeropower_via_newtonschulz`` by the identical
    iteration in float32 (float64 for the float64 re-run), so the golden is fp32 Newton-Schulz; the replacement is
    asserted to be called for every Muon matrix at every step.
 5. AdamW step (torch.optim.AdamW, foreach=False) for everything else, betas (0.9, 0.95), eps 1e-8:
    weight_decay 0.1 for model.embed_tokens.weight (and lm_head.weight if untied: not the case here); weight_decay 0
    for all 1-D parameters (RMSNorm weights, conv biases, residual scales/biases, input_hidden_states_scale/bias,
    router_states_scale, router linear biases, qk_norm.temp) and the 3-D conv kernels (conv_qk_depthwise.weight,
    conv_qk_grouped.weight).  Exactly (t = per-parameter step count, 1-based):
        W <- W * (1 - lr * wd)                      (decoupled: lr * wd, applied first)
        m <- m.lerp(G, 1 - beta1) = beta1 * m + (1 - beta1) * G
        v <- beta2 * v + (1 - beta2) * G * G
        W <- W - (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    (bias-corrected; eps added after the bias-corrected sqrt(v)).
 6. Balancing-bias controller (spec §B.1), after the optimizer steps: for every layer l, counts_l[k] = number of
    tokens of the batch (all 4*32 positions) whose top-1 class in step s's forward was k (k = 0..E, E = skip slot;
    class = argmax(softmax(router logits) + balancing_biases) with the biases of step s), p = counts / 128,
    error = p - target with target = 1/E for the E real experts and 0 for the skip slot.  The balancing_biases
    buffers (no autograd) are updated by their own torch.optim.AdamW (lr 1e-3 constant, betas (0.9, 0.95), eps 1e-8,
    weight_decay 0, foreach=False) with ``error`` as the gradient (same AdamW formula as above).

Expert split: torch.optim.Muon orthogonalises each parameter as one matrix, so every expert matrix must be its own leaf
Parameter.  ``split_experts_`` turns each HF ZayaExperts into a subclass holding ``nn.ParameterList``s
(gate_up_proj_list[e], down_proj_list[e]) whose ``gate_up_proj`` / ``down_proj`` attributes are
``torch.stack(list, dim=0)`` properties, so the unchanged HF eager expert loop runs on bit-identical values (asserted:
the split model's loss and stacked gradients equal the original model's bit for bit).  Names are mapped back to the
stacked native names when saving.

Checks (a draw -- one torch.Generator seeded with BASE_SEED + attempt draws the init, then the batches -- is rejected
and redrawn if one fails): losses fall
(loss(10) < loss(1) - 0.5 and no step's loss above loss(1)); every routing decision of every step has a top1-top2
biased-probability margin >= 1e-4 (near-ties would make a C++ comparison ill-posed); each layer uses >= 3 real
experts in step 1; a float64 re-run of all 10 steps (model, Muon NS, AdamW, controller in float64; modeling_zaya's
float32 casts redirected to float64 via gen_goldens.float64_semantics) makes the same routing decisions at every step
(the resulting float32-vs-float64 differences are stored in meta.json as the precision a C++ fp32 implementation can
expect).  After writing, the stored initial model is reloaded with from_pretrained and the 10 steps are re-run from it:
the final parameters must reproduce the stored ones.  Deterministic: single thread, seeded generators.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import torch.nn.functional as F
import torch.optim._muon as torch_muon
import transformers
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import ZayaConfig, ZayaForCausalLM
from transformers.models.zaya import modeling_zaya

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_goldens  # noqa: E402  (init_params, rope, float64_semantics)

# --------------------------------------------------------------------------------------------------------------------
# Hyper-parameters
# --------------------------------------------------------------------------------------------------------------------

BASE_SEED = 7007
MAX_TRIES = 50
STEPS = 10
BATCH = 4
SEQ = 32
MARKOV_STATES = 128
MARKOV_SUCCESSORS = 4

PEAK_LR = 1e-2
WARMUP = 3
MIN_LR = 0.1 * PEAK_LR
CLIP = 1.0

MUON = dict(
    momentum=0.95,
    nesterov=True,
    ns_coefficients=(3.4445, -4.7750, 2.0315),
    ns_steps=5,
    eps=1e-7,
    weight_decay=0.1,
    adjust_lr_fn="match_rms_adamw",
)
ADAMW_BETAS = (0.9, 0.95)
ADAMW_EPS = 1e-8
EMBED_WD = 0.1
BIAS_LR = 1e-3
BIAS_BETAS = (0.9, 0.95)
BIAS_EPS = 1e-8
BIAS_WD = 0.0

MARGIN_MIN = 1e-4
SELFCHECK_TOL = 0.0  # rerun from the reloaded checkpoint must be bit-identical

MODEL_CONFIG = dict(
    vocab_size=512,
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    num_experts=4,
    num_experts_per_tok=1,
    moe_intermediate_size=96,
    router_hidden_size=32,
    max_position_embeddings=1024,
    rms_norm_eps=1e-5,
    cca_time0=2,
    cca_time1=2,
    rope_parameters=gen_goldens.rope(10000.0, 0.5, 10000.0, 0.5),
    tie_word_embeddings=True,
    attention_bias=False,
    lm_head_bias=False,
    pad_token_id=0,
    bos_token_id=2,
    eos_token_id=106,
)


def lr_at(step: int) -> float:
    """Learning rate of step ``step`` (1-based): linear warmup to PEAK_LR, then cosine to MIN_LR at step STEPS."""
    if step <= WARMUP:
        return PEAK_LR * step / WARMUP
    return MIN_LR + 0.5 * (PEAK_LR - MIN_LR) * (1.0 + math.cos(math.pi * (step - WARMUP) / (STEPS - WARMUP)))


# --------------------------------------------------------------------------------------------------------------------
# fp32 Newton-Schulz for torch.optim.Muon
# --------------------------------------------------------------------------------------------------------------------

NS_CALLS = [0]


def _zeropower_via_newtonschulz_fp32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz with its bf16 cast replaced by float32 (float64 stays float64)."""
    if ns_steps >= 100:
        raise ValueError("Number of steps must be less than 100 for computational efficiency")
    if len(grad.shape) != 2:
        raise ValueError("Input tensor gradient must be a 2D matrix")
    if len(ns_coefficients) != 3:
        raise ValueError("Coefficients must be a tuple of exactly 3 values")
    NS_CALLS[0] += 1
    a, b, c = ns_coefficients
    dtype = torch.float64 if grad.dtype == torch.float64 else torch.float32
    ortho_grad = grad.to(dtype=dtype, copy=True)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    ortho_grad.div_(ortho_grad.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram_matrix = ortho_grad @ ortho_grad.T
        gram_update = torch.addmm(gram_matrix, gram_matrix, gram_matrix, beta=b, alpha=c)
        ortho_grad = torch.addmm(ortho_grad, gram_update, ortho_grad, beta=a)
    if grad.size(0) > grad.size(1):
        ortho_grad = ortho_grad.T
    return ortho_grad


# --------------------------------------------------------------------------------------------------------------------
# Experts as separate leaf parameters
# --------------------------------------------------------------------------------------------------------------------


class SplitZayaExperts(modeling_zaya.ZayaExperts):
    """ZayaExperts whose expert matrices are separate Parameters; the HF forward sees them re-stacked."""

    @property
    def gate_up_proj(self):
        return torch.stack(tuple(self.gate_up_proj_list), dim=0)

    @property
    def down_proj(self):
        return torch.stack(tuple(self.down_proj_list), dim=0)


def split_experts_(model: ZayaForCausalLM) -> None:
    for layer in model.model.layers:
        ex = layer.mlp.experts
        gu = ex._parameters.pop("gate_up_proj")
        dp = ex._parameters.pop("down_proj")
        ex.__class__ = SplitZayaExperts
        ex.gate_up_proj_list = nn.ParameterList([nn.Parameter(gu.data[e].clone()) for e in range(gu.shape[0])])
        ex.down_proj_list = nn.ParameterList([nn.Parameter(dp.data[e].clone()) for e in range(dp.shape[0])])


def native_name(split_name: str):
    """'...experts.gate_up_proj_list.3' -> ('...experts.gate_up_proj', 3); other names -> (name, None)."""
    for stem in ("gate_up_proj", "down_proj"):
        key = f".experts.{stem}_list."
        if key in split_name:
            head, idx = split_name.split(key)
            return f"{head}.experts.{stem}", int(idx)
    return split_name, None


def native_tensors(model: ZayaForCausalLM, which: str = "param") -> dict:
    """{native name: tensor} of the split model's parameters (which='param') or gradients (which='grad')."""
    parts, out = {}, {}
    for n, p in model.named_parameters():
        t = p.detach() if which == "param" else p.grad
        base, idx = native_name(n)
        if idx is None:
            out[base] = t
        else:
            parts.setdefault(base, {})[idx] = t
    for base, d in parts.items():
        assert sorted(d) == list(range(len(d))), base
        out[base] = torch.stack([d[i] for i in range(len(d))], dim=0)
    return out


# --------------------------------------------------------------------------------------------------------------------
# Data, model
# --------------------------------------------------------------------------------------------------------------------


def make_batches(gen: torch.Generator, vocab: int) -> torch.Tensor:
    states = torch.randperm(vocab - 1, generator=gen)[:MARKOV_STATES] + 1  # ids in 1..vocab-1
    succ = torch.randint(0, MARKOV_STATES, (MARKOV_STATES, MARKOV_SUCCESSORS), generator=gen)
    idx = torch.empty(STEPS, BATCH, SEQ, dtype=torch.long)
    idx[:, :, 0] = torch.randint(0, MARKOV_STATES, (STEPS, BATCH), generator=gen)
    choice = torch.randint(0, MARKOV_SUCCESSORS, (STEPS, BATCH, SEQ), generator=gen)
    for t in range(1, SEQ):
        idx[:, :, t] = succ[idx[:, :, t - 1], choice[:, :, t]]
    return states[idx]


def make_config() -> ZayaConfig:
    cfg = ZayaConfig(**copy.deepcopy(MODEL_CONFIG))
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def build(seed: int):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # HF's own (overwritten) init draws from the global RNG
    model = ZayaForCausalLM(make_config()).to(torch.float32)
    gen_goldens.init_params(model, gen)
    batches = make_batches(gen, model.config.vocab_size)
    return model, batches


# --------------------------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------------------------


def partition(model: ZayaForCausalLM):
    muon, adamw_decay, adamw_no_decay = [], [], []
    groups = {}
    for n, p in model.named_parameters():
        if n in ("model.embed_tokens.weight", "lm_head.weight"):
            adamw_decay.append(p)
            groups[n] = "adamw_wd"
        elif p.ndim == 2:
            muon.append(p)
            groups[n] = "muon"
        else:
            adamw_no_decay.append(p)
            groups[n] = "adamw_no_wd"
    muon_suffixes = (
        "qkv_proj.q_proj.weight",
        "qkv_proj.k_proj.weight",
        "qkv_proj.v_proj_current.weight",
        "qkv_proj.v_proj_delayed.weight",
        "self_attn.o_proj.weight",
        "mlp.gate.down_proj.weight",
        "router_mlp.fc1.weight",
        "router_mlp.fc2.weight",
        "router_mlp.out_proj.weight",
    )
    for n, g in groups.items():
        is_expert = native_name(n)[1] is not None
        should_be_muon = is_expert or n.endswith(muon_suffixes)
        assert (g == "muon") == should_be_muon, (n, g)
        if g == "adamw_no_wd":
            p = dict(model.named_parameters())[n]
            assert p.ndim == 1 or "conv_qk_" in n, n
    return muon, adamw_decay, adamw_no_decay, groups


def _router_hooks(model, store):
    handles = []
    for li, layer in enumerate(model.model.layers):
        gate = layer.mlp.gate

        def hook(m, i, o, li=li, gate=gate):
            probs = torch.softmax(o.detach(), dim=-1)
            biased = probs + gate.balancing_biases
            top2 = torch.topk(biased, 2, dim=-1).values
            store[li] = (biased.argmax(dim=-1), (top2[..., 0] - top2[..., 1]).min().item())

        handles.append(gate.router_mlp.register_forward_hook(hook))
        handles.append(
            gate.register_forward_hook(lambda m, i, o, li=li: store.__setitem__(("hf", li), o[2].detach().clone()))
        )
    return handles


def train(base: ZayaForCausalLM, batches: torch.Tensor, dtype=torch.float32) -> dict:
    """Run STEPS steps on a deep copy of ``base`` in ``dtype``; returns per-step records and final tensors."""
    model = copy.deepcopy(base).to(dtype)
    cfg = model.config
    E, L = cfg.num_experts, cfg.num_hidden_layers
    f64 = dtype == torch.float64
    model.train()
    split_experts_(model)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    muon_p, decay_p, no_decay_p, groups = partition(model)
    all_params = list(model.parameters())
    opt_muon = torch.optim.Muon(muon_p, lr=0.0, **MUON)
    opt_adamw = torch.optim.AdamW(
        [{"params": decay_p, "weight_decay": EMBED_WD}, {"params": no_decay_p, "weight_decay": 0.0}],
        lr=0.0,
        betas=ADAMW_BETAS,
        eps=ADAMW_EPS,
        foreach=False,
    )
    biases = [layer.mlp.gate.balancing_biases for layer in model.model.layers]
    assert all(not b.requires_grad for b in biases)
    opt_bias = torch.optim.AdamW(
        biases, lr=BIAS_LR, betas=BIAS_BETAS, eps=BIAS_EPS, weight_decay=BIAS_WD, foreach=False
    )
    target = torch.full((E + 1,), 1.0 / E, dtype=dtype)
    target[E] = 0.0

    rec = {"losses": [], "grad_norm": [], "lr": [], "router_counts": [], "min_router_margin": [], "choices": []}
    ctx = gen_goldens.float64_semantics() if f64 else _nullctx()
    with ctx:
        for s in range(1, STEPS + 1):
            lr = lr_at(s)
            for opt in (opt_muon, opt_adamw):
                for g in opt.param_groups:
                    g["lr"] = lr
            tokens = batches[s - 1]
            opt_muon.zero_grad(set_to_none=True)
            opt_adamw.zero_grad(set_to_none=True)
            store = {}
            handles = _router_hooks(model, store)
            try:
                out = model(input_ids=tokens, labels=None if f64 else tokens, use_cache=False)
            finally:
                for h in handles:
                    h.remove()
            if f64:  # HF's loss_function upcasts logits to float32; compute the same mean CE in float64
                V = out.logits.shape[-1]
                loss = F.cross_entropy(out.logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
            else:
                loss = out.loss
            counts, margins, choices = [], [], []
            for li in range(L):
                ch, mg = store[li]
                hf = store[("hf", li)].reshape(ch.shape)
                assert torch.equal(hf, torch.where(ch == E, torch.zeros_like(ch), ch)), "router recomputation differs"
                counts.append(torch.bincount(ch.reshape(-1), minlength=E + 1))
                margins.append(mg)
                choices.append(ch)
            loss.backward()
            for n, p in model.named_parameters():
                assert p.grad is not None and torch.isfinite(p.grad).all(), n
            ns_before = NS_CALLS[0]
            gn = torch.nn.utils.clip_grad_norm_(all_params, CLIP)
            opt_muon.step()
            opt_adamw.step()
            assert NS_CALLS[0] - ns_before == len(muon_p), "fp32 Newton-Schulz override not used"
            with torch.no_grad():
                for li, b in enumerate(biases):
                    p = counts[li].to(dtype) / tokens.numel()
                    b.grad = p - target
            opt_bias.step()
            opt_bias.zero_grad(set_to_none=True)

            rec["losses"].append(loss.item())
            rec["grad_norm"].append(gn.item())
            rec["lr"].append(lr)
            rec["router_counts"].append(torch.stack(counts))
            rec["min_router_margin"].append(min(margins))
            rec["choices"].append(torch.stack(choices))
    rec["final"] = {n: t.detach().clone() for n, t in native_tensors(model).items()}
    for li, b in enumerate(biases):
        rec["final"][f"model.layers.{li}.mlp.gate.balancing_biases"] = b.detach().clone()
    rec["groups"] = groups
    rec["n_muon"], rec["n_adamw_wd"], rec["n_adamw_no_wd"] = len(muon_p), len(decay_p), len(no_decay_p)
    return rec


class _nullctx:
    def __enter__(self):
        return None

    def __exit__(self, *a):
        return False


def check_split_identity(base: ZayaForCausalLM, tokens: torch.Tensor) -> None:
    """The split-expert model computes bit-identical losses and gradients."""
    ref = copy.deepcopy(base)
    out = ref(input_ids=tokens, labels=tokens, use_cache=False)
    out.loss.backward()
    sp = copy.deepcopy(base)
    split_experts_(sp)
    out2 = sp(input_ids=tokens, labels=tokens, use_cache=False)
    out2.loss.backward()
    assert out.loss.item() == out2.loss.item(), (out.loss.item(), out2.loss.item())
    g_ref = {n: p.grad for n, p in ref.named_parameters()}
    g_sp = native_tensors(sp, "grad")
    assert set(g_ref) == set(g_sp), set(g_ref) ^ set(g_sp)
    for n in g_ref:
        assert torch.equal(g_ref[n], g_sp[n]), f"split-expert gradient differs for {n}"
    assert set(native_tensors(sp)) == {n for n, _ in base.named_parameters()}


def acceptable(rec: dict, rec64: dict, E: int):
    losses = rec["losses"]
    if not losses[-1] < losses[0] - 0.5:
        return f"loss did not fall enough: {losses[0]:.4f} -> {losses[-1]:.4f}"
    if max(losses[1:]) > losses[0]:
        return f"a later loss exceeds the first: {losses}"
    m = min(rec["min_router_margin"])
    if not m >= MARGIN_MIN:
        return f"min router margin {m:.3g} < {MARGIN_MIN}"
    used = (rec["router_counts"][0][:, :E] > 0).sum(dim=1)
    if used.min().item() < 3:
        return f"step-1 real experts used per layer {used.tolist()}"
    for s in range(STEPS):
        if not torch.equal(rec["choices"][s], rec64["choices"][s]):
            return f"float64 re-run routes differently at step {s + 1}"
    return None


# --------------------------------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------------------------------


def write_case(out_dir: str, base: ZayaForCausalLM, batches: torch.Tensor, rec: dict, rec64: dict, seed, rejected):
    case_dir = os.path.join(out_dir, "optim")
    if os.path.isdir(case_dir):
        shutil.rmtree(case_dir)
    os.makedirs(case_dir)
    base.save_pretrained(case_dir, safe_serialization=True)
    with safe_open(os.path.join(case_dir, "model.safetensors"), "pt") as f:
        keys = set(f.keys())
        assert all(f.get_slice(k).get_dtype() == "F32" for k in keys)
    expected = set(base.state_dict()) - {"lm_head.weight"}
    assert keys == expected, keys ^ expected

    L, E = base.config.num_hidden_layers, base.config.num_experts
    tensors = {
        "batches": batches.to(torch.float32).contiguous(),
        "losses": torch.tensor(rec["losses"], dtype=torch.float32),
        "grad_norm": torch.tensor(rec["grad_norm"], dtype=torch.float32),
        "lr": torch.tensor(rec["lr"], dtype=torch.float32),
        "router_counts": torch.stack(rec["router_counts"]).to(torch.float32).contiguous(),
        "min_router_margin": torch.tensor(rec["min_router_margin"], dtype=torch.float32),
    }
    for n, t in rec["final"].items():
        tensors[f"final.{n}"] = t.to(torch.float32).contiguous()
    save_file(tensors, os.path.join(case_dir, "golden.safetensors"), metadata={"format": "pt"})

    # float32 vs float64 re-run
    rel = {}
    for n, t in rec["final"].items():
        t64 = rec64["final"][n]
        d = (t.double() - t64).norm().item()
        den = (t64 - base_tensor(base, n)).norm().item()  # relative to the change over training
        rel[n] = (d, (t.double() - t64).abs().max().item(), den)
    worst = max(rel, key=lambda n: rel[n][0] / max(rel[n][2], 1e-30))
    fp64 = {
        "losses_f64": rec64["losses"],
        "max_abs_loss_diff": max(abs(a - b) for a, b in zip(rec["losses"], rec64["losses"])),
        "max_rel_grad_norm_diff": max(abs(a - b) / b for a, b in zip(rec["grad_norm"], rec64["grad_norm"])),
        "final_max_abs_diff": max(v[1] for v in rel.values()),
        "final_worst_rel_diff_of_update": rel[worst][0] / max(rel[worst][2], 1e-30),
        "final_worst_tensor": worst,
        "note": (
            "Same 10 steps re-run with model, Muon (float64 Newton-Schulz), AdamW and controller in float64; the "
            "routing decisions are identical at every step. final_worst_rel_diff_of_update = max over tensors of "
            "||final32 - final64|| / ||final64 - initial||: the precision to expect from an fp32 implementation."
        ),
    }

    cfg = base.config
    meta = {
        "description": (
            "10 training steps of the zaya 'tiny' preset shape with Muon (fp32 Newton-Schulz, match_rms_adamw, each "
            "expert matrix separately) + AdamW, warmup/cosine lr, global-norm clipping 1.0 and the AdamW-driven "
            "balancing-bias controller; see tools/gen_optim_goldens.py's docstring for the exact update formulas."
        ),
        "seed": seed,
        "rejected_seeds": rejected,
        "steps": STEPS,
        "batch": BATCH,
        "seq_len": SEQ,
        "num_layers": cfg.num_hidden_layers,
        "num_experts": cfg.num_experts,
        "data": (
            f"batches[s-1] = tokens of step s; sparse Markov chain over {MARKOV_STATES} random ids in 1..511, "
            f"{MARKOV_SUCCESSORS} uniform successors per id; token 0 never occurs"
        ),
        "init": "gen_goldens.init_params (router_std 2.0, balancing biases U(-0.05,0.05), skip slot -1), F32",
        "loss": "HF ZayaForCausalLM loss: mean next-token cross entropy over all B*(T-1) positions, labels = input_ids",
        "losses": rec["losses"],
        "lr": rec["lr"],
        "grad_norm_preclip": rec["grad_norm"],
        "min_router_margin_per_step": rec["min_router_margin"],
        "min_router_margin": min(rec["min_router_margin"]),
        "router_counts_per_step": [c.tolist() for c in rec["router_counts"]],
        "schedule": {
            "peak_lr": PEAK_LR,
            "warmup_steps": WARMUP,
            "total_steps": STEPS,
            "min_lr": MIN_LR,
            "formula": (
                "lr(s) = peak*s/warmup for s <= warmup, else min_lr + 0.5*(peak-min_lr)*(1+cos(pi*(s-warmup)/"
                "(total-warmup))), s = 1..total; shared by Muon and AdamW (Muon adjusts it per matrix)"
            ),
        },
        "grad_clip": {
            "max_norm": CLIP,
            "norm_type": 2.0,
            "rule": "torch.nn.utils.clip_grad_norm_: total = global L2 norm over all trainable params (tied "
            "embedding once); g *= min(1, max_norm/(total+1e-6)); applied before both optimizer steps",
        },
        "muon": {
            "impl": "torch.optim.Muon (torch/optim/_muon.py) with _zeropower_via_newtonschulz replaced by the same "
            "iteration in float32 (torch's casts to bfloat16)",
            "lr": "lr(s)",
            **{k: (list(v) if isinstance(v, tuple) else v) for k, v in MUON.items()},
            "params": "every 2-D weight except model.embed_tokens.weight / lm_head.weight: q_proj, k_proj, "
            "v_proj_current, v_proj_delayed, o_proj, router down_proj/fc1/fc2/out_proj weights, each expert "
            "gate_up_proj[e] [2I,D] and down_proj[e] [D,I] as a separate matrix",
            "update": (
                "buf = mu*buf + (1-mu)*G; U = (1-mu)*G + mu*buf (nesterov); X = U (transposed if rows > cols); "
                "X /= max(||X||_F, eps); 5x: M = X X^T, X = a*X + (b*M + c*M M) X; O = X (transposed back); "
                "W *= 1 - lr*wd; W -= lr*0.2*sqrt(max(rows, cols))*O"
            ),
            "num_matrices": rec["n_muon"],
        },
        "adamw": {
            "impl": "torch.optim.AdamW, foreach=False",
            "lr": "lr(s)",
            "betas": list(ADAMW_BETAS),
            "eps": ADAMW_EPS,
            "weight_decay": {
                "model.embed_tokens.weight (tied lm_head)": EMBED_WD,
                "all 1-D params and the 3-D conv_qk_* kernels": 0.0,
            },
            "update": (
                "W *= 1 - lr*wd; m = b1*m + (1-b1)*G; v = b2*v + (1-b2)*G^2; "
                "W -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)"
            ),
            "num_tensors_wd": rec["n_adamw_wd"],
            "num_tensors_no_wd": rec["n_adamw_no_wd"],
        },
        "param_groups": rec["groups"],
        "balancing_bias_controller": {
            "when": "after the Muon/AdamW steps of every step, from the counts of that step's forward pass",
            "counts": "top-1 class (argmax(softmax(router logits) + balancing_biases), E+1 classes, class E = skip) "
            "of every token of the batch (all B*T positions), per layer",
            "error": "counts/(B*T) - target; target = 1/E for real experts, 0 for the skip slot",
            "optimizer": {
                "impl": "torch.optim.AdamW on the balancing_biases buffers (no autograd), error as the gradient",
                "lr": BIAS_LR,
                "betas": list(BIAS_BETAS),
                "eps": BIAS_EPS,
                "weight_decay": BIAS_WD,
            },
        },
        "grads": "every parameter has a gradient every step (an unused expert's is all zeros), so weight decay and "
        "momentum/Adam state updates apply to all parameters at every step",
        "fp64_rerun": fp64,
        "attn_implementation": "eager",
        "experts_implementation": "eager",
        "compute_dtype": "float32",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    with open(os.path.join(case_dir, "meta.json"), "w") as fh:
        json.dump(meta, fh, indent=2)
        fh.write("\n")
    for f in os.listdir(case_dir):
        os.chmod(os.path.join(case_dir, f), 0o644)
    return case_dir


def base_tensor(base: ZayaForCausalLM, name: str) -> torch.Tensor:
    sd = base.state_dict()
    return sd[name].double()


def self_check(case_dir: str, rec: dict) -> float:
    """Reload the stored initial model and batches, re-run the 10 steps, compare with the stored final tensors."""
    model, info = ZayaForCausalLM.from_pretrained(
        case_dir, dtype=torch.float32, attn_implementation="eager", experts_implementation="eager",
        output_loading_info=True,
    )
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        assert not info[k], (k, info[k])
    file_sd = load_file(os.path.join(case_dir, "model.safetensors"))
    msd = model.state_dict()
    for k, v in file_sd.items():
        assert torch.equal(msd[k], v), f"{k} not round-tripped by from_pretrained"
    with torch.no_grad():  # fresh, aligned memory (see gen_goldens.self_check)
        for p in model.parameters():
            p.data = p.data.clone()
        for b in model.buffers():
            b.data = b.data.clone()
    assert model.lm_head.weight is model.model.embed_tokens.weight
    golden = load_file(os.path.join(case_dir, "golden.safetensors"))
    batches = golden["batches"].to(torch.long)
    rec2 = train(model, batches)
    assert rec2["losses"] == rec["losses"], (rec2["losses"], rec["losses"])
    diff = 0.0
    for n, t in rec2["final"].items():
        diff = max(diff, (t - golden[f"final.{n}"]).abs().max().item())
    assert set(f"final.{n}" for n in rec2["final"]) == {k for k in golden if k.startswith("final.")}
    assert diff <= SELFCHECK_TOL, f"self-check: re-run final parameters differ by {diff}"
    return diff


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="tests/golden", help="output directory (default: tests/golden)")
    ap.add_argument("--verbose", action="store_true", help="print why draws were rejected")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch_muon._zeropower_via_newtonschulz = _zeropower_via_newtonschulz_fp32
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, numpy {np.__version__}")

    rejected = []
    for attempt in range(MAX_TRIES):
        seed = BASE_SEED + attempt
        base, batches = build(seed)
        rec = train(base, batches)
        rec64 = train(base, batches, torch.float64)
        reason = acceptable(rec, rec64, base.config.num_experts)
        if reason is None:
            break
        rejected.append(seed)
        if args.verbose:
            print(f"  seed {seed} rejected: {reason}")
    else:
        raise SystemExit(f"no acceptable draw in {MAX_TRIES} tries")

    check_split_identity(base, batches[0])
    os.makedirs(args.out, exist_ok=True)
    case_dir = write_case(args.out, base, batches, rec, rec64, seed, rejected)
    diff = self_check(case_dir, rec)
    with open(os.path.join(case_dir, "meta.json")) as fh:
        meta = json.load(fh)

    print(f"optim seed={seed} ({len(rejected)} earlier draws rejected); self-check max diff {diff:.1e}")
    print(f"  Muon matrices {rec['n_muon']}, AdamW tensors wd {rec['n_adamw_wd']} / no wd {rec['n_adamw_no_wd']}")
    for s in range(STEPS):
        print(
            f"  step {s + 1:2d} lr {rec['lr'][s]:.6f} loss {rec['losses'][s]:.5f} grad_norm {rec['grad_norm'][s]:.4f} "
            f"min_margin {rec['min_router_margin'][s]:.3g} counts {rec['router_counts'][s].tolist()}"
        )
    fp = meta["fp64_rerun"]
    print(
        f"  min router margin over all steps {min(rec['min_router_margin']):.4g}; fp64 re-run: max |loss diff| "
        f"{fp['max_abs_loss_diff']:.2e}, final max |diff| {fp['final_max_abs_diff']:.2e}, worst relative-to-update "
        f"{fp['final_worst_rel_diff_of_update']:.2e} ({fp['final_worst_tensor']})"
    )
    fb = {k: v.tolist() for k, v in rec["final"].items() if k.endswith("balancing_biases")}
    print(f"  final balancing biases {fb}")
    sizes = {f: os.path.getsize(os.path.join(case_dir, f)) for f in sorted(os.listdir(case_dir))}
    print("  files: " + ", ".join(f"{f}={s}" for f, s in sizes.items()) + f"  total={sum(sizes.values())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
