#!/usr/bin/env bash
# The Trainer's device path end to end, with the CUDA kernels emulated on the CPU (zaya_emu, tests/cuda_emu): the
# same 3 training steps and validation with --device cpu and --device cuda must give the same losses (fp32 on both
# sides; Newton–Schulz in bf16 may round a few elements differently), a run resumed from a device checkpoint must
# match an uninterrupted one, and `grads --device cuda` give the same loss. Exercises what no op test does: parameters
# staying on the device with the optimizer there, routing choices and balancing biases crossing, host copies synced
# for checkpoints and restored on resume.
#
# Usage: test_device_emu.sh ZAYA_EMU_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
export OMP_NUM_THREADS=1

mkdir -p "$tmp/corpus"
for i in $(seq 1 40); do
    printf 'Document %d. The quick brown fox jumps over the lazy dog %d times.\nPython is a programming language.\n' \
        "$i" "$i" >"$tmp/corpus/doc$i.txt"
done
expect_ok "prepare a small corpus" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400
for device in cpu cuda; do
    expect_ok "train tiny 3 steps --device $device" train --data "$tmp/data" --out "$tmp/run_$device" --model tiny \
        --steps 3 --batch 2 --seq 24 --warmup 1 --eval-every 0 --eval-batches 1 --sample-tokens 0 --device "$device"
done
[[ $out == *"device cuda"* ]] && pass "train names the device" || fail "train names the device" "stdout: $out"
compare=$(python3 - "$tmp/run_cpu/metrics.jsonl" "$tmp/run_cuda/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
keys = [(k, i) for i, r in enumerate(a) for k in ("loss", "val_loss", "grad_norm") if k in r]
worst = max(abs(b[i][k] - a[i][k]) / abs(a[i][k]) for k, i in keys) if len(a) == len(b) == 4 else float("inf")
print(f"{worst:.3g}")
PY
)
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-4 else 1)" "$compare" &&
    pass "cuda losses, grad norms and val_loss match the cpu run (max rel diff $compare)" ||
    fail "cuda losses, grad norms and val_loss match the cpu run" "max rel diff $compare" \
        "$(cat "$tmp/run_cpu/metrics.jsonl" "$tmp/run_cuda/metrics.jsonl")"

# Checkpoint and resume on the device: 2 steps, stop with a checkpoint, resume to 4 — the same steps 3 and 4 as an
# uninterrupted run (host copies of parameters and optimizer state downloaded for the save, uploaded on resume).
dev_args=(--data "$tmp/data" --model tiny --steps 4 --batch 2 --seq 24 --warmup 1 --eval-every 0 --eval-batches 1
          --sample-tokens 0 --device cuda --ckpt-every 2)
expect_ok "train 4 steps on the device" train "${dev_args[@]}" --out "$tmp/straight"
expect_ok "train 2 steps on the device, then stop" train "${dev_args[@]}" --out "$tmp/resumed" --stop-after 2
expect_ok "resume on the device" train "${dev_args[@]}" --out "$tmp/resumed" --resume
steps_of() { grep '"loss"' "$1" | python3 -c 'import json,sys; [print(json.loads(l)["step"], repr(json.loads(l)["loss"])) for l in sys.stdin]'; }
[[ $(steps_of "$tmp/straight/metrics.jsonl" | tail -2) == $(steps_of "$tmp/resumed/metrics.jsonl" | tail -2) ]] &&
    pass "resumed device run: steps 3 and 4 bit-identical to the uninterrupted run" ||
    fail "resumed device run: steps 3 and 4 bit-identical to the uninterrupted run" \
        "$(steps_of "$tmp/straight/metrics.jsonl")" "$(steps_of "$tmp/resumed/metrics.jsonl")"

expect_ok "grads --device cpu" grads tiny --tokens "5,17,3,99,4;8,8,2" --out "$tmp/g_cpu.st"
cpu_loss=$out
expect_ok "grads --device cuda" grads tiny --tokens "5,17,3,99,4;8,8,2" --out "$tmp/g_cuda.st" --device cuda
[[ $out == "$cpu_loss" ]] && pass "grads: the same loss on both devices ($out)" ||
    fail "grads: the same loss on both devices" "cpu: $cpu_loss" "cuda: $out"
expect_error "an unknown device is named" "^zaya: error: .*'tpu'" forward tiny --tokens 1,2 --out "$tmp/f.st" \
    --device tpu

echo "test_device_emu: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
