#!/usr/bin/env bash
# The Trainer's device path end to end, with the CUDA kernels emulated on the CPU (zaya_emu, tests/cuda_emu): the
# same 3 training steps and validation with --device cpu and --device cuda must give the same losses (fp32 on both
# sides; Newton–Schulz in bf16 may round a few elements differently), a run resumed from a device checkpoint must
# match an uninterrupted one, training on fine-tuning data (loss masks, unequal micro-batches) and with --pack
# documents --doc-mask matches too, and `grads --device cuda` and `eval --device cuda` give the same loss. Exercises what no op test
# does: parameters staying on the device with the optimizer there, routing choices and balancing biases crossing,
# host copies synced for checkpoints and restored on resume; and under bf16 matmuls, the weights' bf16 copies kept
# through a step only. With mpirun: 2 data-parallel ranks on each device, over MPI and over NCCL (its stand-in).
# Last, the speed rows of scripts/gpu_check.sh as its table reads them (bench train/decode on the device).
#
# Usage: test_device_emu.sh ZAYA_EMU_BINARY SOURCE_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/corpus.sh"
export OMP_NUM_THREADS=1

make_corpus "$tmp/corpus" 40
expect_ok "prepare a small corpus" prepare --input "$tmp/corpus" --out "$tmp/data" --vocab-size 400
# 3 steps on each device (checkpoints at 2 and 3), then the device run again, stopped at its step-2 checkpoint and
# resumed: the emulated kernels are slow, so one set of runs serves every check.
args=(--data "$tmp/data" --model tiny --steps 3 --batch 2 --seq 16 --warmup 1 --eval-every 0 --eval-batches 1
      --sample-tokens 0 --ckpt-every 2)
for device in cpu cuda; do
    expect_ok "train tiny 3 steps --device $device" train "${args[@]}" --out "$tmp/run_$device" --device "$device"
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
# Newton–Schulz rounds to bf16 at torch's points on both sides, but its fp32 accumulation order differs (oneDNN
# here, the emulator's GEMM there), so a few elements round the other way: measured ~1e-5 on the losses, ~1e-4 on
# the gradient norm after 3 updates. A device bug (stale parameters, a lost update) moves them by far more.
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$compare" &&
    pass "cuda losses, grad norms and val_loss match the cpu run (max rel diff $compare)" ||
    fail "cuda losses, grad norms and val_loss match the cpu run" "max rel diff $compare" \
        "$(cat "$tmp/run_cpu/metrics.jsonl" "$tmp/run_cuda/metrics.jsonl")"

# bf16 matmuls (--precision bf16) with 2 micro-batches a step: the GPU keeps each matrix's bf16 copy through a step's
# micro-batches and converts afresh after the update. Both devices round the same operands to bf16 (the CCA conv's
# too), so only the summation order differs: measured ~4e-5 on the losses and ~4e-4 on the gradient norms. Weights
# converted once and never again (a copy kept past its step) move them by ~1.5e-3 and ~4e-2 from step 2 on.
bf16=(--data "$tmp/data" --model tiny --steps 3 --batch 4 --micro-batch 2 --seq 16 --warmup 1 --eval-every 0
      --eval-batches 1 --sample-tokens 0 --precision bf16)
for device in cpu cuda; do
    expect_ok "train tiny bf16, 2 micro-batches a step --device $device" train "${bf16[@]}" --out "$tmp/bf16_$device" \
        --device "$device"
done
compare=$(python3 - "$tmp/bf16_cpu/metrics.jsonl" "$tmp/bf16_cuda/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
def worst(key):
    pairs = [(r[key], s[key]) for r, s in zip(a, b) if key in r and key in s]
    return max(abs(y - x) / abs(x) for x, y in pairs) if len(a) == len(b) == 4 and len(pairs) == 3 else float("inf")
print(f"{worst('loss'):.3g} {worst('grad_norm'):.3g}")
PY
)
read -r loss_diff norm_diff <<<"$compare"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 4e-4 and float(sys.argv[2]) <= 5e-3 else 1)" $compare &&
    pass "bf16: cuda losses and grad norms match the cpu run (max rel diff $loss_diff, $norm_diff)" ||
    fail "bf16: cuda losses and grad norms match the cpu run" "max rel diff: loss $loss_diff, grad norm $norm_diff" \
        "$(cat "$tmp/bf16_cpu/metrics.jsonl" "$tmp/bf16_cuda/metrics.jsonl")"

# Checkpoint and resume on the device (host copies of parameters and optimizer state downloaded for the save,
# uploaded on resume): step 3 as in the uninterrupted run, bit for bit.
expect_ok "train 2 steps on the device, then stop" train "${args[@]}" --out "$tmp/resumed" --device cuda --stop-after 2
expect_ok "resume on the device" train "${args[@]}" --out "$tmp/resumed" --device cuda --resume
steps_of() { grep '"loss"' "$1" | python3 -c 'import json,sys; [print(json.loads(l)["step"], repr(json.loads(l)["loss"])) for l in sys.stdin]'; }
[[ $(steps_of "$tmp/run_cuda/metrics.jsonl" | tail -1) == $(steps_of "$tmp/resumed/metrics.jsonl" | tail -1) ]] &&
    pass "resumed device run: step 3 bit-identical to the uninterrupted run" ||
    fail "resumed device run: step 3 bit-identical to the uninterrupted run" \
        "$(steps_of "$tmp/run_cuda/metrics.jsonl")" "$(steps_of "$tmp/resumed/metrics.jsonl")"

# Data parallel on devices (2 ranks over MPI; the device collectives staged through the host, as any communicator
# but NCCL does; 2 micro-batches a rank): gradients summed and the ZeRO-1 owners' parameters broadcast between the
# "GPUs".
if command -v mpirun >/dev/null 2>&1; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    dp=(--data "$tmp/data" --model tiny --steps 2 --batch 8 --micro-batch 2 --seq 16 --warmup 1 --eval-every 0
        --eval-batches 1 --sample-tokens 0)
    for device in cpu cuda; do
        rc=0
        mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS "$ZAYA" train "${dp[@]}" --out "$tmp/dp_$device" \
            --device "$device" >"$tmp/dp_$device.log" 2>&1 || rc=$?
        [[ $rc -eq 0 ]] && pass "2 ranks --device $device" || fail "2 ranks --device $device" "$(tail -5 "$tmp/dp_$device.log")"
    done
    compare=$(python3 - "$tmp/dp_cpu/metrics.jsonl" "$tmp/dp_cuda/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
keys = [(k, i) for i, r in enumerate(a) for k in ("loss", "val_loss", "grad_norm") if k in r]
print(f"{max(abs(b[i][k] - a[i][k]) / abs(a[i][k]) for k, i in keys) if len(a) == len(b) == 3 else float('inf'):.3g}")
PY
)
    python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 1e-3 else 1)" "$compare" &&
        pass "2 ranks: cuda matches cpu (max rel diff $compare)" ||
        fail "2 ranks: cuda matches cpu" "max rel diff $compare"
    # The same runs over NCCL (ZAYA_COMM=nccl: dist/comm_nccl.cu over the stand-in of tests/cuda_emu/nccl_emu.cpp,
    # which refuses host pointers and mismatched unique ids as a GPU would): on the device, the gradient buckets
    # summed onto their owners and the owners' parameters broadcast in NCCL groups on device memory; on the cpu, the
    # host buffers staged through a device buffer. A sum of two ranks is the same float whoever carries it, so each
    # must equal its MPI run bit for bit.
    for device in cpu cuda; do
        rc=0
        mpirun --oversubscribe -np 2 -x OMP_NUM_THREADS -x ZAYA_COMM=nccl "$ZAYA" train "${dp[@]}" \
            --out "$tmp/nccl_$device" --device "$device" >"$tmp/nccl_$device.log" 2>&1 || rc=$?
        [[ $rc -eq 0 ]] && grep -q "ranks: 2 (nccl)" "$tmp/nccl_$device.log" &&
            pass "2 ranks over NCCL --device $device" ||
            fail "2 ranks over NCCL --device $device" "rc $rc" "$(tail -5 "$tmp/nccl_$device.log")"
        same=$(python3 - "$tmp/dp_$device/metrics.jsonl" "$tmp/nccl_$device/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
keys = ("step", "loss", "val_loss", "grad_norm")
print("yes" if len(a) == len(b) == 3 and all(x.get(k) == y.get(k) for x, y in zip(a, b) for k in keys) else "no")
PY
)
        [[ $same == yes ]] && pass "2 ranks over NCCL --device $device: bit-identical to MPI" ||
            fail "2 ranks over NCCL --device $device: bit-identical to MPI" \
                "$(cat "$tmp/dp_$device/metrics.jsonl")" "$(cat "$tmp/nccl_$device/metrics.jsonl")"
    done
    # 3 ranks on the device (3 owners, 3 roots; a checkpoint at step 2): a sum of three may be added in another
    # order by MPI's reduction than by the stand-in's, so within 1e-6 of MPI's run (a part summed onto the wrong
    # owner, or broadcast from the wrong root, moves the losses by ~1e-2).
    dp3=(--data "$tmp/data" --model tiny --steps 3 --batch 6 --micro-batch 2 --seq 16 --warmup 1 --eval-every 0
         --eval-batches 1 --sample-tokens 0 --ckpt-every 2 --device cuda)
    for c in auto nccl; do
        mpirun --oversubscribe -np 3 -x OMP_NUM_THREADS -x ZAYA_COMM=$c "$ZAYA" train "${dp3[@]}" --out "$tmp/dp3_$c" \
            >"$tmp/dp3_$c.log" 2>&1 || fail "3 ranks --device cuda, ZAYA_COMM=$c" "$(tail -5 "$tmp/dp3_$c.log")"
    done
    diff3=$(max_rel_diff "$tmp/dp3_auto/metrics.jsonl" "$tmp/dp3_nccl/metrics.jsonl" 2>&1 || true)
    within "${diff3:-inf}" 1e-6 2>/dev/null && grep -q "ranks: 3 (nccl)" "$tmp/dp3_nccl.log" &&
        pass "3 ranks over NCCL --device cuda: the MPI run's losses (max rel diff $diff3)" ||
        fail "3 ranks over NCCL --device cuda: the MPI run's losses" "$diff3"
else
    echo "skip    data parallel on devices: mpirun not installed"
fi

expect_ok "grads --device cpu" grads tiny --tokens "5,17,3,99,4;8,8,2" --out "$tmp/g_cpu.st"
cpu_loss=$out
expect_ok "grads --device cuda" grads tiny --tokens "5,17,3,99,4;8,8,2" --out "$tmp/g_cuda.st" --device cuda
[[ $out == "$cpu_loss" ]] && pass "grads: the same loss on both devices ($out)" ||
    fail "grads: the same loss on both devices" "cpu: $cpu_loss" "cuda: $out"
# zaya eval on the device: the validation loss of the cpu run's model (fp32 on both, and bf16 matmuls, whose bf16
# copies of the linears' inputs the device plans for the evaluation's activations).
eval_json=()
for prec in fp32 bf16; do
    for device in cpu cuda; do
        expect_ok "eval --device $device --precision $prec" eval "$tmp/run_cpu/model" --data "$tmp/data" --seq 16 \
            --batch 2 --precision "$prec" --device "$device" --by-position 4 --json
        eval_json[${#eval_json[@]}]=$out
    done
done
python3 - "${eval_json[@]}" <<'PY' && pass "eval: the same loss on both devices (fp32 1e-5, also by position; bf16 1e-3)" ||
import json, sys
f32_cpu, f32_cuda, b16_cpu, b16_cuda = (json.loads(a)["loss"] for a in sys.argv[1:5])
assert abs(f32_cuda - f32_cpu) <= 1e-5 * f32_cpu and abs(b16_cuda - b16_cpu) <= 1e-3 * b16_cpu, sys.argv[1:]
# and the same loss along the sequence (the per-token losses come down from the device)
f32 = [[r["loss"] for r in json.loads(a)["by_position"]] for a in sys.argv[1:3]]
assert all(abs(g - c) <= 1e-5 * c for c, g in zip(*f32)) and len(f32[0]) == 4, f32
PY
    fail "eval: the same loss on both devices" "${eval_json[@]}"
# Multiple choice on the device: each choice's log-likelihood from the per-token losses the device leaves, packed
# several choices a pass (--batch-tokens 48): the same accuracies and tokens as the cpu's.
python3 - "$tmp/mc.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(1, 7):
        f.write(json.dumps({"context": f"Document {i}. The quick brown", "choices": [" fox jumps", " dog", " Python"],
                            "answer": i % 3}) + "\n")
PY
mc_json=()
for device in cpu cuda; do
    expect_ok "eval --choices --device $device" eval "$tmp/run_cpu/model" --choices "$tmp/mc.jsonl" --batch-tokens 48 \
        --device "$device" --json --out "$tmp/mc_$device.jsonl"
    mc_json[${#mc_json[@]}]=$out
done
mc_diff=$(python3 - "${mc_json[@]}" "$tmp/mc_cpu.jsonl" "$tmp/mc_cuda.jsonl" <<'PY' 2>&1
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:3])
assert a["items"] == b["items"] == 6 and a["tokens"] == b["tokens"], (a, b)
assert (a["acc"], a["acc_norm"]) == (b["acc"], b["acc_norm"]), (a, b)
x, y = ([json.loads(l) for l in open(p)] for p in sys.argv[3:5])
diff = max(abs(u - v) / abs(u) for i, j in zip(x, y) for u, v in zip(i["loglik"], j["loglik"]))
assert len(x) == len(y) == 6 and diff < 1e-5, diff
print(f"{diff:.2g}")
PY
) && pass "eval --choices: the same accuracies and log-likelihoods on both devices (max rel diff $mc_diff)" ||
    fail "eval --choices: the same accuracies and log-likelihoods on both devices" "$mc_diff" "${mc_json[@]}"
# Generation on the device (eval --generate: every item submitted at once, so the engine feeds the four prompts in
# one step, on the GPU one prefill pass of four slots): each completion what the cpu gives.
python3 - "$tmp/gen.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i, text in enumerate(["The quick brown", "Document 3.", "A", "The quick brown fox jumps over the lazy dog"]):
        f.write(json.dumps({"prompt": text, "answer": "x"}) + "\n")
PY
for device in cpu cuda; do
    expect_ok "eval --generate --device $device" eval "$tmp/run_cpu/model" --generate "$tmp/gen.jsonl" --batch 4 \
        --max-tokens 5 --device "$device" --json --out "$tmp/gen_$device.jsonl"
done
[[ $(wc -l <"$tmp/gen_cpu.jsonl") == 4 ]] && cmp -s "$tmp/gen_cpu.jsonl" "$tmp/gen_cuda.jsonl" &&
    pass "eval --generate: four prompts fed together on the device complete as on the cpu" ||
    fail "eval --generate: four prompts fed together on the device complete as on the cpu" \
        "$(cat "$tmp/gen_cpu.jsonl")" "$(cat "$tmp/gen_cuda.jsonl")"
# Fine-tuning data (loss masks): 2 micro-batches a step holding unequal counts of learned targets, each scaled by its
# share of the step's; the LM head skips the prompts' targets on the device as on the CPU. Newton–Schulz in bf16
# on both (the device has no fp32 one): measured ~6e-5 apart after the update.
python3 - "$tmp/chats.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(40):
        answer = "Yes." if i % 2 else f"Document {i} is about the quick brown fox, {i * 7} times."
        f.write(json.dumps({"messages": [{"role": "user", "content": f"Tell me about document {i}."},
                                         {"role": "assistant", "content": answer}]}) + "\n")
PY
expect_ok "prepare chats (loss masks)" prepare --input "$tmp/chats.jsonl" --out "$tmp/chats" \
    --tokenizer "$tmp/data/tokenizer.model"
for device in cpu cuda; do
    expect_ok "train tiny on chats, 2 micro-batches a step --device $device" train --data "$tmp/chats" --model tiny \
        --steps 2 --batch 2 --micro-batch 1 --seq 32 --warmup 1 --eval-every 2 --eval-batches 2 --sample-tokens 0 \
        --out "$tmp/sft_$device" --device "$device"
done
# And whole documents packed into rows (--pack documents; each row's padding left out of the inputs) with document
# masking (--doc-mask) on the pretraining data, whose short documents put several in a row: rows of unequal
# lengths cut into many short sequences on the device's varlen kernels. (Its first step differs from run_cpu's.)
for device in cpu cuda; do
    expect_ok "train tiny 3 steps --pack documents --doc-mask --device $device" train --data "$tmp/data" \
        --model tiny --steps 3 --batch 2 --seq 48 --warmup 1 --eval-every 0 --eval-batches 1 --sample-tokens 0 \
        --pack documents --doc-mask --out "$tmp/dm_$device" --device "$device"
done
for pair in sft dm; do
    python3 - "$tmp/${pair}_cpu/metrics.jsonl" "$tmp/${pair}_cuda/metrics.jsonl" "$tmp/run_cpu/metrics.jsonl" \
        "$pair" <<'PY' &&
import json, sys
a, b, plain = ([json.loads(l) for l in open(p)] for p in sys.argv[1:4])
assert len(a) == len(b) == (3 if sys.argv[4] == "sft" else 4), (a, b)
worst = max(abs(y[k] - x[k]) / abs(x[k]) for x, y in zip(a, b) for k in ("loss", "val_loss", "grad_norm") if k in x)
print(f"        max rel diff {worst:.2e}")
assert worst <= 1e-3, worst
assert sys.argv[4] == "sft" or abs(a[0]["loss"] - plain[0]["loss"]) > 1e-3, (a[0], plain[0])
PY
        pass "$pair: the same losses, grad norms and val_loss on both devices" ||
        fail "$pair: the same losses on both devices" \
            "$(cat "$tmp/${pair}_cpu/metrics.jsonl" "$tmp/${pair}_cuda/metrics.jsonl")"
done
# Generation on the device (CudaDecoder behind the engine): the same ids as on the CPU, greedy (the argmax taken on
# the device), and sampled with a repetition penalty (the logits downloaded, the host's Sampler) up to the same
# "length" stop at a short --max-context.
gen=(generate tiny --dtype f32 --tokens 5,17,3,99 -n 6 --print-ids)
for mode in "--temperature 0" "--temperature 0.9 --top-k 0 --seed 7 --repetition-penalty 1.3 --max-context 9"; do
    expect_ok "generate $mode --device cpu" "${gen[@]}" $mode -q
    cpu_ids=$out
    expect_ok "generate $mode --device cuda" "${gen[@]}" $mode --device cuda
    [[ $out == "$cpu_ids" && -n $out ]] && pass "generate $mode: the same ids on both devices ($out)" ||
        fail "generate $mode: the same ids on both devices" "cpu: $cpu_ids" "cuda: $out"
done
[[ $err == *"CPU emulation (sm_"* ]] && pass "generate's statistics name the GPU" ||
    fail "generate's statistics name the GPU" "stderr: $err"
# A prompt longer than the decoder's 8-row GEMV passes is prefilled in a GEMM pass (cuBLASLt, grouped experts).
expect_error "generate --speculative-tokens --device cuda is refused, saying it runs on the CPU" \
    "^zaya: error: speculative decoding runs on the CPU" "${gen[@]}" --speculative-tokens 3 --device cuda
expect_error "generate --quantize int8 --device cuda is refused, saying int8 runs on the CPU" \
    "^zaya: error: int8 weights .--quantize int8. run on the CPU only" "${gen[@]}" --quantize int8 --device cuda
long=(generate tiny --dtype f32 --tokens 5,17,3,99,4,8,8,2,100,7,42,42,1,60 -n 6 --print-ids -q --temperature 0)
expect_ok "generate a 14-token prompt --device cpu" "${long[@]}"
cpu_ids=$out
expect_ok "generate a 14-token prompt --device cuda (a GEMM prefill pass)" "${long[@]}" --device cuda
[[ $out == "$cpu_ids" && -n $out ]] && pass "generate a 14-token prompt: the same ids on both devices ($out)" ||
    fail "generate a 14-token prompt: the same ids on both devices" "cpu: $cpu_ids" "cuda: $out"
# The KV cache's element: bf16 by default for a bf16 model, on the device as on the cpu, half the bytes per token of
# --kv-dtype f32 (generate's statistics); both devices' bf16 caches give the same ids.
kv_gen=(generate tiny --dtype bf16 --tokens 5,17,3,99,4,8,8,2,100,7,42,42,1,60 -n 4 --temperature 0 --print-ids
    --device cuda)
expect_ok "generate bf16 --device cuda" "${kv_gen[@]}"
kv_auto=$(grep -oE "KV cache [0-9.]+ KiB/token \([A-Z0-9]+\)" <<<"$err" || true)
gpu_ids=$out
[[ $err == *"MiB (BF16, bf16 inputs)"* ]] && pass "the device's statistics say its bf16 linears take bf16 rows" ||
    fail "the device's statistics say its bf16 linears take bf16 rows" "stderr: $err"
expect_ok "generate bf16 --device cpu" "${kv_gen[@]:0:${#kv_gen[@]}-2}"
kv_cpu=$(grep -oE "KV cache [0-9.]+ KiB/token \([A-Z0-9]+\)" <<<"$err" || true)
[[ $kv_cpu == "KV cache 0.2 KiB/token (BF16)" && $out == "$gpu_ids" && -n $out ]] &&
    pass "a bf16 model's cpu cache is bf16 by default too, with the device's ids ($out)" ||
    fail "a bf16 model's cpu cache is bf16 by default too, with the device's ids" "'$kv_cpu'" "cpu: $out" \
        "cuda: $gpu_ids"
expect_ok "generate bf16 --device cuda --kv-dtype f32" "${kv_gen[@]}" --kv-dtype f32
kv_f32=$(grep -oE "KV cache [0-9.]+ KiB/token \([A-Z0-9]+\)" <<<"$err" || true)
[[ $kv_auto == "KV cache 0.2 KiB/token (BF16)" && $kv_f32 == "KV cache 0.5 KiB/token (F32)" ]] &&
    pass "a bf16 model's device cache is bf16 by default, f32 when asked ($kv_auto; $kv_f32)" ||
    fail "a bf16 model's device cache is bf16 by default, f32 when asked" "default: '$kv_auto'" "f32: '$kv_f32'"
expect_error "--kv-dtype f16 is refused" "^zaya: error: --kv-dtype: f16 not in \\{auto,bf16,f32\\}" \
    generate tiny --tokens 5,17 -n 2 --kv-dtype f16
# The server on the device: three concurrent requests share decode steps (slots of the GPU decoder) and each gets
# the ids `zaya generate --device cpu` gives it alone.
start_server "$tmp/serve.log" tiny --dtype f32 --device cuda --max-batch 3
if [[ -n $port ]]; then
    grep -q "batch ≤ 3" "$tmp/serve.log" && pass "serve --device cuda: 3 slots" || fail "serve --device cuda: 3 slots" "$(head -2 "$tmp/serve.log")"
    grep -q "prompts fed 2048 tokens per step" "$tmp/serve.log" && pass "serve --device cuda: one GEMM pass per prompt step" ||
        fail "serve --device cuda: one GEMM pass per prompt step" "$(head -1 "$tmp/serve.log")"
    prompts=("5,17,3,99" "8,8,2" "100,7,42,42,1,5,17,3,99,4,8,8,2") # the third prefilled in a GEMM pass
    for i in 0 1 2; do
        curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"prompt\":[${prompts[$i]}],\"max_tokens\":4,\"temperature\":0}" >"$tmp/gpu_serve.$i" &
    done
    wait $(jobs -p | grep -v "^$server$") 2>/dev/null
    seen=$(curl -s "http://127.0.0.1:$port/health" | python3 -c 'import json,sys; print(json.load(sys.stdin)["max_batch_seen"])')
    [[ $seen -ge 2 ]] && pass "serve --device cuda: concurrent requests stepped together (batch $seen)" ||
        fail "serve --device cuda: concurrent requests stepped together" "max_batch_seen $seen"
    same=0
    for i in 0 1 2; do
        got=$(python3 -c 'import json,sys; print(",".join(map(str, json.load(open(sys.argv[1]))["choices"][0]["token_ids"])))' "$tmp/gpu_serve.$i" 2>/dev/null)
        alone=$("$ZAYA" generate tiny --dtype f32 --tokens "${prompts[$i]}" -n 4 --temperature 0 --print-ids -q)
        [[ -n $got && $got == "$alone" ]] && same=$((same + 1)) || echo "        request $i: served '$got', alone on the cpu '$alone'"
    done
    [[ $same == 3 ]] && pass "serve --device cuda: 3 concurrent requests = each alone on the cpu" ||
        fail "serve --device cuda: 3 concurrent requests = each alone on the cpu" "$same of 3 equal"
    # Prefix reuse on the device: the 3 slots are held by the finished requests above; a new prompt takes the least
    # recently used one, and its continuation (prompt, answer, more) resumes in that slot, with what `zaya generate
    # --device cpu` gives for the whole prompt.
    req='{"prompt":[61,62,63,64,65,66,67,68,69,70],"max_tokens":4,"temperature":0}'
    first=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$req")
    held=$(python3 -c 'import json,sys; c = json.loads(sys.argv[1])["choices"][0]
print(10 + len(c["token_ids"]) - (c["finish_reason"] == "length"))' "$first")
    ids=61,62,63,64,65,66,67,68,69,70,$(python3 -c 'import json,sys
print(",".join(map(str, json.loads(sys.argv[1])["choices"][0]["token_ids"])))' "$first"),71,72
    next=$(curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":[$ids],\"max_tokens\":4,\"temperature\":0}")
    got=$(python3 -c 'import json,sys; j = json.loads(sys.argv[1])
print(j["usage"]["prompt_tokens_details"]["cached_tokens"], ",".join(map(str, j["choices"][0]["token_ids"])))' "$next")
    alone=$("$ZAYA" generate tiny --dtype f32 --tokens "$ids" -n 4 --temperature 0 --print-ids -q)
    [[ $got == "$held $alone" ]] && pass "serve --device cuda: a continuation resumes its $held tokens in their slot, = the cpu" ||
        fail "serve --device cuda: a continuation resumes in its slot" "got (cached, ids) '$got'" "want '$held $alone'"
    # Prompt scoring on the device (echo + logprobs: the rows of every prefill pass through the LM head), kept to
    # compare with the cpu's below.
    score='{"prompt":[100,7,42,42,1,5,17,3,99,4,8,8,2],"max_tokens":2,"echo":true,"logprobs":3,"temperature":0}'
    curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$score" >"$tmp/score.cuda"
else
    fail "serve --device cuda starts" "$(cat "$tmp/serve.log")"
fi
stop_server
start_server "$tmp/serve_cpu.log" tiny --dtype f32 --device cpu
curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$score" >"$tmp/score.cpu"
stop_server
diff=$(python3 - "$tmp/score.cpu" "$tmp/score.cuda" <<'PY' 2>&1
import json, sys
a, b = (json.load(open(p))["choices"][0]["logprobs"] for p in sys.argv[1:3])
assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 15 and a["token_logprobs"][0] is None
pairs = list(zip(a["token_logprobs"][1:], b["token_logprobs"][1:]))
pairs += [(x[k], y[k]) for x, y in zip(a["top_logprobs"][1:], b["top_logprobs"][1:]) for k in x]
print(f"{max(abs(x - y) for x, y in pairs):.3g}")
PY
)
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 1e-4 else 1)" "$diff" 2>/dev/null &&
    pass "serve --device cuda: echo + logprobs = the cpu server's (15 entries and their top 3, max diff $diff)" ||
    fail "serve --device cuda: echo + logprobs = the cpu server's" "$diff"

# A bf16 model's linears on the device multiply rows rounded to bf16, as the cpu's do by default (--precision
# auto): the generated tokens' log-probabilities and their top 3 (a 5-token prompt: GEMV passes only) agree to the
# last digits. fp32 rows, the device's before (and the cpu's --precision fp32), are ~1e-3 away.
# And a 120-token prompt scored (echo + logprobs: one GEMM pass, its attention on tensor cores over the bf16 KV cache
# with the CPU's power-of-two softmax): its rows' log-probabilities = the cpu's (before the GPU took integer maxima
# there: 91 of 119 more than 1e-4 away, up to 1.4e-3).
steps='{"prompt":[5,17,3,99,4],"max_tokens":6,"logprobs":3,"temperature":0}'
long=$(python3 -c 'import random; random.seed(5); print(",".join(str(random.randrange(4, 400)) for _ in range(120)))')
scored="{\"prompt\":[$long],\"max_tokens\":1,\"echo\":true,\"logprobs\":1,\"temperature\":0}"
for run in cuda cpu "cpu --precision fp32"; do
    # shellcheck disable=SC2086 # "cpu --precision fp32" is three words
    start_server "$tmp/serve_bf16.log" tiny --dtype bf16 --device $run
    curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' -d "$steps" \
        >"$tmp/steps.${run// /_}" || true
    [[ $run == *fp32 ]] || curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d "$scored" >"$tmp/scored.$run" || true
    stop_server
done
prompt_rows=$(python3 - "$tmp/scored.cuda" "$tmp/scored.cpu" <<'PY' 2>&1
import json, sys
gpu, cpu = (json.load(open(p))["choices"][0]["logprobs"] for p in sys.argv[1:3])
assert gpu["tokens"] == cpu["tokens"] and len(gpu["tokens"]) == 121, len(gpu["tokens"])
d = max(abs(x - y) for x, y in zip(gpu["token_logprobs"][1:120], cpu["token_logprobs"][1:120]))
assert d < 1e-5, d
print(f"{d:.2g}")
PY
) && pass "a bf16 model's 120-token prompt scored on the device = the cpu's (max diff $prompt_rows)" ||
    fail "a bf16 model's 120-token prompt scored on the device = the cpu's" "$prompt_rows"
rows=$(python3 - "$tmp/steps.cuda" "$tmp/steps.cpu" "$tmp/steps.cpu_--precision_fp32" <<'PY' 2>&1
import json, sys
gpu, cpu, fp32 = (json.load(open(p))["choices"][0]["logprobs"] for p in sys.argv[1:4])
def apart(a, b):
    assert a["tokens"] == b["tokens"] and len(a["tokens"]) == 6, (a["tokens"], b["tokens"])
    pairs = list(zip(a["token_logprobs"], b["token_logprobs"]))
    pairs += [(x[k], y[k]) for x, y in zip(a["top_logprobs"], b["top_logprobs"]) for k in x]
    return max(abs(x - y) for x, y in pairs)
same, fp32_rows = apart(gpu, cpu), apart(gpu, fp32)
assert same < 1e-5 and fp32_rows > 1e-4, (same, fp32_rows)
print(f"{same:.2g}; fp32 rows {fp32_rows:.2g} away")
PY
) && pass "a bf16 model's steps on the device = the cpu's bf16 rows (log-probabilities $rows)" ||
    fail "a bf16 model's steps on the device = the cpu's bf16 rows" "$rows"

expect_error "an unknown device is named" "^zaya: error: .*'tpu'" forward tiny --tokens 1,2 --out "$tmp/f.st" \
    --device tpu

# The speed rows of scripts/gpu_check.sh, made as it makes them (bench train with --phases, bench decode with --seqs,
# generated ids on both devices) on the emulated GPU with tiny shapes, and its table (scripts/gpu_table.py) read
# from them: a crash in these paths, or a JSON field the table no longer finds, would otherwise first show in the
# GPU run a session gets.
table_dir="$tmp/gpu_check"
mkdir -p "$table_dir"
expect_ok "bench train --device cuda --phases --json" bench train --device cuda --model tiny --batch 4 \
    --micro-batch 2 --seq 32 --precision bf16 --iters 1 --phases --json
echo "$out" >"$table_dir/train_bench.json"
expect_ok "bench decode --device cuda --seqs 2 --context-tokens 40 --json" bench decode --device cuda --model tiny \
    --dtype bf16 --prompt-tokens 12 --new-tokens 4 --seqs 2 --context-tokens 40 --json
echo "$out" >"$table_dir/decode_bench.json"
[[ $out == *'"precision":"bf16"'* ]] && pass "bench decode --device cuda reports its bf16 rows" ||
    fail "bench decode --device cuda reports its bf16 rows" "out: $out"
[[ $out == *'"batch_prefill_passes":1,'* ]] && pass "bench decode --device cuda --seqs 2: the 2 prompts in one pass" ||
    fail "bench decode --device cuda --seqs 2: the 2 prompts in one pass" "out: $out"
expect_error "bench decode --device cuda --precision fp32 of a bf16 model is refused, naming the GPU's rows" \
    "^zaya: error: --precision fp32 applies to the CPU decoder: the GPU decoder's linears take bf16 rows" \
    bench decode --device cuda --model tiny --dtype bf16 --prompt-tokens 4 --new-tokens 2 --precision fp32
for dev in cpu cuda; do
    "$ZAYA" generate tiny --dtype f32 --tokens 2,40,7,99 -n 6 --print-ids -q --temperature 0 --device "$dev" \
        >"$table_dir/generate_${dev}_greedy.ids" 2>&1
done
table=$(python3 "$SRC/scripts/gpu_table.py" "$table_dir" || true) # its parity rows fail: no parity runs here
expected_rows=("^train step tiny bf16 \(4×32 tokens, micro 2\) .* MFU .*%" "^  (fwd|bwd|step)\."
               "^  GPU memory +peak [0-9.]+ GiB of zaya's allocations, planned [0-9.]+ GiB"
               "^generate f32 cuda vs cpu, greedy +ok" "^decode tiny bf16 batch 1 vs HBM bound .* tok/s"
               "^decode tiny bf16, 2 sequences together .* their prompts together [0-9.]+ ms in 1 pass"
               "^decode tiny bf16 batch 1 without PDL"
               "^decode tiny bf16 after 40 tokens .* tok/s = .* of bf16 KV cache per token")
rows=$(grep -cE "$(IFS='|'; echo "${expected_rows[*]}")" <<<"$table" || true)
# 1 train row, its GPU memory, its 16 longest phases in 4 lines, 1 generate row, 4 decode rows.
[[ $rows -eq 11 && $table != *"speed: no result"* ]] && pass "gpu_check's table reads the bench and generate outputs" ||
    fail "gpu_check's table reads the bench and generate outputs" "$rows of 11 rows" "$table"

# GPU memory: the plan `zaya info --train --device cuda` prints (train/memory_device.cpp) against the peak of what the
# emulated device's allocations held (cuda::device_memory), for both matmul precisions, at a sequence length where
# the model- and batch-dependent items outweigh cuBLASLt's fixed 32 MiB. The error is taken relative to those items:
# a forgotten buffer (the LM head's chunk, the experts' bf16 rows, Newton–Schulz's workspace, the weights' bf16
# copies) is each several % of them.
eval_json=()
for prec in fp32 bf16; do
    expect_ok "bench train --device cuda --precision $prec --json (GPU memory)" bench train --device cuda --model tiny \
        --batch 2 --micro-batch 2 --seq 256 --precision "$prec" --iters 1 --json
    memory=$(python3 -c '
import json, sys
b = json.loads(sys.argv[1])
peak, planned = b["peak_device_bytes"], b["planned_device_bytes"]
varying = planned - b["planned_device_items"]["cuBLASLt"]
print(f"{(peak - planned) / varying:+.4f} {peak} {planned}")
' "$out")
    read -r rel peak planned <<<"$memory"
    python3 -c "import sys; sys.exit(0 if abs(float(sys.argv[1])) <= 0.01 else 1)" "$rel" &&
        pass "$prec: the GPU memory plan matches the emulated peak within 1% (peak $peak, planned $planned, $rel)" ||
        fail "$prec: the GPU memory plan matches the emulated peak within 1%" "peak $peak, planned $planned ($rel)" \
            "$out"
done
expect_ok "info --train --device cuda --precision bf16" info tiny --train --seq 256 --micro-batch 2 --device cuda \
    --precision bf16
grep -q "bf16 weights" <<<"$out" && grep -Eq "^  total +[0-9.]+ MiB += [0-9.]+ GiB" <<<"$out" &&
    pass "info --train --device cuda itemises the GPU plan" || fail "info --train --device cuda itemises the GPU plan" "$out"
# A GPU too small for the run: the allocation that fails names its size, what zaya holds and what the device has.
export ZAYA_EMU_DEVICE_BYTES=$((24 << 20))
expect_error "a full GPU names the allocation, what zaya holds and the device" \
    "^zaya: error: cannot allocate [0-9.]+ MiB on the GPU \(out of memory\): zaya holds [0-9.]+ GiB, the device has [0-9.]+ GiB free of 0.02 GiB; a smaller --micro-batch" \
    train "${args[@]}" --out "$tmp/oom" --device cuda
unset ZAYA_EMU_DEVICE_BYTES

echo "test_device_emu: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
