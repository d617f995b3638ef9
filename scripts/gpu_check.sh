#!/usr/bin/env bash
# The one script to run on the GPU machine (device tool), from the repository root, after scripts/gpu_bundle.sh
# has filled build-gpu/ here and the device tool carried it:  bash scripts/gpu_check.sh
# Runs every CUDA op (and the whole model, forward and backward) against its CPU twin, then zaya_cuda_bench (the
# GPU's bf16/fp32 matrix rate and HBM copy bandwidth, and the attention (fp32, bf16), grouped experts (bf16),
# Newton–Schulz and LM-head kernels at ZAYA1-8B shapes), then `zaya train` for 20 steps on the CPU and on the GPU (fp32 and bf16 matmuls) from the same seed and
# data, `zaya bench train --device cuda` on the ~1B preset, `zaya generate --device cuda` against the CPU (the same
# ids, greedy and sampled), and `zaya bench decode --device cuda` (batch-1 decode tokens/s against the HBM bound, then
# batch 1 again without programmatic dependent launch, and 8 sequences stepped together) at ZAYA1-8B shapes with
# random bf16 weights; prints a compact table last.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
[[ -x build-gpu/zaya_cuda_tests ]] || { echo "gpu_check: build-gpu/ missing: run scripts/gpu_bundle.sh here first" >&2; exit 1; }
# cuBLASLt: the CUDA toolkit's, or the one PyTorch's wheels bring.
libs=build-gpu/lib
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib; do [[ -d $d ]] && libs="$libs:$d"; done
torch_nvidia=$(python3 -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))' 2>/dev/null || true)
if [[ -n $torch_nvidia ]]; then
    for d in "$torch_nvidia"/nvidia/*/lib "$torch_nvidia"/nvidia/cu*/lib; do [[ -d $d ]] && libs="$libs:$d"; done
fi
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
start=$(date +%s)
# The op tests one suite per process: a kernel fault leaves its CUDA context unusable (and a crash writes no JSON),
# so it costs that suite alone, not every test after it. Each suite's exit code lands beside its JSON.
rc=0
rm -rf "$out/cuda_ops" && mkdir -p "$out/cuda_ops"
for suite in $(build-gpu/zaya_cuda_tests --gtest_list_tests | grep -E '^[A-Za-z].*\.$'); do
    name=${suite%.}
    name=${name//\//_}
    timeout 120 build-gpu/zaya_cuda_tests --gtest_filter="$suite*" --gtest_brief=1 \
        --gtest_output=json:"$out/cuda_ops/$name.json" 2>&1 | tail -20
    code=${PIPESTATUS[0]}
    echo "$code" >"$out/cuda_ops/$name.rc"
    [[ $code -eq 0 ]] || { rc=1; echo "gpu_check: op tests $suite exited with $code"; }
done
echo "== benchmarks (matrix rate, HBM, kernels at ZAYA1-8B shapes)"
if [[ -x build-gpu/zaya_cuda_bench ]]; then
    timeout 180 build-gpu/zaya_cuda_bench | tee "$out/cuda_bench.jsonl"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
echo "== zaya on the GPU: 20-step training parity (CPU vs CUDA) and training speed (~1B preset)"
if [[ -x build-gpu/zaya && -f build-gpu/zaya-libs.tar.xz ]]; then
    python3 -c 'import tarfile, sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' build-gpu/zaya-libs.tar.xz /tmp
    zaya=(env LD_LIBRARY_PATH="/tmp/zaya-libs:$LD_LIBRARY_PATH" build-gpu/zaya)
    common=(--data build-gpu/data/pydocs --model small --steps 20 --batch 8 --seq 256 --warmup 5 --eval-every 0
            --eval-batches 2 --sample-tokens 0)
    for run in "cpu fp32" "cuda fp32" "cuda bf16"; do
        set -- $run
        rm -rf "$out/parity_$1_$2"
        timeout 150 "${zaya[@]}" train "${common[@]}" --device "$1" --precision "$2" --out "$out/parity_$1_$2" 2>&1 | tail -3
        [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    done
    # 16 micro-batches of 8 × 2048 tokens a step (262k tokens): Muon's Newton–Schulz on the experts (~34 TFLOP a
    # step at this preset, more than a micro-batch's forward + backward) is paid once per step, as in training with a
    # large global batch (ZAYA1's was 16M tokens), not once per 16k tokens.
    timeout 240 "${zaya[@]}" bench train --device cuda --model 1b --batch 128 --micro-batch 8 --seq 2048 \
        --precision bf16 --iters 3 --phases --json \
        | tee "$out/train_bench.json"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
    # Generation through the engine on the GPU (greedy: argmax on the device; sampled: logits downloaded) against
    # the CPU, same random f32 weights: the ids should agree (fp32 on both sides).
    for mode in "greedy --temperature 0" "sampled --temperature 0.8 --seed 5"; do
        set -- $mode
        name=$1
        shift
        for dev in cpu cuda; do
            timeout 60 "${zaya[@]}" generate small --dtype f32 --tokens 2,40,7,99,512 -n 48 --print-ids -q "$@" \
                --device "$dev" >"$out/generate_${dev}_$name.ids" 2>&1 || rc=1
        done
    done
    timeout 300 "${zaya[@]}" bench decode --device cuda --model zaya1-8b --dtype bf16 --prompt-tokens 128 \
        --new-tokens 64 --seqs 8 --json | tee "$out/decode_bench.json"
    [[ ${PIPESTATUS[0]} -eq 0 ]] || rc=1
fi
echo
echo "== zaya gpu_check ($(($(date +%s) - start)) s)"
python3 - "$out/cuda_ops" "$out/cuda_bench.jsonl" "$out" <<'PY'
import glob, json, os, sys
print(f"{'check':45s} {'result':8s} time")
for rc_path in sorted(glob.glob(os.path.join(sys.argv[1], "*.rc"))):
    name, code = os.path.basename(rc_path)[:-3], open(rc_path).read().strip()
    try:
        r = json.load(open(rc_path[:-3] + ".json"))
        for suite in r["testsuites"]:
            for t in suite["testsuite"]:
                res = "FAILED" if t.get("failures") else ("skipped" if t.get("result") == "SKIPPED" else "ok")
                print(f"{suite['name'] + '.' + t['name']:45s} {res:8s} {t['time']}")
    except Exception as e:
        print(f"{'op tests ' + name:45s} {'FAILED':8s} exit code {code}, no result ({e})")
try:
    for line in open(sys.argv[2]):
        b = json.loads(line)
        name = b.pop("bench")
        print(f"{'bench ' + name:45s} " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in b.items()))
except Exception as e:
    print(f"benchmarks: no result ({e})")
out = sys.argv[3]
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
        continue
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    res = "ok" if worst <= tol else "FAILED"
    print(f"{label:45s} {res:8s} max rel loss diff {worst:.2e} (≤ {tol:g}); final loss {got[-1]:.4f} vs {ref[-1]:.4f};"
          f" val {val[-1] if val else float('nan'):.4f} vs {ref_val[-1] if ref_val else float('nan'):.4f}")
try:
    b = json.load(open(os.path.join(out, "train_bench.json")))
    label = f"train step 1b bf16 ({b['batch']}×{b['seq']} tokens, micro {b['micro_batch']})"
    print(f"{label:45s} {'':8s} {b['median_step_s']:.3f} s, "
          f"{b['tokens_per_s']:.0f} tok/s, MFU {100 * b['mfu_989']:.1f}% of 989 TFLOP/s; fwd+bwd alone "
          f"{b['median_fwd_bwd_s']:.3f} s = MFU {100 * b['mfu_fwd_bwd_989']:.1f}%")
    # Device time by phase of one more step (Backend::phase: events in stream order), the largest first.
    phases = sorted(b.get("phases", []), key=lambda p: -p["seconds"])
    timed = sum(p["seconds"] for p in phases) or 1.0
    for i in range(0, min(len(phases), 16), 4):
        print("  " + "   ".join(f"{p['phase']} {1e3 * p['seconds']:.1f} ms ({100 * p['seconds'] / timed:.0f}%)"
                               for p in phases[i:i + 4]))
except Exception as e:
    print(f"train speed: no result ({e})")
import glob
for cpu_path in sorted(glob.glob(os.path.join(out, "generate_cpu_*.ids"))):
    gpu_path = cpu_path.replace("generate_cpu_", "generate_cuda_")
    label = "generate small f32 cuda vs cpu, " + os.path.basename(cpu_path)[13:-4]
    a = open(cpu_path).read().strip()
    b = open(gpu_path).read().strip() if os.path.exists(gpu_path) else "(no output)"
    if a == b and a:
        print(f"{label:45s} {'ok':8s} the same {len(a.split(','))} ids")
    else:
        ia, ib = a.split(","), b.split(",")
        first = next((i for i, (x, y) in enumerate(zip(ia, ib)) if x != y), min(len(ia), len(ib)))
        print(f"{label:45s} {'FAILED':8s} first difference at token {first}: cpu {a[:60]} | cuda {b[:60]}")
try:
    b = json.load(open(os.path.join(out, "decode_bench.json")))
    res = "ok" if b["fraction_of_bound"] >= 0.6 else "below"
    print(f"{'decode zaya1-8b bf16 batch 1 vs HBM bound':45s} {res:8s} {b['decode_tokens_per_s']:.1f} tok/s = "
          f"{100 * b['fraction_of_bound']:.0f}% of {b['bound_tokens_per_s']:.1f} (goal ≥ 60%; "
          f"{b['weight_bytes_per_token'] / 1e9:.2f} GB/token ÷ {b['read_bandwidth_bytes_per_s'] / 1e12:.2f} TB/s); "
          f"prefill {b['prefill_tokens_per_s']:.0f} tok/s; with logits downloaded {b['decode_with_logits_tokens_per_s']:.1f} "
          f"tok/s; {b['step_kernels']} kernels per step")
    print(f"{'decode zaya1-8b bf16, 8 sequences together':45s} {'':8s} {b['batch_decode_tokens_per_s']:.1f} tok/s in all "
          f"({1e3 * b['batch_step_s']:.3f} ms a step; {b['batch_decode_tokens_per_s'] / b['decode_tokens_per_s']:.2f}× batch 1)")
    if b["dependent_launch"]:
        plain = b["decode_without_pdl_tokens_per_s"]
        print(f"{'decode zaya1-8b bf16 batch 1 without PDL':45s} {'':8s} {plain:.1f} tok/s = "
              f"{100 * plain / b['bound_tokens_per_s']:.0f}% of bound (PDL: {b['decode_tokens_per_s'] / plain:.2f}×)")
except Exception as e:
    print(f"decode speed: no result ({e})")
PY
exit "$rc"
